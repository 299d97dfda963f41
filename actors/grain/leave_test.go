package grain

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// The grain's way out, driven by messages alone: what a leaving grain
// answers, what a fenced one does to its Location record, and when an
// activation gives its generation back. The record side is read from the
// fake placement's releases (true: the generation is given back).

// heldInventory holds the first Reserve until let is closed, so a test can
// queue messages behind a turn that is still running.
type heldInventory struct {
	commerce.Inventory
	entered chan struct{}
	let     chan struct{}
}

func (h *heldInventory) Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error) {
	select {
	case h.entered <- struct{}{}:
		<-h.let
	default:
	}
	return h.Inventory.Reserve(ctx, req)
}

// holdReserve rebuilds the env's service so that the first Reserve waits.
func (e *env) holdReserve() *heldInventory {
	e.t.Helper()
	h := &heldInventory{Inventory: e.inv, entered: make(chan struct{}, 1), let: make(chan struct{})}
	e.deps.Config.Inventory = h
	svc, err := workflow.New(e.deps.Config)
	require.NoError(e.t, err)
	e.cfg.Service, e.svc = svc, svc
	e.t.Cleanup(func() {
		select {
		case <-h.let:
		default:
			close(h.let)
		}
	})
	return h
}

func (h *heldInventory) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the grain never called Reserve")
	}
}

// ask sends msg to the grain now and returns the reply once it comes.
func (e *env) ask(pid *actor.PID, msg any) func() any {
	f := e.sys.Root.RequestFuture(pid, msg, 5*time.Second)
	return func() any {
		e.t.Helper()
		res, err := f.Result()
		require.NoError(e.t, err, "%T got no reply", msg)
		return res
	}
}

func requireRetry(t *testing.T, reply any, reason string) {
	t.Helper()
	r, ok := reply.(*placement.Retry)
	require.True(t, ok, "want a Retry, got %T %v", reply, reply)
	require.Equal(t, reason, r.GetReason())
}

// Commands queued behind a close are answered Retry, so their callers
// resend them to the next owner; the grain runs no step once it decided
// to leave, and releases its record once, keeping the generation.
func TestLeavingGrainAnswersRetryAndRunsNoStep(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	held := e.holdReserve()
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)
	held.waitEntered(t)

	// Both wait behind the running step, in this order.
	closed := e.ask(pid, &contracts.CloseOrderReq{OrderId: "o-1"})
	continued := e.ask(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"})
	close(held.let)

	res, ok := closed().(*contracts.CloseOrderRes)
	require.True(t, ok, "the close is answered")
	require.Equal(t, "o-1", res.GetOrderId())
	require.EqualValues(t, 2, res.GetGeneration())
	requireRetry(t, continued(), "owner is leaving")

	e.eventually(func() bool { return e.stopped(pid) }, "a closed grain stops")
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases(), "one release, by the close, keeping the generation")
	require.Equal(t, []string{"OrderStartedEvent", "InventoryReservedEvent"}, e.deps.Events.Types("o-1"),
		"the step that was running finished; none ran after the close")
	require.Zero(t, e.deps.Payment.TotalAuthorizeCalls.Load())
}

// A newer owner raised the fence while the grain's step was running: the
// append is refused, the grain releases the record only as the fenced
// owner (keeping the generation), stops, and answers what was queued
// behind the step Retry.
func TestFencedStepReleasesAndStops(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	held := e.holdReserve()
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)
	held.waitEntered(t)

	_, err := e.svc.Open(context.Background(), "o-1", 3)
	require.NoError(t, err, "a newer owner opens the stream")
	queued := e.ask(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"})
	close(held.let)

	requireRetry(t, queued(), "owner is leaving")
	e.eventually(func() bool { return e.stopped(pid) }, "a fenced grain stops")
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases(), "released once as the fenced owner, the generation kept")
	require.Equal(t, []string{"OrderStartedEvent"}, e.deps.Events.Types("o-1"), "the fenced owner recorded nothing")
	require.Zero(t, e.deps.Payment.TotalAuthorizeCalls.Load())
}

// A command that meets the fence is answered Retry, not an error: nothing
// it did was recorded, and the newer owner will take it.
func TestFencedCommandIsAnsweredRetry(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	// The record never confirms, so the grain runs no step of its own and
	// the command below is the first to reach the store.
	e.place.confirms = []placement.Confirmation{placement.Pending}
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)
	_, err := e.svc.Open(context.Background(), "o-1", 3)
	require.NoError(t, err, "a newer owner opens the stream")

	requireRetry(t, e.ask(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"})(), "owner fenced off by a newer one")
	e.eventually(func() bool { return e.stopped(pid) }, "a fenced grain stops")
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases(), "released once as the fenced owner, the generation kept")
	require.Equal(t, []string{"OrderStartedEvent"}, e.deps.Events.Types("o-1"), "the fenced owner recorded nothing")
}

// An activation that owns nothing (no stream, and the command created
// none) gives its generation back when it was a cold activation (one a
// takeover caused is one too), and leaves the record alone otherwise: a
// relocation's record is not its own.
func TestActivationThatOwnsNothingDiscardsOnlyWhenCold(t *testing.T) {
	for _, c := range []struct {
		name     string
		reason   placement.ActivationReason
		releases []location.Generation
	}{
		{"cold", placement.ActivationReason_ACTIVATION_REASON_COLD, []location.Generation{location.GiveBackGeneration}},
		{"takeover", placement.ActivationReason_ACTIVATION_REASON_TAKEOVER, []location.Generation{location.GiveBackGeneration}},
		{"relocation", placement.ActivationReason_ACTIVATION_REASON_RELOCATION, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			pid := e.spawn("o-none", 1, c.reason)
			require.NoError(t, e.waitOpened().err)

			reply := e.ask(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-none"})()
			we, ok := reply.(*contracts.WorkflowError)
			require.True(t, ok, "want a WorkflowError, got %T %v", reply, reply)
			require.Equal(t, contracts.ErrorReason_ERROR_REASON_NOT_FOUND, we.GetReason())

			e.eventually(func() bool { return e.stopped(pid) }, "an activation that owns nothing stops")
			require.Equal(t, c.releases, e.place.releases())
			require.Empty(t, e.deps.Events.Types("o-none"), "no stream was created")
		})
	}
}
