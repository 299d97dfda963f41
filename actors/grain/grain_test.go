package grain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// These tests host one order grain on a plain actor system (no cluster,
// no remoting), so they run under -race. The placement and the stores are
// fakes; the Location Store and the Redis stores have their own contract
// suites against a real redis-server.

// fakePlacement is a fake placement.Placement whose Confirm answers from a
// script and which records releases.
type fakePlacement struct {
	mu       sync.Mutex
	confirms []placement.Confirmation // answered in order; the last repeats
	asked    int
	released []location.Generation // what each release did with the generation
}

func (p *fakePlacement) Release(_ context.Context, _, _ string, _ *actor.PID, gen location.Generation) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, gen)
	return nil
}

func (p *fakePlacement) Confirm(context.Context, string, string, *actor.PID, int64) (placement.Confirmation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := min(p.asked, len(p.confirms)-1)
	p.asked++
	return p.confirms[i], nil
}

func (p *fakePlacement) Move(context.Context, placement.MovePlan) (location.Record, error) {
	return location.Record{}, errors.New("not supported by the fake")
}
func (p *fakePlacement) NodeNames(context.Context) (map[string]string, error) { return nil, nil }
func (p *fakePlacement) Self() string                                         { return "member-1" }

func (p *fakePlacement) releases() []location.Generation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]location.Generation(nil), p.released...)
}

func (p *fakePlacement) confirmsAsked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

// flakyInventory fails Reserve with a store outage while failures > 0,
// and panics once when panicOnce is set.
type flakyInventory struct {
	commerce.Inventory
	corrupt   atomic.Bool
	failures  atomic.Int32
	panicOnce atomic.Bool
	calls     atomic.Int32
}

func (f *flakyInventory) Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error) {
	f.calls.Add(1)
	if f.panicOnce.Swap(false) {
		panic("inventory client bug")
	}
	if f.corrupt.Load() {
		return nil, fmt.Errorf("%w: reservation record is not JSON", commerce.ErrCorrupt)
	}
	if f.failures.Add(-1) >= 0 {
		return nil, fmt.Errorf("%w: connection refused", commerce.ErrUnavailable)
	}
	return f.Inventory.Reserve(ctx, req)
}

// flakyEvents fails Open with a store outage while openFailures > 0.
type flakyEvents struct {
	eventstore.Store
	openFailures atomic.Int32
}

func (f *flakyEvents) Open(ctx context.Context, id string, gen int64) (eventstore.Fence, []eventstore.Envelope, error) {
	if f.openFailures.Add(-1) >= 0 {
		return eventstore.Fence{}, nil, fmt.Errorf("%w: LOADING Redis is loading the dataset in memory", eventstore.ErrUnavailable)
	}
	return f.Store.Open(ctx, id, gen)
}

type opened struct {
	err     error
	failure placement.ActivationFailure
}

type env struct {
	t      *testing.T
	sys    *actor.ActorSystem
	deps   *workflowtest.Deps
	inv    *flakyInventory
	events *flakyEvents
	svc    *workflow.Service
	cfg    Config
	place  *fakePlacement
	opens  chan opened
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	d := workflowtest.NewDeps()
	require.NoError(t, d.Inventory.SetStock(ctx, "SKU-1", 10))
	require.NoError(t, d.Payment.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	e := &env{t: t, sys: actor.NewActorSystem(), deps: d, place: &fakePlacement{confirms: []placement.Confirmation{placement.Confirmed}},
		opens: make(chan opened, 4)}
	e.inv = &flakyInventory{Inventory: d.Inventory}
	e.events = &flakyEvents{Store: d.Events}
	d.Config.Inventory, d.Config.Events = e.inv, e.events
	svc, err := workflow.New(d.Config)
	require.NoError(t, err)
	e.svc = svc
	e.cfg = Config{
		Service: svc, RetryMin: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond, TurnTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	t.Cleanup(func() { e.sys.Shutdown() })
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// spawn hosts a grain for id at gen as an activator would.
func (e *env) spawn(id string, gen int64, reason placement.ActivationReason) *actor.PID {
	return e.spawnActivation(id, gen, reason, false)
}

// spawnMinted is spawn for an identity its requester minted.
func (e *env) spawnMinted(id string) *actor.PID {
	return e.spawnActivation(id, 1, placement.ActivationReason_ACTIVATION_REASON_COLD, true)
}

func (e *env) spawnActivation(id string, gen int64, reason placement.ActivationReason, minted bool) *actor.PID {
	act := placement.NewActivation(workflowtest.Kind, id, gen, reason, e.place, func(_ *actor.PID, err error, failure placement.ActivationFailure) {
		e.opens <- opened{err: err, failure: failure}
	})
	act.Minted = minted
	return e.sys.Root.Spawn(placement.WithActivation(props(e.cfg), act))
}

func (e *env) waitOpened() opened {
	e.t.Helper()
	select {
	case o := <-e.opens:
		return o
	case <-time.After(5 * time.Second):
		e.t.Fatal("the grain never reported its open")
		return opened{}
	}
}

// started records an order's start straight through the service, as an
// earlier owner did: the stream holds OrderStartedEvent (Created).
func (e *env) started(id string) {
	e.t.Helper()
	ctx := context.Background()
	o, err := e.svc.Open(ctx, id, 1)
	require.NoError(e.t, err)
	_, recorded, err := e.svc.Start(ctx, o, e.deps.StartReq(id, "key-"+id, "pm-ok"))
	require.NoError(e.t, err)
	require.True(e.t, recorded)
}

func statusOf(t *testing.T, types []string) order.Status {
	t.Helper()
	if len(types) == 0 {
		return ""
	}
	switch types[len(types)-1] {
	case "OrderConfirmedEvent":
		return order.StatusConfirmed
	case "OrderFailedEvent":
		return order.StatusFailed
	}
	return order.StatusCreated
}

func (e *env) eventually(cond func() bool, msg string) {
	e.t.Helper()
	require.Eventually(e.t, cond, 5*time.Second, 5*time.Millisecond, msg)
}

func (e *env) stopped(pid *actor.PID) bool {
	_, ok := e.sys.ProcessRegistry.GetLocal(pid.Id)
	return !ok
}

func TestOpenFailureAbortsTheActivation(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.events.openFailures.Store(1)
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)

	o := e.waitOpened()
	require.ErrorIs(t, o.err, eventstore.ErrUnavailable)
	require.Equal(t, placement.ActivationFailure_ACTIVATION_FAILURE_STORE_UNAVAILABLE, o.failure, "a store that did not answer is reported as such, so the caller answers 503 and not 500")
	e.eventually(func() bool { return e.stopped(pid) }, "a grain whose open failed stops")
	require.Empty(t, e.place.releases(), "nothing was recorded, so nothing is released")
	require.Equal(t, int32(0), e.inv.calls.Load())
}

func TestCorruptStreamIsAPermanentOpenFailure(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.deps.Events.Corrupt("o-1", 1, []byte("not an event"))
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)

	o := e.waitOpened()
	require.ErrorIs(t, o.err, eventstore.ErrCorrupt)
	require.Equal(t, placement.ActivationFailure_ACTIVATION_FAILURE_OPEN_FAILED, o.failure)
	e.eventually(func() bool { return e.stopped(pid) }, "a grain whose open failed stops")
}

func TestColdActivationResumesOnlyOnceRecordedReady(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.place.confirms = []placement.Confirmation{placement.Pending, placement.Pending, placement.Confirmed}
	e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed },
		"a cold activation of an unfinished order finishes it without any command")
	require.GreaterOrEqual(t, e.place.confirmsAsked(), 3, "no step ran before the record named the grain Ready")
	require.Equal(t, int32(1), e.inv.calls.Load(), "inventory reserved exactly once")
	require.Equal(t, int64(1), e.deps.Payment.TotalAuthorizeCalls.Load(), "payment authorized exactly once")
}

func TestSupersededActivationStopsWithoutTouchingTheRecord(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.place.confirms = []placement.Confirmation{placement.Superseded}
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return e.stopped(pid) }, "an activation nobody recorded stops")
	require.Empty(t, e.place.releases(), "the record is not this grain's to release")
	require.Equal(t, int32(0), e.inv.calls.Load(), "a grain that was never recorded Ready runs no step")
	require.Equal(t, []string{"OrderStartedEvent"}, e.deps.Events.Types("o-1"))
}

func TestTransientStepFailuresAreRetriedByTheOwner(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.inv.failures.Store(5)
	reg := e.withMetrics()
	e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed },
		"the owner retries a step that failed on a store outage until it succeeds")
	require.Equal(t, int32(6), e.inv.calls.Load(), "five failed tries, then one that reserved")
	require.Equal(t, 5.0, value(t, reg, MetricStepRetries, atStep(order.StepReserveInventory)), "each retry counted at its step")
	require.Equal(t, 5.0, value(t, reg, MetricStepRetries, nil), "and at no other")
	require.Zero(t, value(t, reg, MetricStepPermanentFailures, nil))
	require.Equal(t, int64(1), e.deps.Payment.TotalAuthorizeCalls.Load())
}

func TestPanicRestartsTheGrainAndItCarriesOn(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.inv.panicOnce.Store(true)
	reg := e.withMetrics()
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed },
		"a grain restarted after a panic opens again and finishes the order")
	require.Equal(t, 1.0, value(t, reg, MetricGrainRestarts, nil))
	require.False(t, e.stopped(pid), "the restarted grain still serves")
	res, err := e.sys.Root.RequestFuture(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"}, 2*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, contracts.OrderStatus_Confirmed, res.(*contracts.ContinueOrderWorkflowRes).GetState().GetStatus())
}

func TestStartWhoseMarkFailedIsRepairedByTheOwner(t *testing.T) {
	e := newEnv(t)
	idem := &flakyIdempotency{Idempotency: e.deps.Idempotency}
	idem.failures.Store(3)
	e.deps.Config.Idempotency = idem
	svc, err := workflow.New(e.deps.Config)
	require.NoError(t, err)
	e.cfg.Service, e.svc = svc, svc
	pid := e.spawn("o-1", 1, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	req := e.deps.StartReq("o-1", "key-1", "pm-ok")
	// Only a mapping the start's unit cannot mark is marked on its own.
	e.deps.Idempotency.MoveToOldLayout("key-1")
	res, err := e.sys.Root.RequestFuture(pid, req, 2*time.Second).Result()
	require.NoError(t, err)
	_, isErr := res.(*contracts.WorkflowError)
	require.True(t, isErr, "the start reports that marking its key failed")

	e.eventually(func() bool { return e.deps.Idempotency.Status("key-1") == commerce.MappingStarted },
		"the owner marks the key started by itself")
	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed },
		"and finishes the order without a retry of the start")
}

type flakyIdempotency struct {
	commerce.Idempotency
	failures atomic.Int32
}

func (f *flakyIdempotency) MarkStarted(ctx context.Context, key, orderID string) error {
	if f.failures.Add(-1) >= 0 {
		return fmt.Errorf("%w: i/o timeout", commerce.ErrUnavailable)
	}
	return f.Idempotency.MarkStarted(ctx, key, orderID)
}

func TestIdlePassivationKeepsAnOrderWithWorkLeft(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.inv.failures.Store(1 << 30)
	e.cfg.IdleTimeout = 20 * time.Millisecond
	e.cfg.RetryMax = 5 * time.Millisecond
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	e.eventually(func() bool { return e.inv.calls.Load() > 20 }, "the step keeps being retried")
	require.False(t, e.stopped(pid))
	require.Empty(t, e.place.releases(), "an order with a step to run is not passivated")

	e.inv.failures.Store(0)
	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed }, "the order finishes")
	e.eventually(func() bool { return e.stopped(pid) }, "and is passivated once it has nothing left to do")
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases())
}

func TestPermanentStepFailureIsCountedOnceAndNotRetried(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	reg := e.withMetrics()
	e.inv.corrupt.Store(true)
	pid := e.spawn("o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD)
	require.NoError(t, e.waitOpened().err)

	permanent := func() float64 { return value(t, reg, MetricStepPermanentFailures, nil) }
	e.eventually(func() bool { return permanent() == 1 }, "the permanent failure is counted")
	require.Never(t, func() bool { return permanent() > 1 || e.inv.calls.Load() > 1 },
		100*time.Millisecond, 5*time.Millisecond, "counted once, not retried in a loop")
	require.Equal(t, 1.0, value(t, reg, MetricStepPermanentFailures, atStep(order.StepReserveInventory)), "at the step that failed")
	require.Zero(t, value(t, reg, MetricStepRetries, nil))
	require.False(t, e.stopped(pid), "a stuck order is not passivated away")
}

// The first cold generation of a minted identity opens nothing: it
// reports its open at once and its start's append is its first store
// call. Without the mint, a later generation, a takeover and a
// relocation open as before.
func TestMintedFirstColdGenerationDefersItsOpen(t *testing.T) {
	e := newEnv(t)
	opens := e.deps.Events.Opens.Load()
	pid := e.spawnMinted("o-1")
	require.NoError(t, e.waitOpened().err)
	require.Equal(t, opens, e.deps.Events.Opens.Load(), "no Open for a first cold generation")
	res, err := e.sys.Root.RequestFuture(pid, e.deps.StartReq("o-1", "key-1", "pm-ok"), 2*time.Second).Result()
	require.NoError(t, err)
	require.IsType(t, &contracts.StartOrderWorkflowReply{}, res)
	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed },
		"the order runs as after an Open")
	require.Equal(t, opens, e.deps.Events.Opens.Load(), "nor later")

	for _, a := range []struct {
		gen    int64
		reason placement.ActivationReason
		minted bool
	}{
		{1, placement.ActivationReason_ACTIVATION_REASON_COLD, false},
		{2, placement.ActivationReason_ACTIVATION_REASON_COLD, true},
		{1, placement.ActivationReason_ACTIVATION_REASON_TAKEOVER, true},
		{1, placement.ActivationReason_ACTIVATION_REASON_RELOCATION, true},
	} {
		before := e.deps.Events.Opens.Load()
		e.spawnActivation(fmt.Sprintf("o-%d-%d-%v", a.gen, a.reason, a.minted), a.gen, a.reason, a.minted)
		require.NoError(t, e.waitOpened().err)
		require.Equal(t, before+1, e.deps.Events.Opens.Load(), "generation %d, %v, minted %v: opened", a.gen, a.reason, a.minted)
	}
}

// A deferred open is made before a command that answers from the fold: a
// continue of an order whose stream exists (minted wrongly) sees the
// stream, not an empty fold.
func TestDeferredOpenBeforeACommandThatReads(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	opens := e.deps.Events.Opens.Load()
	pid := e.spawnMinted("o-1")
	require.NoError(t, e.waitOpened().err)
	res, err := e.sys.Root.RequestFuture(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"}, 2*time.Second).Result()
	require.NoError(t, err)
	cont, ok := res.(*contracts.ContinueOrderWorkflowRes)
	require.True(t, ok, "answered %T %v", res, res)
	require.NotEqual(t, contracts.OrderStatus_ORDER_STATUS_UNSPECIFIED, cont.GetState().GetStatus())
	require.Equal(t, opens+1, e.deps.Events.Opens.Load(), "opened for the continue")
}
