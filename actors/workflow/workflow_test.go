package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

const (
	methodOK      = "pm-ok"
	methodDecline = "pm-decline"
)

var (
	successOrder = []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentAuthorized, order.TypeOrderConfirmed}
	invFailOrder = []string{order.TypeOrderStarted, order.TypeInventoryReservationFailed, order.TypeOrderFailed}
	payFailOrder = []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentFailed, order.TypeInventoryReleased, order.TypeOrderFailed}
)

type env struct {
	t   *testing.T
	ctx context.Context
	d   *workflowtest.Deps
	svc *workflow.Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	d := workflowtest.NewDeps()
	ctx := context.Background()
	require.NoError(t, d.Inventory.SetStock(ctx, "SKU-1", 10))
	require.NoError(t, d.Payment.PutMethod(ctx, commerce.PaymentMethod{MethodID: methodOK, Approve: true}))
	require.NoError(t, d.Payment.PutMethod(ctx, commerce.PaymentMethod{MethodID: methodDecline, Reason: "card declined"}))
	return &env{t: t, ctx: ctx, d: d, svc: mustService(t, d.Config)}
}

func mustService(t *testing.T, cfg workflow.Config) *workflow.Service {
	t.Helper()
	svc, err := workflow.New(cfg)
	require.NoError(t, err)
	return svc
}

func (e *env) open(orderID string, generation int64) *workflow.Order {
	e.t.Helper()
	o, err := e.svc.Open(e.ctx, orderID, generation)
	require.NoError(e.t, err)
	return o
}

// start opens orderID at generation 1 and records its start.
func (e *env) start(orderID, key, method string) (*workflow.Order, *contracts.StartOrderWorkflowReq) {
	e.t.Helper()
	o := e.open(orderID, 1)
	req := e.d.StartReq(orderID, key, method)
	st, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(e.t, err)
	require.True(e.t, recorded)
	require.Equal(e.t, contracts.OrderStatus_Created, st.GetStatus())
	return o, req
}

// drive steps the order until nothing is left to do; a workflow that never
// settles fails the test instead of looping.
func (e *env) drive(o *workflow.Order) {
	e.t.Helper()
	for range 10 {
		progressed, err := e.svc.Step(e.ctx, o)
		require.NoError(e.t, err)
		if !progressed {
			return
		}
	}
	e.t.Fatalf("order %s did not settle in 10 steps; state %+v", o.OrderID(), o.State())
}

// driveLeavingTerminalBehind is drive in the workflow's two phases, with
// the terminal event recorded without its projection: what a process
// stopped between that append and its projection write leaves.
func (e *env) driveLeavingTerminalBehind(o *workflow.Order) {
	e.t.Helper()
	for range 10 {
		eff, err := e.svc.MakeEffect(e.ctx, o)
		require.NoError(e.t, err)
		if eff == nil {
			return
		}
		p := workflow.Project
		if eff.EndsOrder() {
			p = workflow.LeaveProjectionBehind
		}
		progressed, err := e.svc.Record(e.ctx, o, eff, p)
		require.NoError(e.t, err)
		require.True(e.t, progressed)
	}
	e.t.Fatalf("order %s did not settle in 10 steps; state %+v", o.OrderID(), o.State())
}

func (e *env) projection(orderID string) (*contracts.OrderState, int64) {
	e.t.Helper()
	p, v, ok := e.d.ReadModel.Lookup(orderID)
	require.True(e.t, ok, "projection of %s missing", orderID)
	return p, v
}

func startedLine(orderID string) string {
	return fmt.Sprintf("shoppingmall-order started order=%s spot=%s/%s", orderID, workflowtest.Kind, orderID)
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	d := workflowtest.NewDeps()
	_, err := workflow.New(workflow.Config{})
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
	for _, field := range []string{"Kind", "Events", "ReadModel", "Idempotency", "Inventory", "Payment", "Envelopes", "Now"} {
		assert.Contains(t, err.Error(), field)
	}
	cfg := d.Config
	cfg.Evidence, cfg.Logger = nil, nil
	_, err = workflow.New(cfg)
	require.NoError(t, err, "evidence and logger are optional")
}

func TestSuccessPathRecordsEventsInOrderAndProjectsConfirmed(t *testing.T) {
	e := newEnv(t)
	o, req := e.start("ord-1", "key-1", methodOK)

	created, v := e.projection("ord-1")
	assert.Equal(t, int64(1), v)
	assert.Equal(t, contracts.OrderStatus_Created, created.GetStatus())
	assert.Equal(t, commerce.MappingStarted, e.d.Idempotency.Status("key-1"))

	e.drive(o)

	stream := e.d.Events.Stream("ord-1")
	assert.Equal(t, successOrder, e.d.Events.Types("ord-1"))
	wantCmds := []string{
		req.SourceCommandId,
		order.StepSourceCommandID("ord-1", order.StepReserveInventory),
		order.StepSourceCommandID("ord-1", order.StepAuthorizePayment),
		order.StepSourceCommandID("ord-1", order.StepConfirm),
	}
	for i, env := range stream {
		assert.Equal(t, int64(i+1), env.Version)
		assert.Equal(t, order.EventID("ord-1", int64(i+1)), env.EventID)
		assert.Equal(t, "ord-1", env.OrderID)
		assert.Equal(t, wantCmds[i], env.SourceCommandID)
		if i > 0 {
			assert.Greater(t, env.CreatedAtUnixMs, stream[i-1].CreatedAtUnixMs)
		}
	}

	p, v := e.projection("ord-1")
	assert.Equal(t, int64(4), v)
	assert.True(t, proto.Equal(e.svc.View(o), p), "projection %v != view %v", p, e.svc.View(o))
	assert.Equal(t, contracts.OrderStatus_Confirmed, p.GetStatus())
	assert.Equal(t, order.ReservationID("ord-1"), p.GetReservationId())
	assert.Equal(t, order.PaymentID("ord-1"), p.GetPaymentId())
	assert.Equal(t, int64(12900), p.GetAmount())
	assert.Equal(t, "EUR", p.GetCurrency())
	assert.Equal(t, "addr-ord-1", p.GetShippingAddressId())
	assert.Nil(t, p.Reason)
	assert.Equal(t, stream[3].CreatedAtUnixMs, p.GetUpdatedAtUnixMs())

	assert.Equal(t, int64(1), e.d.Inventory.TotalReserveCalls.Load())
	assert.Equal(t, int64(1), e.d.Payment.TotalAuthorizeCalls.Load())
	captured, _ := e.d.Payment.Captured(e.ctx, order.PaymentID("ord-1"))
	assert.Equal(t, int64(12900), captured)
	stock, _ := e.d.Inventory.Stock(e.ctx, "SKU-1")
	assert.Equal(t, int64(8), stock)
	assert.Equal(t, []string{startedLine("ord-1")}, e.d.Evidence.Lines())
	assert.Equal(t, 1, e.d.Evidence.Writes(), "one Write per evidence line")
}

func TestInventoryFailureNeverCallsPayment(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.d.Inventory.SetStock(e.ctx, "SKU-1", 1))
	o, _ := e.start("ord-inv", "key-inv", methodOK)
	e.drive(o)

	assert.Equal(t, invFailOrder, e.d.Events.Types("ord-inv"))
	assert.NotContains(t, e.d.Events.Types("ord-inv"), order.TypePaymentAuthorized)
	assert.Zero(t, e.d.Payment.TotalAuthorizeCalls.Load())
	assert.Zero(t, e.d.Inventory.TotalReleaseCalls.Load())

	p, v := e.projection("ord-inv")
	assert.Equal(t, int64(3), v)
	assert.Equal(t, contracts.OrderStatus_Failed, p.GetStatus())
	assert.Equal(t, "insufficient stock for SKU-1", p.GetReason())
	assert.Nil(t, p.ReservationId)
	assert.Nil(t, p.PaymentId)
}

func TestPaymentFailureReleasesOnceBeforeFailing(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-pay", "key-pay", methodDecline)
	e.drive(o)

	assert.Equal(t, payFailOrder, e.d.Events.Types("ord-pay"))
	releases, _ := e.d.Inventory.ReleaseCalls(e.ctx, order.ReservationID("ord-pay"))
	assert.Equal(t, int64(1), releases)
	stock, _ := e.d.Inventory.Stock(e.ctx, "SKU-1")
	assert.Equal(t, int64(10), stock, "the reservation was given back")
	captured, _ := e.d.Payment.Captured(e.ctx, order.PaymentID("ord-pay"))
	assert.Zero(t, captured)

	p, v := e.projection("ord-pay")
	assert.Equal(t, int64(5), v)
	assert.Equal(t, contracts.OrderStatus_Failed, p.GetStatus())
	assert.Equal(t, "card declined", p.GetReason())
	assert.Equal(t, order.ReservationID("ord-pay"), p.GetReservationId())
	assert.Nil(t, p.PaymentId)
}

// TestContinueOfATerminalOrderReadsTheStreamAgain: a failover lost the
// last two events of a Confirmed order while its owner lived. continue
// does not trust the owner's fold: it reads the stream, finishes the
// order from where the stream stands, and the payment's deterministic id
// keeps the charge single.
func TestContinueOfATerminalOrderReadsTheStreamAgain(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-lost", "key-lost", methodOK)
	e.drive(o)
	require.Equal(t, successOrder, e.d.Events.Types("ord-lost"))
	e.d.Events.Truncate("ord-lost", 2)

	for range 5 {
		st, err := e.svc.Continue(e.ctx, o)
		require.NoError(t, err)
		if st.GetStatus() == contracts.OrderStatus_Confirmed && len(e.d.Events.Stream("ord-lost")) == 4 {
			break
		}
	}
	assert.Equal(t, successOrder, e.d.Events.Types("ord-lost"), "the lost events are recorded again")
	captured, _ := e.d.Payment.Captured(e.ctx, order.PaymentID("ord-lost"))
	assert.Equal(t, int64(12900), captured, "charged once")
	p, v := e.projection("ord-lost")
	assert.Equal(t, int64(4), v)
	assert.Equal(t, contracts.OrderStatus_Confirmed, p.GetStatus())
}

// A store failover lost a Confirmed order's newest events after they
// were projected: the projection is ahead of the stream, and Put's guard
// would keep it there. Rebuild lowers it to the stream's version and
// fold; a continue then finishes the order again, charged once. An owner
// fenced by a newer one lowers nothing.
func TestRebuildLowersAProjectionAheadOfTheStream(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-ahead", "key-ahead", methodOK)
	e.drive(o)
	_, v := e.projection("ord-ahead")
	require.Equal(t, int64(4), v)
	e.d.Events.Truncate("ord-ahead", 2)

	st, err := e.svc.Rebuild(e.ctx, o)
	require.NoError(t, err)
	assert.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus(), "the stream's fold, not the memory's")
	p, v := e.projection("ord-ahead")
	assert.Equal(t, int64(2), v, "the projection follows the stream down")
	assert.Equal(t, contracts.OrderStatus_InventoryReserved, p.GetStatus())

	for range 5 {
		if st, err = e.svc.Continue(e.ctx, o); err == nil && st.GetStatus() == contracts.OrderStatus_Confirmed {
			break
		}
	}
	require.NoError(t, err)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-ahead"))
	captured, _ := e.d.Payment.Captured(e.ctx, order.PaymentID("ord-ahead"))
	assert.Equal(t, int64(12900), captured, "charged once")
	_, v = e.projection("ord-ahead")
	assert.Equal(t, int64(4), v)

	e.d.Events.Truncate("ord-ahead", 3)
	newer := e.open("ord-ahead", 2)
	require.NotNil(t, newer)
	_, err = e.svc.Rebuild(e.ctx, o)
	require.ErrorIs(t, err, workflow.ErrFenced, "the old owner is fenced off")
	_, v = e.projection("ord-ahead")
	assert.Equal(t, int64(4), v, "a fenced owner lowers nothing")
	_, err = e.svc.Rebuild(e.ctx, newer)
	require.NoError(t, err)
	_, v = e.projection("ord-ahead")
	assert.Equal(t, int64(3), v, "the current owner does")
}

// A terminal order's continue finds a projection ahead of its stream and
// lowers it to the stream's version and fold.
func TestContinueLowersAProjectionAheadOfTheStream(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-ahead2", "key-ahead2", methodOK)
	e.drive(o)
	ahead := &contracts.OrderState{OrderId: "ord-ahead2", Status: contracts.OrderStatus_Failed, Reason: proto.String("lost")}
	applied, err := e.d.ReadModel.Put(e.ctx, "ord-ahead2", 6, ahead)
	require.NoError(t, err)
	require.True(t, applied)

	st, err := e.svc.Continue(e.ctx, o)
	require.NoError(t, err)
	assert.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
	p, v := e.projection("ord-ahead2")
	assert.Equal(t, int64(4), v, "lowered to the stream's version")
	assert.Equal(t, contracts.OrderStatus_Confirmed, p.GetStatus(), "and its fold")
}

func TestStartWithSameCommandRecordsNothing(t *testing.T) {
	e := newEnv(t)
	o, req := e.start("ord-dup", "key-dup", methodOK)
	appends := e.d.Events.Appends.Load()

	st, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(t, err)
	assert.False(t, recorded)
	assert.Equal(t, contracts.OrderStatus_Created, st.GetStatus())

	// A new activation that replays the stream answers the same way.
	o2 := e.open("ord-dup", 2)
	st2, recorded, err := e.svc.Start(e.ctx, o2, proto.Clone(req).(*contracts.StartOrderWorkflowReq))
	require.NoError(t, err)
	assert.False(t, recorded)
	assert.True(t, proto.Equal(st, st2))

	assert.Equal(t, appends, e.d.Events.Appends.Load(), "no append attempted")
	assert.Equal(t, []string{order.TypeOrderStarted}, e.d.Events.Types("ord-dup"))
	assert.Equal(t, 1, e.d.Evidence.Count(startedLine("ord-dup")))
	assert.Len(t, e.d.Evidence.Lines(), 1)
}

// A start whose mapping its unit cannot mark (one of the old layout) marks
// it separately; when that fails the start reports it, and the owner, or
// the start's retry, repairs it.
func TestStartRetryRepairsInterruptedStart(t *testing.T) {
	e := newEnv(t)
	o := e.open("ord-rep", 1)
	req := e.d.StartReq("ord-rep", "key-rep", methodOK)
	e.d.Idempotency.MoveToOldLayout("key-rep")
	boom := errors.New("commerce store down")
	e.d.Idempotency.FailNextMarkStarted(boom)

	_, recorded, err := e.svc.Start(e.ctx, o, req)
	require.ErrorIs(t, err, boom)
	assert.True(t, recorded, "the event was recorded before the mark failed")
	assert.Equal(t, commerce.MappingPending, e.d.Idempotency.Status("key-rep"))
	_, v := e.projection("ord-rep")
	assert.Equal(t, int64(1), v, "the projection rode in the append")
	assert.True(t, e.svc.NeedsWork(o), "the owner repairs the mark without a retry")

	st, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(t, err)
	assert.False(t, recorded)
	p, v := e.projection("ord-rep")
	assert.Equal(t, int64(1), v)
	assert.True(t, proto.Equal(st, p))
	assert.Equal(t, commerce.MappingStarted, e.d.Idempotency.Status("key-rep"))
	assert.Equal(t, 1, e.d.Evidence.Count(startedLine("ord-rep")), "the recording call printed it, the repair did not")
	assert.Len(t, e.d.Events.Stream("ord-rep"), 1)
}

func TestStartRaceLostToSameCommandIsADedupe(t *testing.T) {
	e := newEnv(t)
	o := e.open("ord-race", 1)
	req := e.d.StartReq("ord-race", "key-race", methodOK)
	// The append lands but its reply is the store's dedupe answer, as when
	// a concurrent attempt of the same command won.
	e.d.Events.LoseNextAppendReply(eventstore.ErrDuplicateCommand)

	st, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(t, err)
	assert.False(t, recorded)
	assert.Equal(t, contracts.OrderStatus_Created, st.GetStatus())
	assert.Equal(t, commerce.MappingStarted, e.d.Idempotency.Status("key-race"))
	assert.Zero(t, e.d.Evidence.Count(startedLine("ord-race")))
	assert.True(t, o.Exists())
}

func TestStartConflict(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-c", "key-c", methodOK)
	writes := e.d.Writes()

	other := e.d.StartReq("ord-c", "key-other", methodOK)
	_, recorded, err := e.svc.Start(e.ctx, o, other)
	require.ErrorIs(t, err, workflow.ErrConflict)
	assert.False(t, recorded)
	assert.Equal(t, writes, e.d.Writes(), "a conflicting start writes nothing")
	assert.Len(t, e.d.Events.Stream("ord-c"), 1)
}

// TestStartOfAReusedKeyIsRefusedByTheStream: the OrderId is the key's, so
// a key reused for another request after its mapping was lost reaches the
// order it started; the stream and the first envelope refuse it, and the
// key's own retry still converges.
func TestStartOfAReusedKeyIsRefusedByTheStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*contracts.StartOrderWorkflowReq)
		cold   bool // a fresh activation, which reads the first envelope
	}{
		{"another cart", func(r *contracts.StartOrderWorkflowReq) { r.CartId = "cart-other" }, false},
		{"another address", func(r *contracts.StartOrderWorkflowReq) { r.ShippingAddressId = "addr-other" }, false},
		{"another payment method", func(r *contracts.StartOrderWorkflowReq) { r.PaymentMethodId = methodDecline }, false},
		{"another payment method, replayed", func(r *contracts.StartOrderWorkflowReq) { r.PaymentMethodId = methodDecline }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			o, req := e.start("ord-k", "key-k", methodOK)
			if tc.cold {
				o = e.open("ord-k", 2)
			}
			writes := e.d.Writes()
			other := proto.Clone(req).(*contracts.StartOrderWorkflowReq)
			tc.change(other)

			_, recorded, err := e.svc.Start(e.ctx, o, other)
			require.ErrorIs(t, err, workflow.ErrKeyReused)
			assert.False(t, recorded)
			assert.True(t, workflow.Permanent(err), "retrying a reused key never helps")
			assert.Equal(t, writes, e.d.Writes(), "a refused start writes nothing")

			st, recorded, err := e.svc.Start(e.ctx, o, req)
			require.NoError(t, err, "the key's own request")
			assert.False(t, recorded)
			assert.Equal(t, contracts.OrderStatus_Created, st.GetStatus())
			assert.Len(t, e.d.Events.Stream("ord-k"), 1)
		})
	}
}

func TestStartRejectsInvalidRequests(t *testing.T) {
	cases := map[string]func(r *contracts.StartOrderWorkflowReq){
		"no orderId":           func(r *contracts.StartOrderWorkflowReq) { r.OrderId = "" },
		"other orderId":        func(r *contracts.StartOrderWorkflowReq) { r.OrderId = "ord-other" },
		"no cartId":            func(r *contracts.StartOrderWorkflowReq) { r.CartId = "" },
		"no shippingAddress":   func(r *contracts.StartOrderWorkflowReq) { r.ShippingAddressId = " " },
		"no paymentMethod":     func(r *contracts.StartOrderWorkflowReq) { r.PaymentMethodId = "" },
		"no idempotencyKey":    func(r *contracts.StartOrderWorkflowReq) { r.IdempotencyKey = "" },
		"no sourceCommandId":   func(r *contracts.StartOrderWorkflowReq) { r.SourceCommandId = "" },
		"foreign command id":   func(r *contracts.StartOrderWorkflowReq) { r.SourceCommandId = "start-something-else" },
		"no lines":             func(r *contracts.StartOrderWorkflowReq) { r.Lines = nil },
		"zero quantity":        func(r *contracts.StartOrderWorkflowReq) { r.Lines[0].Quantity = 0 },
		"empty sku":            func(r *contracts.StartOrderWorkflowReq) { r.Lines[0].Sku = "" },
		"negative amount":      func(r *contracts.StartOrderWorkflowReq) { r.Amount = -1 },
		"no currency":          func(r *contracts.StartOrderWorkflowReq) { r.Currency = "" },
		"lowercase currency":   func(r *contracts.StartOrderWorkflowReq) { r.Currency = "eur" },
		"four-letter currency": func(r *contracts.StartOrderWorkflowReq) { r.Currency = "EURO" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			o := e.open("ord-bad", 1)
			req := e.d.StartReq("ord-bad", "key-bad", methodOK)
			mutate(req)
			writes := e.d.Writes()
			_, recorded, err := e.svc.Start(e.ctx, o, req)
			require.ErrorIs(t, err, workflow.ErrInvalidArgument)
			assert.False(t, recorded)
			assert.Equal(t, writes, e.d.Writes())
			assert.Empty(t, e.d.Events.Stream("ord-bad"))
		})
	}
	e := newEnv(t)
	_, _, err := e.svc.Start(e.ctx, e.open("ord-nil", 1), nil)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
}

func TestContinueFromInventoryReservedAuthorizesWithoutReservingAgain(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-cont", "key-cont", methodOK)
	progressed, err := e.svc.Step(e.ctx, o)
	require.NoError(t, err)
	require.True(t, progressed)
	require.Equal(t, order.StatusInventoryReserved, o.State().Status)

	// A new activation (after a close) knows only the stream and the
	// first envelope.
	o2 := e.open("ord-cont", 2)
	require.Equal(t, order.StatusInventoryReserved, o2.State().Status)
	st, err := e.svc.Continue(e.ctx, o2)
	require.NoError(t, err)
	assert.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus(), "the confirmation is recorded with the payment")

	reserves, _ := e.d.Inventory.ReserveCalls(e.ctx, order.ReservationID("ord-cont"))
	assert.Equal(t, int64(1), reserves)
	authorizes, _ := e.d.Payment.AuthorizeCalls(e.ctx, order.PaymentID("ord-cont"))
	assert.Equal(t, int64(1), authorizes)
	assert.Equal(t, methodOK, e.d.Payment.LastMethod(order.PaymentID("ord-cont")), "payment method from the first envelope")
	assert.Equal(t, int64(1), e.d.Envelopes.LoadCalls.Load())

	p, v := e.projection("ord-cont")
	assert.Equal(t, int64(4), v)
	assert.Equal(t, contracts.OrderStatus_Confirmed, p.GetStatus())

	e.drive(o2)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-cont"))
}

func TestStepAfterStartUsesStartRequestWithoutEnvelopeRead(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-mem", "key-mem", methodOK)
	e.drive(o)
	assert.Zero(t, e.d.Envelopes.LoadCalls.Load())
	assert.Equal(t, int64(1), e.d.Envelopes.Saves.Load())
}

func TestAuthorizeWithoutFirstEnvelopeFails(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-noenv", "key-noenv", methodOK)
	_, err := e.svc.Step(e.ctx, o)
	require.NoError(t, err)

	other := workflowtest.NewDeps()
	cfg := e.d.Config
	cfg.Envelopes = other.Envelopes
	svc := mustService(t, cfg)
	o2, err := svc.Open(e.ctx, "ord-noenv", 2)
	require.NoError(t, err)
	_, err = svc.Step(e.ctx, o2)
	require.ErrorIs(t, err, workflow.ErrNotFound)
	assert.Zero(t, e.d.Payment.TotalAuthorizeCalls.Load(), "no authorization without the payment method")
}

func TestContinueOnTerminalRepairsMissingOrStaleProjection(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		status       contracts.OrderStatus
		version      int64
	}{
		{"confirmed", methodOK, contracts.OrderStatus_Confirmed, 4},
		{"failed", methodDecline, contracts.OrderStatus_Failed, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			o, _ := e.start("ord-term", "key-term", tc.method)
			e.driveLeavingTerminalBehind(o)

			// The last append carries two events (the effect's and the
			// terminal one): its projection is two versions short.
			stale, v := e.projection("ord-term")
			require.Equal(t, tc.version-2, v, "the terminal projection was skipped")
			require.NotEqual(t, tc.status, stale.GetStatus())

			st, err := e.svc.Continue(e.ctx, o)
			require.NoError(t, err)
			p, v := e.projection("ord-term")
			assert.Equal(t, tc.version, v)
			assert.Equal(t, tc.status, p.GetStatus())
			assert.True(t, proto.Equal(st, p))
			assert.True(t, proto.Equal(e.svc.View(o), p))

			// Missing entirely: repaired the same way.
			e.d.ReadModel.Remove("ord-term")
			st2, err := e.svc.Continue(e.ctx, o)
			require.NoError(t, err)
			p2, v2 := e.projection("ord-term")
			assert.Equal(t, tc.version, v2)
			assert.True(t, proto.Equal(st2, p2))

			// Current: read only, nothing written, no module called.
			puts, reserves := e.d.ReadModel.Puts.Load(), e.d.Inventory.TotalReserveCalls.Load()
			_, err = e.svc.Continue(e.ctx, o)
			require.NoError(t, err)
			assert.Equal(t, puts, e.d.ReadModel.Puts.Load())
			assert.Equal(t, reserves, e.d.Inventory.TotalReserveCalls.Load())
			assert.Len(t, e.d.Events.Stream("ord-term"), int(tc.version))
		})
	}
}

func TestRebuildReplaysTheStreamAlone(t *testing.T) {
	e := newEnv(t)
	stale, _ := e.start("ord-rb", "key-rb", methodOK)
	// A newer activation completes the order; stale's fold still says
	// Created, so only a replay of the stream can produce Confirmed.
	current := e.open("ord-rb", 1)
	e.drive(current)
	want, wantV := e.projection("ord-rb")
	require.Equal(t, contracts.OrderStatus_Confirmed, want.GetStatus())
	require.Equal(t, order.StatusCreated, stale.State().Status)

	require.NoError(t, e.d.ReadModel.Delete(e.ctx, "ord-rb"))
	loads := e.d.Events.Loads.Load()
	st, err := e.svc.Rebuild(e.ctx, stale)
	require.NoError(t, err)
	assert.Equal(t, loads+1, e.d.Events.Loads.Load())

	got, gotV := e.projection("ord-rb")
	assert.Equal(t, wantV, gotV)
	assert.True(t, proto.Equal(want, got), "rebuilt %v, was %v", got, want)
	assert.True(t, proto.Equal(want, st))
	assert.Equal(t, order.StatusConfirmed, stale.State().Status, "the replay becomes the fold")
}

func TestContinueAndRebuildWithoutStreamWriteNothing(t *testing.T) {
	e := newEnv(t)
	o := e.open("ord-none", 1)
	assert.False(t, o.Exists())
	assert.Nil(t, e.svc.View(o))

	_, err := e.svc.Continue(e.ctx, o)
	require.ErrorIs(t, err, workflow.ErrNotFound)
	_, err = e.svc.Rebuild(e.ctx, o)
	require.ErrorIs(t, err, workflow.ErrNotFound)
	progressed, err := e.svc.Step(e.ctx, o)
	require.NoError(t, err)
	assert.False(t, progressed)
	eff, err := e.svc.MakeEffect(e.ctx, o)
	require.NoError(t, err)
	assert.Nil(t, eff)

	assert.Zero(t, e.d.Writes())
	assert.Nil(t, e.d.Events.Stream("ord-none"))
	_, _, ok := e.d.ReadModel.Lookup("ord-none")
	assert.False(t, ok)
	assert.Empty(t, e.d.Evidence.String())
}

func TestFencedOwnerCannotAppend(t *testing.T) {
	e := newEnv(t)
	old, _ := e.start("ord-f", "key-f", methodOK)
	newer := e.open("ord-f", 2)
	assert.True(t, old.Fence().Less(newer.Fence()))

	progressed, err := e.svc.Step(e.ctx, old)
	require.ErrorIs(t, err, workflow.ErrFenced)
	require.ErrorIs(t, err, eventstore.ErrFenced)
	assert.False(t, progressed)
	assert.Equal(t, []string{order.TypeOrderStarted}, e.d.Events.Types("ord-f"))

	// A relocation within the generation fences the previous epoch too.
	relocated := e.open("ord-f", 2)
	_, err = e.svc.Step(e.ctx, newer)
	require.ErrorIs(t, err, workflow.ErrFenced)

	e.drive(relocated)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-f"))

	_, err = e.svc.Open(e.ctx, "ord-f", 1)
	require.ErrorIs(t, err, workflow.ErrFenced)
}

func TestRepeatedEffectGuardRefusesWithoutCallingModules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state order.State
	}{
		{"reserve with reservation recorded", order.State{
			OrderID: "ord-g", Version: 2, Started: true, Status: order.StatusCreated,
			Lines: []order.Line{{SKU: "SKU-1", Quantity: 1}}, Amount: 100, Currency: "EUR",
			ReservationID: order.ReservationID("ord-g"),
		}},
		{"authorize with payment recorded", order.State{
			OrderID: "ord-g", Version: 3, Started: true, Status: order.StatusInventoryReserved,
			Lines: []order.Line{{SKU: "SKU-1", Quantity: 1}}, Amount: 100, Currency: "EUR",
			ReservationID: order.ReservationID("ord-g"), PaymentID: order.PaymentID("ord-g"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			o := e.open("ord-g", 1)
			workflow.SetStateForTest(o, tc.state)

			progressed, err := e.svc.Step(e.ctx, o)
			require.ErrorIs(t, err, workflow.ErrConflict)
			assert.False(t, progressed)
			assert.Equal(t, 1, e.d.Evidence.Count("shoppingmall-order external-effect-repeated order=ord-g"))
			assert.Zero(t, e.d.Writes(), "no module call, no append, no projection")
		})
	}
}

func TestSuccessPathNeverReportsARepeatedEffect(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-clean", "key-clean", methodDecline)
	e.drive(o)
	assert.NotContains(t, e.d.Evidence.String(), "external-effect-repeated")
}

func TestLandedAppendWithLostReplyIsNotRepeated(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-lost", "key-lost", methodOK)
	boom := errors.New("connection reset")
	e.d.Events.LoseNextAppendReply(boom)

	_, err := e.svc.Step(e.ctx, o)
	require.ErrorIs(t, err, boom)

	e.drive(o)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-lost"))
	reserves, _ := e.d.Inventory.ReserveCalls(e.ctx, order.ReservationID("ord-lost"))
	assert.Equal(t, int64(1), reserves, "the fold was reloaded instead of reserving again")
}

func TestDuplicateStepAppendReloadsTheFold(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-dstep", "key-dstep", methodOK)
	e.d.Events.LoseNextAppendReply(eventstore.ErrDuplicateCommand)

	progressed, err := e.svc.Step(e.ctx, o)
	require.NoError(t, err)
	assert.False(t, progressed)
	assert.Equal(t, order.StatusInventoryReserved, o.State().Status)
	assert.Equal(t, int64(2), o.State().Version)
}

func TestOpenRejectsCorruptStream(t *testing.T) {
	e := newEnv(t)
	e.start("ord-bad", "key-bad", methodOK)

	e.d.Events.Corrupt("ord-bad", 1, []byte(`{"eventId":`))
	_, err := e.svc.Open(e.ctx, "ord-bad", 2)
	require.ErrorIs(t, err, eventstore.ErrCorrupt)

	// Well-formed JSON of another order is corrupt as well.
	_, data, err := workflow.EncodeEvent(order.OrderStarted{
		EventID: order.EventID("ord-x", 1), OrderID: "ord-x", CartID: "c", ShippingAddressID: "a",
		Lines: []order.Line{{SKU: "S", Quantity: 1}}, Amount: 1, Currency: "EUR", SourceCommandID: "s",
	})
	require.NoError(t, err)
	e.d.Events.Corrupt("ord-bad", 1, data)
	_, err = e.svc.Open(e.ctx, "ord-bad", 2)
	require.ErrorIs(t, err, eventstore.ErrCorrupt)

	_, err = e.svc.Open(e.ctx, "", 1)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
}

func TestEventCodecRoundTrip(t *testing.T) {
	lines := []order.Line{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 3}}
	events := []order.Event{
		order.OrderStarted{EventID: "e1", OrderID: "o", CartID: "c", ShippingAddressID: "a", Lines: lines, Amount: 500, Currency: "KRW", SourceCommandID: "s"},
		order.InventoryReserved{EventID: "e2", OrderID: "o", ReservationID: "r"},
		order.InventoryReservationFailed{EventID: "e3", OrderID: "o", Reason: "no stock"},
		order.PaymentAuthorized{EventID: "e4", OrderID: "o", PaymentID: "p"},
		order.PaymentFailed{EventID: "e5", OrderID: "o", Reason: "declined"},
		order.InventoryReleased{EventID: "e6", OrderID: "o", ReservationID: "r", Reason: "declined"},
		order.OrderConfirmed{EventID: "e7", OrderID: "o", ConfirmedAtUnixMs: 1_700_000_000_123},
		order.OrderFailed{EventID: "e8", OrderID: "o", Reason: "declined", FailedAtUnixMs: 1_700_000_000_456},
	}
	for _, ev := range events {
		typ, data, err := workflow.EncodeEvent(ev)
		require.NoError(t, err)
		assert.Equal(t, ev.Type(), typ)
		got, err := workflow.DecodeEvent(typ, workflow.SchemaVersion, data)
		require.NoError(t, err)
		assert.Equal(t, ev, got)
	}
	ptr := &order.PaymentAuthorized{EventID: "e4", OrderID: "o", PaymentID: "p"}
	typ, data, err := workflow.EncodeEvent(ptr)
	require.NoError(t, err)
	assert.Equal(t, order.TypePaymentAuthorized, typ)
	assert.JSONEq(t, `{"eventId":"e4","orderId":"o","paymentId":"p"}`, string(data))

	_, err = workflow.DecodeEvent("OrderShippedEvent", workflow.SchemaVersion, []byte(`{}`))
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	_, err = workflow.DecodeEvent(order.TypeOrderConfirmed, workflow.SchemaVersion, []byte(`{"eventId":"e","orderId":"o","confirmedAtUnixMs":"soon"}`))
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	_, _, err = workflow.EncodeEvent(nil)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
}

func TestViewSetsOptionalFieldsOnlyWhenKnown(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-view", "key-view", methodOK)
	v := e.svc.View(o)
	assert.Equal(t, "ord-view", v.GetOrderId())
	assert.NotNil(t, v.ShippingAddressId)
	assert.NotNil(t, v.Amount)
	assert.NotNil(t, v.Currency)
	assert.Nil(t, v.ReservationId)
	assert.Nil(t, v.PaymentId)
	assert.Nil(t, v.Reason)
	assert.Equal(t, e.d.Events.Stream("ord-view")[0].CreatedAtUnixMs, v.GetUpdatedAtUnixMs())
	data, err := contracts.MarshalJSON(v)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "reservationId")
}

func TestConcurrentOrdersKeepEvidenceLinesWhole(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.d.Inventory.SetStock(e.ctx, "SKU-1", 1000))
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("ord-par-%d", i)
			o, err := e.svc.Open(e.ctx, id, 1)
			if err != nil {
				errs <- err
				return
			}
			req := e.d.StartReq(id, "key-"+id, methodOK)
			if _, _, err := e.svc.Start(e.ctx, o, req); err != nil {
				errs <- err
				return
			}
			for {
				progressed, err := e.svc.Step(e.ctx, o)
				if err != nil {
					errs <- err
					return
				}
				if !progressed {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	lines := e.d.Evidence.Lines()
	require.Len(t, lines, n)
	for i := range n {
		id := fmt.Sprintf("ord-par-%d", i)
		assert.Equal(t, 1, e.d.Evidence.Count(startedLine(id)))
		assert.Equal(t, successOrder, e.d.Events.Types(id))
	}
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, "shoppingmall-order started order="), l)
	}
}

// An order from OpenFresh is what Open returns for an order without a
// stream, without a store call: its start appends at version 0 under
// fence (1, 1) and the order runs as usual. Should the stream exist after
// all, the start's append is refused and the order settles as after Open:
// a repeated start answers from the stream, a different one conflicts.
func TestOpenFreshDefersTheOpenToTheFirstAppend(t *testing.T) {
	e := newEnv(t)
	opens := e.d.Events.Opens.Load()
	o, err := e.svc.OpenFresh("ord-fresh", 1)
	require.NoError(t, err)
	require.True(t, o.Deferred())
	assert.Equal(t, eventstore.Fence{Generation: 1, Epoch: 1}, o.Fence())
	assert.False(t, o.Exists())
	req := e.d.StartReq("ord-fresh", "key-fresh", methodOK)
	st, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(t, err)
	require.True(t, recorded)
	assert.Equal(t, contracts.OrderStatus_Created, st.GetStatus())
	assert.False(t, o.Deferred(), "the append asked the store")
	e.drive(o)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-fresh"))
	assert.Equal(t, opens, e.d.Events.Opens.Load(), "no Open at all")

	// The stream exists although the activation looked fresh.
	o2, err := e.svc.OpenFresh("ord-fresh", 1)
	require.NoError(t, err)
	st, recorded, err = e.svc.Start(e.ctx, o2, req)
	require.NoError(t, err)
	assert.False(t, recorded, "the same start, already in the stream")
	assert.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
	assert.False(t, o2.Deferred())
	o3, err := e.svc.OpenFresh("ord-fresh", 1)
	require.NoError(t, err)
	other := e.d.StartReq("ord-fresh", "key-other", methodOK)
	_, _, err = e.svc.Start(e.ctx, o3, other)
	require.ErrorIs(t, err, workflow.ErrConflict)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-fresh"), "nothing added")

	_, err = e.svc.OpenFresh("", 1)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
	_, err = e.svc.OpenFresh("x", 0)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
}

// A new order's start is one unit of work: its envelope and its
// mapping's mark are written in the unit, with the event and its
// projection, and what they would have written is there. A mapping of
// another order is marked the separate way, which says why it fails.
func TestAStartIsOneUnit(t *testing.T) {
	e := newEnv(t)
	pa := e.d.Commits
	saves, marks, puts := e.d.Envelopes.Saves.Load(), e.d.Idempotency.MarkStartedCalls.Load(), e.d.ReadModel.Puts.Load()

	o, _ := e.start("ord-sa", "key-sa", methodOK)
	assert.Equal(t, int64(1), pa.Calls.Load(), "the start is one unit")
	assert.Equal(t, saves+1, e.d.Envelopes.Saves.Load(), "one envelope save, in the unit")
	assert.Equal(t, marks+1, e.d.Idempotency.MarkStartedCalls.Load(), "one mark, in the unit")
	assert.Equal(t, puts, e.d.ReadModel.Puts.Load(), "no separate projection write")
	m, err := e.d.Idempotency.Get(e.ctx, "key-sa", "ord-sa")
	require.NoError(t, err)
	assert.Equal(t, commerce.MappingStarted, m.Status)
	env, err := e.d.Envelopes.LoadFirst(e.ctx, "ord-sa")
	require.NoError(t, err)
	assert.Equal(t, methodOK, env.GetPaymentMethodId())
	_, v := e.projection("ord-sa")
	assert.Equal(t, int64(1), v)
	e.drive(o)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-sa"))
	assert.Equal(t, int64(3), pa.Calls.Load(), "the later steps are units too")

	// A mapping that names another order is not marked in the unit; the
	// separate mark reports it.
	o2 := e.open("ord-sb", 1)
	req := e.d.StartReq("ord-sb", "key-sb", methodOK)
	e.d.Idempotency.Seed("key-sb", commerce.Mapping{OrderID: "ord-other", Status: commerce.MappingPending})
	_, recorded, err := e.svc.Start(e.ctx, o2, req)
	assert.True(t, recorded)
	require.ErrorIs(t, err, commerce.ErrNotFound)
	assert.Equal(t, marks+3, e.d.Idempotency.MarkStartedCalls.Load(), "the unit's mark, then the separate one")
}

// Writes an order carries into its start (CarryFirstWrite: another
// store's, such as its activation's Ready commit) ride in the start's
// append and nowhere else. Only a deferred order takes them. They land with the start; refused, nothing is
// written and nothing answered from the stream; unanswered, they are in
// doubt; a start that loses the
// append's race returns the race instead of answering from the stream
// (which would write the projection before the writes it carries); a
// start that never reaches its append drops them.
func TestCarriedWritesRideInTheStartsAppendOnly(t *testing.T) {
	e := newEnv(t)
	sa := e.d.Commits
	carried := []eventstore.Companion{{Op: eventstore.Require, Key: "lock", Value: []byte("tok")}}
	fresh := func(id string) *workflow.Order {
		o, err := e.svc.OpenFresh(id, 1)
		require.NoError(t, err)
		require.True(t, o.CarryFirstWrite(carried))
		return o
	}
	require.False(t, e.open("ord-opened", 1).CarryFirstWrite(carried), "an opened order writes its own way")

	o := fresh("ord-c1")
	req := e.d.StartReq("ord-c1", "key-c1", methodOK)
	_, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(t, err)
	require.True(t, recorded)
	assert.Equal(t, workflow.FirstWriteLanded, o.FirstWritten())
	assert.Equal(t, carried, sa.With())

	// The stream exists: a carried start returns the race.
	o = fresh("ord-c1")
	puts := e.d.ReadModel.Puts.Load()
	_, recorded, err = e.svc.Start(e.ctx, o, req)
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	assert.False(t, recorded)
	assert.Equal(t, workflow.FirstWriteNotMade, o.FirstWritten())
	assert.Equal(t, puts, e.d.ReadModel.Puts.Load(), "no projection written from the stream")

	sa.RefuseWith = fmt.Errorf("%w: lock", eventstore.ErrPrecondition)
	o = fresh("ord-c2")
	_, recorded, err = e.svc.Start(e.ctx, o, e.d.StartReq("ord-c2", "key-c2", methodOK))
	require.ErrorIs(t, err, eventstore.ErrPrecondition)
	assert.False(t, recorded)
	assert.Equal(t, workflow.FirstWriteRefused, o.FirstWritten())
	assert.Empty(t, e.d.Events.Types("ord-c2"), "nothing written")

	// No answer from the store: the carried writes may have landed, and
	// the owner has to find out before it writes anything else.
	sa.RefuseWith = fmt.Errorf("%w: connection reset", eventstore.ErrUnavailable)
	o = fresh("ord-c5")
	_, recorded, err = e.svc.Start(e.ctx, o, e.d.StartReq("ord-c5", "key-c5", methodOK))
	require.ErrorIs(t, err, eventstore.ErrUnavailable)
	assert.False(t, recorded)
	assert.Equal(t, workflow.FirstWriteInDoubt, o.FirstWritten())
	assert.True(t, e.svc.NeedsWork(o), "the owner reloads to learn what landed")
	sa.RefuseWith = nil

	o = fresh("ord-c3")
	bad := e.d.StartReq("ord-c3", "key-c3", methodOK)
	bad.CartId = ""
	_, _, err = e.svc.Start(e.ctx, o, bad)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
	assert.Equal(t, workflow.FirstWriteNotMade, o.FirstWritten())
	_, recorded, err = e.svc.Start(e.ctx, o, e.d.StartReq("ord-c3", "key-c3", methodOK))
	require.NoError(t, err, "the refused start dropped what it carried")
	assert.True(t, recorded)
	assert.Empty(t, sa.With())

	// A command that never reached Start drops them by hand.
	o = fresh("ord-c4")
	assert.False(t, o.CarryFirstWrite(nil))
	_, _, err = e.svc.Start(e.ctx, o, e.d.StartReq("ord-c4", "key-c4", methodOK))
	require.NoError(t, err)
	assert.Empty(t, sa.With(), "nothing carried")
}

// Every append travels with its projection: the
// read model follows the stream append by append and no separate
// projection write happens; a terminal append recorded with its
// projection left behind leaves the read model at the version before it.
func TestProjectedAppendRecordsEventAndProjectionTogether(t *testing.T) {
	e := newEnv(t)
	pa := e.d.Commits
	puts := e.d.ReadModel.Puts.Load()

	o, _ := e.start("ord-pa", "key-pa", methodOK)
	p, v := e.projection("ord-pa")
	assert.Equal(t, int64(1), v)
	assert.Equal(t, contracts.OrderStatus_Created, p.GetStatus())
	e.drive(o)
	assert.Equal(t, successOrder, e.d.Events.Types("ord-pa"))
	p, v = e.projection("ord-pa")
	assert.Equal(t, int64(4), v)
	assert.True(t, proto.Equal(e.svc.View(o), p))
	assert.Equal(t, int64(3), pa.Calls.Load(), "one unit per append: start, reserve, authorize with confirm")
	assert.Equal(t, puts, e.d.ReadModel.Puts.Load(), "no separate projection write")

	o2, _ := e.start("ord-pb", "key-pb", methodOK)
	e.driveLeavingTerminalBehind(o2)
	p, v = e.projection("ord-pb")
	assert.Equal(t, int64(2), v, "the terminal append is recorded without its projection")
	assert.Equal(t, contracts.OrderStatus_InventoryReserved, p.GetStatus())
	assert.Equal(t, successOrder, e.d.Events.Types("ord-pb"))
}

// Every event is written as the lower of the compatibility level and the
// build's schema: a build of a newer schema writes the older one, through
// its downcaster, until the level rises, and the newer one from its next
// write after that; an order holding both replays.
func TestWritesStampTheLowerOfTheLevelAndTheBuildsSchema(t *testing.T) {
	saved := workflow.Events
	t.Cleanup(func() { workflow.Events = saved })
	workflow.Events = workflow.Codec{Schema: 2, Downcasters: []workflow.Downcaster{{From: 2, Down: func(b map[string]json.RawMessage) error {
		b["writtenDown"] = json.RawMessage("true")
		return nil
	}}}}
	var level atomic.Int64
	level.Store(1)
	d := workflowtest.NewDeps()
	ctx := context.Background()
	require.NoError(t, d.Inventory.SetStock(ctx, "SKU-1", 10))
	require.NoError(t, d.Payment.PutMethod(ctx, commerce.PaymentMethod{MethodID: methodOK, Approve: true}))
	cfg := d.Config
	cfg.SchemaLevel = func() int { return int(level.Load()) }
	e := &env{t: t, ctx: ctx, d: d, svc: mustService(t, cfg)}

	o, _ := e.start("ord-lvl", "key-lvl", methodOK)
	progressed, err := e.svc.Step(ctx, o)
	require.NoError(t, err)
	require.True(t, progressed)
	level.Store(2)
	e.drive(o)

	stream := d.Events.Stream("ord-lvl")
	require.Len(t, stream, 4)
	for i, env := range stream {
		want := 2
		if i < 2 {
			want = 1
		}
		require.Equal(t, want, env.Schema, "event %d (%s)", i+1, env.EventType)
		require.Equal(t, want == 1, strings.Contains(string(env.Data), "writtenDown"), "event %d body %s", i+1, env.Data)
	}
	reopened, err := e.svc.Open(ctx, "ord-lvl", 2)
	require.NoError(t, err)
	require.Equal(t, o.State(), reopened.State())

	// A level above the build's schema writes the build's schema.
	level.Store(5)
	o2, _ := e.start("ord-lvl2", "key-lvl2", methodOK)
	require.Equal(t, 2, d.Events.Stream(o2.OrderID())[0].Schema)
}
