package grain

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// interrupts is a fake Interrupts with the semantics of actors/fixture: a
// gate parks at InventoryReserved without a payment outcome, an effect
// gate holds one step up to a generation, a skip is taken once by the
// terminal step.
type interrupts struct {
	mu         sync.Mutex
	gate       bool
	holdStep   order.Step
	holdMaxGen int64
	skip       bool
	began      []string // "<step>@<generation>" of every hold that began
	failPark   int      // Park fails this many more times

	parks, holdAsks atomic.Int64
}

func (f *interrupts) Park(_ context.Context, st order.State) (bool, error) {
	f.parks.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if st.Status != order.StatusInventoryReserved || st.PaymentID != "" || st.PaymentFailed {
		return false, nil
	}
	if f.failPark > 0 {
		f.failPark--
		return false, fmt.Errorf("%w: fixture store down", ErrStoreUnavailable)
	}
	return f.gate, nil
}

func (f *interrupts) HoldEffect(_ context.Context, _ order.State, step order.Step, generation int64) (bool, error) {
	f.holdAsks.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holdStep != order.StepNone && step == f.holdStep && generation <= f.holdMaxGen, nil
}

func (f *interrupts) HoldBegan(_ context.Context, _ order.State, step order.Step, generation int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.began = append(f.began, fmt.Sprintf("%s@%d", step, generation))
	return nil
}

func (f *interrupts) LeaveProjectionBehind(_ context.Context, _ order.State, endsOrder bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !endsOrder {
		return false, nil
	}
	skip := f.skip
	f.skip = false
	return skip, nil
}

func (f *interrupts) set(fn func(f *interrupts)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *interrupts) holdsBegun() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.began...)
}

var _ Interrupts = (*interrupts)(nil)

// request sends msg to the grain and requires an answer within a second:
// a held or parked order must not block its mailbox.
func (e *env) request(pid *actor.PID, msg any) any {
	e.t.Helper()
	res, err := e.sys.Root.RequestFuture(pid, msg, time.Second).Result()
	require.NoError(e.t, err, "the grain answers %T", msg)
	return res
}

func (e *env) types(id string) []string { return e.deps.Events.Types(id) }

var reservedTypes = []string{order.TypeOrderStarted, order.TypeInventoryReserved}

// A parked order (docs/contract.md, "Planned relocation resumes at payment")
// keeps serving its mailbox; once its gate is released, a resume finishes it
// from payment, its reservation made once.
func TestParkedOrderKeepsServingAndResumesOnRelease(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{gate: true}
	e.cfg.Interrupts = in
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return len(e.types("o-1")) == 2 }, "the order reaches InventoryReserved")
	require.Equal(t, reservedTypes, e.types("o-1"))
	e.eventually(func() bool { return in.parks.Load() >= 2 }, "and is parked there")
	res := e.request(pid, &contracts.RebuildOrderProjectionReq{OrderId: "o-1"})
	require.Equal(t, contracts.OrderStatus_InventoryReserved, res.(*contracts.RebuildOrderProjectionRes).GetState().GetStatus())
	require.Never(t, func() bool { return len(e.types("o-1")) > 2 }, 100*time.Millisecond, 5*time.Millisecond,
		"a parked order runs no step of its own")
	require.Zero(t, e.deps.Payment.TotalAuthorizeCalls.Load())

	e.request(pid, &contracts.ResumeOrderReq{OrderId: "o-1"})
	require.Never(t, func() bool { return len(e.types("o-1")) > 2 }, 50*time.Millisecond, 5*time.Millisecond,
		"a resume while the gate holds parks again")

	in.set(func(f *interrupts) { f.gate = false })
	e.request(pid, &contracts.ResumeOrderReq{OrderId: "o-1"})
	e.eventually(func() bool { return statusOf(t, e.types("o-1")) == order.StatusConfirmed }, "released and resumed, it finishes")
	require.Equal(t, int32(1), e.inv.calls.Load(), "reserved once")
	require.Equal(t, int64(1), e.deps.Payment.TotalAuthorizeCalls.Load())
}

// A gate that stops the order at InventoryReserved (docs/contract.md,
// "Continue resumes from payment") lets an explicit continue through: the
// command runs its step whole, and the background continuation finishes the
// order.
func TestStoppedOrderProceedsOnAnExplicitContinue(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{gate: true}
	e.cfg.Interrupts = in
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)
	e.eventually(func() bool { return in.parks.Load() >= 2 }, "parked at InventoryReserved")

	res := e.request(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"})
	require.Equal(t, contracts.OrderStatus_Confirmed, res.(*contracts.ContinueOrderWorkflowRes).GetState().GetStatus(),
		"the continue resumes from payment (recorded with the confirmation it leads to)")
	e.eventually(func() bool { return statusOf(t, e.types("o-1")) == order.StatusConfirmed }, "and the order finishes")
	require.Equal(t, int32(1), e.inv.calls.Load())
}

// A failed look at the gate is a failed step: retried, and the order is
// neither run past its gate nor stuck.
func TestFailedGateLookIsRetried(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{gate: true, failPark: 3}
	e.cfg.Interrupts = in
	reg := e.withMetrics()
	e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)
	e.eventually(func() bool { return value(t, reg, MetricStepRetries, nil) == 3 && in.parks.Load() >= 5 }, "retried, then parked")
	require.Equal(t, 3.0, value(t, reg, MetricStepRetries, atStep(order.StepAuthorizePayment)), "the gate stands before the payment")
	require.Equal(t, reservedTypes, e.types("o-1"))
	require.Zero(t, value(t, reg, MetricStepPermanentFailures, nil))
}

// A step held between its effect and its record keeps the mailbox free;
// on release the held effect itself is recorded, not made again.
func TestHeldEffectKeepsServingAndIsRecordedOnRelease(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{holdStep: order.StepReserveInventory, holdMaxGen: 2}
	e.cfg.Interrupts = in
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return len(in.holdsBegun()) == 1 }, "the hold begins")
	require.Equal(t, []string{"ReserveInventory@2"}, in.holdsBegun())
	require.Equal(t, int32(1), e.inv.calls.Load(), "the effect is made")
	require.Equal(t, []string{order.TypeOrderStarted}, e.types("o-1"), "and not recorded")
	asks := in.holdAsks.Load()
	res := e.request(pid, &contracts.RebuildOrderProjectionReq{OrderId: "o-1"})
	require.Equal(t, contracts.OrderStatus_Created, res.(*contracts.RebuildOrderProjectionRes).GetState().GetStatus())
	e.eventually(func() bool { return in.holdAsks.Load() > asks+2 }, "the hold is asked again on a timer")
	require.Equal(t, []string{order.TypeOrderStarted}, e.types("o-1"))

	in.set(func(f *interrupts) { f.holdStep = order.StepNone })
	e.eventually(func() bool { return statusOf(t, e.types("o-1")) == order.StatusConfirmed }, "released, the order finishes")
	require.Equal(t, int32(1), e.inv.calls.Load(), "the held effect was recorded, not made again")
	require.Len(t, in.holdsBegun(), 1, "one hold began")
}

// An owner fenced off while it holds an effect cannot record it: on
// release its append is refused, it releases its authority as a fenced
// owner does, and stops.
func TestHeldEffectOfAFencedOwnerIsRefused(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{holdStep: order.StepReserveInventory, holdMaxGen: 2}
	e.cfg.Interrupts = in
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)
	e.eventually(func() bool { return len(in.holdsBegun()) == 1 }, "the hold begins")

	_, err := e.deps.Events.RaiseFence(context.Background(), "o-1", 3)
	require.NoError(t, err)
	in.set(func(f *interrupts) { f.holdStep = order.StepNone })
	e.eventually(func() bool { return e.stopped(pid) }, "the fenced owner stops")
	require.Equal(t, []string{order.TypeOrderStarted}, e.types("o-1"), "nothing it held was recorded")
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases())
}

// A skip of the terminal projection (docs/contract.md,
// "Continue repairs a terminal projection") records the terminal append (the
// payment with the confirmation) with the read model at the version before
// it, once; a continue repairs it.
func TestTerminalProjectionIsLeftBehindOnce(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{skip: true}
	e.cfg.Interrupts = in
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return statusOf(t, e.types("o-1")) == order.StatusConfirmed }, "the order finishes")
	p, v, ok := e.deps.ReadModel.Lookup("o-1")
	require.True(t, ok)
	require.EqualValues(t, 2, v, "the terminal projection was left behind")
	require.Equal(t, contracts.OrderStatus_InventoryReserved, p.GetStatus())

	res := e.request(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"})
	require.Equal(t, contracts.OrderStatus_Confirmed, res.(*contracts.ContinueOrderWorkflowRes).GetState().GetStatus())
	p, v, _ = e.deps.ReadModel.Lookup("o-1")
	require.EqualValues(t, 4, v, "the continue repaired it")
	require.Equal(t, contracts.OrderStatus_Confirmed, p.GetStatus())
}

// A parked order may be passivated when idle (it waits for a command, not
// for itself); the next activation parks it again.
func TestParkedOrderIsPassivatedWhenIdle(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	in := &interrupts{gate: true}
	e.cfg.Interrupts = in
	e.cfg.IdleTimeout = 30 * time.Millisecond
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return e.stopped(pid) }, "the parked order is passivated")
	require.Equal(t, reservedTypes, e.types("o-1"))
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases(), "its authority released, its generation kept")
}
