package takeovertest

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

// freezeBudget bounds the SIGSTOP: protoactor's automanaged health check
// (every 500 ms, 2 s HTTP timeout) would drop a member silent for longer,
// and the test wants a zombie that nobody saw leave: one that wakes up
// believing it still owns its orders.
const freezeBudget = 1600 * time.Millisecond

// TestZombieCannotWrite: workflow-a is paused (SIGSTOP) with a step
// pending on each of its orders: the module was called, the append not
// made. The operator takes its orders over with force while it is still
// in the topology, and the new owner advances them to Confirmed. Then
// workflow-a runs again (SIGCONT) and its pending steps go on to their
// appends: every one is refused by the fence and logged, none is
// accepted (the streams do not change), and the read model equals the
// fold of the stream.
func TestZombieCannotWrite(t *testing.T) {
	e := startCluster(t)
	victim := localcluster.WorkflowA
	onVictim, elsewhere := e.holdOn(victim, everyStep[:2]) // pending after Reserve and after Authorize
	all := append(append([]heldOrder{}, onVictim...), elsewhere...)
	ctx := ctxT(t, 2*time.Minute)
	for _, h := range elsewhere {
		require.NoError(t, e.fx.ReleaseEffectGate(ctx, h.key))
	}
	for _, h := range onVictim {
		e.checkHeld(h)
	}

	logFrom, err := localcluster.LogSize(e.c.LogPath(victim))
	require.NoError(t, err)
	pid := e.c.PID(victim)
	require.NotZero(t, pid)
	var contOnce sync.Once
	var contAt time.Time
	cont := func() {
		contOnce.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Logf("SIGCONT %s pid %d: %v", victim, pid, err)
			}
			contAt = time.Now()
		})
	}
	t.Cleanup(cont) // never leave it stopped
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stoppedAt := time.Now()
	require.Eventually(t, func() bool { return proctest.ProcState(pid) == "T" }, time.Second, 5*time.Millisecond, "%s did not stop", victim)

	status, body := e.admin(http.MethodPost, "/admin/members/"+victim+"/takeover?force=true&caller=zombie-test")
	require.Equal(t, http.StatusOK, status, "%s", body)
	rep := decodeReply(t, body)
	tookAt := time.Now()
	require.Empty(t, rep.Failed)
	var took []string
	for _, o := range rep.Orders {
		took = append(took, o.OrderID)
		require.Equal(t, "taken-over", o.Outcome)
		require.True(t, o.OwnerLive, "order %s: the paused owner was still in the topology; force evicted it", o.OrderID)
		require.EqualValues(t, 1, o.OldGeneration)
		require.EqualValues(t, 2, o.NewGeneration)
	}
	require.Equal(t, orderIDs(onVictim), took)

	// The new owner advances them while the old one is paused.
	var wg sync.WaitGroup
	answers := make([]string, len(onVictim))
	for i, h := range onVictim {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, r, err := e.api.Continue(ctx, h.orderID)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			answers[i] = r.String()
			if r.Status == http.StatusOK {
				answers[i] = "200"
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	terminalPaused := false
	deadline := time.NewTimer(time.Until(stoppedAt.Add(freezeBudget)))
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
wait:
	for {
		select {
		case <-deadline.C:
			break wait
		case <-poll.C:
			if e.allTerminal(onVictim) {
				terminalPaused = true
				break wait
			}
		}
	}
	cont()
	<-done
	for i, a := range answers {
		require.Equal(t, "200", a, "continue %s after the forced takeover", onVictim[i].orderID)
	}
	final := e.waitTerminal(orderIDs(all), 30*time.Second)
	advancedAt := time.Now()
	t.Logf("%s paused %s; the new owner had advanced every order before SIGCONT: %v",
		victim, contAt.Sub(stoppedAt).Round(time.Millisecond), terminalPaused)

	// What the new owner recorded.
	before := map[string][]eventstore.Envelope{}
	for _, h := range all {
		before[h.orderID] = e.checkStream(h.orderID, h.c.events)
	}

	// The old owner still holds its pending steps at generation 1; let
	// them go on to their appends, with its old fence.
	releasedAt := time.Now()
	for _, h := range onVictim {
		require.NoError(t, e.fx.ReleaseEffectGate(ctx, h.key))
	}
	var refused []string
	require.Eventually(t, func() bool {
		refused = refusedAppends(t, e.c.LogPath(victim), logFrom, 1)
		return len(refused) >= len(onVictim)
	}, 20*time.Second, 50*time.Millisecond, "the zombie's appends were not refused")
	refusedAt := time.Now()
	for _, id := range refused {
		require.True(t, slices.Contains(orderIDs(onVictim), id), "refused append of %s, not a taken-over order", id)
	}

	// None was accepted: every stream is exactly what the new owner wrote.
	for _, h := range all {
		after := e.checkStream(h.orderID, h.c.events)
		require.Equal(t, before[h.orderID], after, "order %s: the zombie changed the stream", h.orderID)
		e.checkReadModelIsTheFold(h.orderID, after)
		require.Equal(t, h.c.final, final[h.orderID])
	}
	e.checkEffects(all)
	t.Logf("FIGURE zombie: %d appends refused (%d pending steps), 0 accepted; SIGSTOP → forced takeover %s → orders terminal %s; release → refusals logged %s",
		len(refused), len(onVictim), tookAt.Sub(stoppedAt).Round(time.Millisecond), advancedAt.Sub(tookAt).Round(time.Millisecond),
		refusedAt.Sub(releasedAt).Round(time.Millisecond))
}

// allTerminal reports whether every order's read model is terminal, one
// look each.
func (e *env) allTerminal(hs []heldOrder) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range hs {
		st, _, err := e.api.GetOrder(ctx, h.orderID)
		if err != nil || st == nil {
			return false
		}
		if s := st.GetStatus().String(); s != "Confirmed" && s != "Failed" {
			return false
		}
	}
	return true
}
