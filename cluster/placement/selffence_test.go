package placement

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runWatch runs watchSelf in the background; the channel yields its
// result and when it returned.
type watchResult struct {
	err error
	at  time.Time
}

func runWatch(ctx context.Context, cfg SelfFenceConfig, probe func(context.Context) (location.GoneMember, bool, error)) <-chan watchResult {
	out := make(chan watchResult, 1)
	go func() {
		err := watchSelf(ctx, cfg.withDefaults(), probe, quietLog())
		out <- watchResult{err, time.Now()}
	}()
	return out
}

func TestWatchSelfFencesOnOwnGoneRecord(t *testing.T) {
	var gone atomic.Bool
	var probes atomic.Int32
	res := runWatch(ctx(t), SelfFenceConfig{Lease: 10 * time.Second, Interval: 10 * time.Millisecond},
		func(context.Context) (location.GoneMember, bool, error) {
			probes.Add(1)
			if gone.Load() {
				return location.GoneMember{MemberID: "m1", Node: "workflow-a", LeftAtUnixMs: 1}, true, nil
			}
			return location.GoneMember{}, false, nil
		})
	require.Eventually(t, func() bool { return probes.Load() >= 3 }, 5*time.Second, 5*time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("fenced while not gone: %v", r.err)
	default:
	}
	gone.Store(true)
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrEvicted)
		require.NotErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, "workflow-a")
	case <-time.After(5 * time.Second):
		t.Fatal("no fence after the member was recorded gone")
	}
}

// A store that stops answering fences the member once the lease ran out
// since the last successful read, not before.
func TestWatchSelfFencesWhenTheLeaseRunsOut(t *testing.T) {
	const lease = 300 * time.Millisecond
	var down atomic.Bool
	var downAt atomic.Int64
	boom := errors.New("connection refused")
	res := runWatch(ctx(t), SelfFenceConfig{Lease: lease, Interval: 10 * time.Millisecond},
		func(context.Context) (location.GoneMember, bool, error) {
			if down.Load() {
				return location.GoneMember{}, false, boom
			}
			return location.GoneMember{}, false, nil
		})
	downAt.Store(time.Now().UnixNano())
	down.Store(true)
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, boom.Error(), "the last failure is named")
		took := r.at.Sub(time.Unix(0, downAt.Load()))
		t.Logf("fenced %s after the store went away (lease %s)", took, lease)
		// The last good read may have begun up to one interval before.
		require.GreaterOrEqual(t, took, lease-20*time.Millisecond, "fenced before the lease ran out")
	case <-time.After(5 * time.Second):
		t.Fatal("no fence although the store stayed unreachable past the lease")
	}
}

// A probe that hangs is as good as a failed one: the lease still runs out.
func TestWatchSelfFencesWhenTheStoreHangs(t *testing.T) {
	res := runWatch(ctx(t), SelfFenceConfig{Lease: 200 * time.Millisecond, Interval: 10 * time.Millisecond},
		func(c context.Context) (location.GoneMember, bool, error) {
			<-c.Done()
			return location.GoneMember{}, false, c.Err()
		})
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("a hanging store never fenced")
	}
}

// Failures shorter than the lease, with successful reads between them,
// never fence: a Redis restart is ridden out.
func TestWatchSelfRidesOutShortOutages(t *testing.T) {
	const lease = 400 * time.Millisecond
	var n atomic.Int32
	c, cancel := context.WithTimeout(context.Background(), 4*lease)
	defer cancel()
	res := runWatch(c, SelfFenceConfig{Lease: lease, Interval: 10 * time.Millisecond},
		func(context.Context) (location.GoneMember, bool, error) {
			// Ten failures (about 100 ms), then one success, over and over.
			if n.Add(1)%11 != 0 {
				return location.GoneMember{}, false, errors.New("LOADING")
			}
			return location.GoneMember{}, false, nil
		})
	r := <-res
	require.NoError(t, r.err, "fenced although every outage was shorter than the lease")
	require.Greater(t, n.Load(), int32(30), "the watch kept reading")
}

func TestSelfFenceConfigDefaults(t *testing.T) {
	c := SelfFenceConfig{}.withDefaults()
	require.Equal(t, 10*time.Second, c.Lease)
	require.Equal(t, 500*time.Millisecond, c.Interval)
	c = SelfFenceConfig{Lease: 100 * time.Millisecond, Interval: time.Second}.withDefaults()
	require.Equal(t, 50*time.Millisecond, c.Interval, "a check at least twice per lease")
}
