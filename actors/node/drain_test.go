package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

func hostedGrains(n int) []placement.HostedGrain {
	out := make([]placement.HostedGrain, n)
	for i := range out {
		id := fmt.Sprintf("ord-%d", i)
		out[i] = placement.HostedGrain{Kind: grain.KindName, Identity: id, PID: actor.NewPID("nonhost", id), Generation: 1}
	}
	return out
}

func TestDrainGrainsKeepsToItsParallelism(t *testing.T) {
	var inFlight, peak atomic.Int64
	rep, errs := drainGrains(context.Background(), hostedGrains(200), DrainConfig{Parallelism: 8, GrainTimeout: time.Second}.withDefaults(),
		slog.New(slog.DiscardHandler), func(*actor.PID, time.Duration) (grain.DrainOutcome, error) {
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			return grain.DrainRelocated, nil
		})
	require.Empty(t, errs)
	require.Equal(t, 200, rep.Relocated)
	require.LessOrEqual(t, peak.Load(), int64(8))
	require.Greater(t, peak.Load(), int64(1), "grains hand off in parallel")
}

// Each outcome is counted; closed orders and failures are logged by order
// id, the failures also returned, so an operator can find every one.
func TestDrainGrainsCountsLogsAndReturnsFailures(t *testing.T) {
	outcomes := map[string]grain.DrainOutcome{
		"ord-0": grain.DrainReleased, "ord-1": grain.DrainRelocated, "ord-2": grain.DrainClosed,
		"ord-3": grain.DrainNotFound, "ord-4": grain.DrainLeft, "ord-5": grain.DrainClosed,
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	boom := errors.New("boom")
	rep, errs := drainGrains(context.Background(), hostedGrains(7), DrainConfig{}.withDefaults(), log,
		func(pid *actor.PID, _ time.Duration) (grain.DrainOutcome, error) {
			if o, ok := outcomes[pid.Id]; ok {
				return o, nil
			}
			return 0, boom
		})
	require.Equal(t, DrainReport{Hosted: 7, Released: 1, Relocated: 1, Closed: 2, NotFound: 1, Left: 1, Failed: 1}, rep)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], boom)
	require.ErrorContains(t, errs[0], "ord-6")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var closed []string
	for _, l := range lines {
		if strings.Contains(l, `msg="`+DrainClosedMessage+`"`) {
			closed = append(closed, l)
		}
	}
	require.Len(t, closed, 2)
	require.Contains(t, logs.String(), "order=ord-2")
	require.Contains(t, logs.String(), "order=ord-5")
	require.Contains(t, logs.String(), "order=ord-6")
}

func TestDrainGrainsStopsAskingWhenTheBudgetRunsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var asked, longest atomic.Int64
	rep, errs := drainGrains(ctx, hostedGrains(100), DrainConfig{Parallelism: 2, GrainTimeout: time.Second}.withDefaults(),
		slog.New(slog.DiscardHandler), func(_ *actor.PID, timeout time.Duration) (grain.DrainOutcome, error) {
			asked.Add(1)
			for l := longest.Load(); int64(timeout) > l && !longest.CompareAndSwap(l, int64(timeout)); l = longest.Load() {
			}
			time.Sleep(10 * time.Millisecond)
			return grain.DrainReleased, nil
		})
	require.Less(t, asked.Load(), int64(100))
	require.LessOrEqual(t, time.Duration(longest.Load()), 50*time.Millisecond, "no grain is waited for past the budget")
	require.Equal(t, 100, rep.Released+rep.NotSent)
	require.Positive(t, rep.NotSent)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], context.DeadlineExceeded)
}
