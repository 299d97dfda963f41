package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// drainScaleGrains is the figure the drain is measured at; -short keeps
// the same shape at a tenth of it.
const drainScaleGrains = 5000

// seededOrder is one order of a drain scenario.
type seededOrder struct {
	id       string
	terminal bool
	// start is the start command of a non-terminal order, sent by activate.
	start *contracts.StartOrderWorkflowReq
}

// seedOrders prepares n orders, every other one terminal. A terminal
// order's stream (started, reserved, authorized, confirmed) is written
// straight to the event store: going through the workflow would cost a
// dozen round trips per order and measure the start path, not the drain.
// A non-terminal one gets its idempotency key reserved and a stop gate
// armed, so that once started it holds at InventoryReserved for good.
func (h *harness) seedOrders(t *testing.T, prefix string, n int) []seededOrder {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	cart, err := h.stores.Commerce.Carts().GetCart(ctx, commerce.DemoCartOK)
	require.NoError(t, err)
	orders := make([]seededOrder, n)
	err = forEach(n, 64, func(i int) error {
		id := fmt.Sprintf("%s-%05d", prefix, i)
		key := "key-" + id
		req := &contracts.StartOrderWorkflowReq{
			OrderId: id, CartId: commerce.DemoCartOK, ShippingAddressId: "addr-1",
			PaymentMethodId: commerce.DemoMethodOK, IdempotencyKey: key,
			SourceCommandId: order.StartSourceCommandID(key), Lines: cart.Lines,
			Amount: cart.Amount, Currency: cart.Currency,
		}
		if i%2 == 0 {
			orders[i] = seededOrder{id: id, terminal: true}
			envs, err := confirmedStream(req)
			if err != nil {
				return err
			}
			// Generation 0: the first activation (generation 1) takes over.
			_, err = h.stores.Events.Append(ctx, id, 0, eventstore.Fence{Generation: 0, Epoch: 1}, envs)
			return err
		}
		orders[i] = seededOrder{id: id, start: req}
		if _, _, err := h.stores.Commerce.Idempotency().Reserve(ctx, key, commerce.Mapping{
			OrderID: id, Status: commerce.MappingPending,
			Fingerprint: commerce.Fingerprint(req.CartId, req.ShippingAddressId, req.PaymentMethodId),
		}); err != nil {
			return err
		}
		return h.stores.Fixtures.ArmGate(ctx, key, fixture.GateStop)
	})
	require.NoError(t, err)
	return orders
}

// confirmedStream is the stream the workflow itself records for a
// successful order.
func confirmedStream(req *contracts.StartOrderWorkflowReq) ([]eventstore.Envelope, error) {
	const at = 1_700_000_000_000
	lines := make([]order.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = order.Line{SKU: l.GetSku(), Quantity: l.GetQuantity()}
	}
	st := order.State{OrderID: req.OrderId}
	var envs []eventstore.Envelope
	add := func(ev order.Event, err error, cmd string) error {
		if err != nil {
			return err
		}
		if st, err = order.Apply(st, ev, at); err != nil {
			return err
		}
		typ, data, err := workflow.EncodeEvent(ev)
		if err != nil {
			return err
		}
		envs = append(envs, eventstore.Envelope{EventID: ev.ID(), OrderID: req.OrderId, EventType: typ,
			SourceCommandID: cmd, CreatedAtUnixMs: at, Data: data})
		return nil
	}
	ev, err := order.Start(st, order.StartOrder{OrderID: req.OrderId, CartID: req.CartId, ShippingAddressID: req.ShippingAddressId,
		SourceCommandID: req.SourceCommandId, Lines: lines, Amount: req.Amount, Currency: req.Currency})
	if err := add(ev, err, req.SourceCommandId); err != nil {
		return nil, err
	}
	ev, err = order.ReservationResult(st, true, "")
	if err := add(ev, err, order.StepSourceCommandID(req.OrderId, order.StepReserveInventory)); err != nil {
		return nil, err
	}
	ev, err = order.PaymentResult(st, true, "")
	if err := add(ev, err, order.StepSourceCommandID(req.OrderId, order.StepAuthorizePayment)); err != nil {
		return nil, err
	}
	ev, err = order.Confirm(st, at)
	return envs, add(ev, err, order.StepSourceCommandID(req.OrderId, order.StepConfirm))
}

// activate makes every order a live grain through the member's client —
// a rebuild is the cheapest command that opens a terminal order — and
// waits until every non-terminal one is parked at its gate.
func (h *harness) activate(t *testing.T, c *grain.Client, orders []seededOrder) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	require.NoError(t, forEach(len(orders), 64, func(i int) error {
		o := orders[i]
		if o.terminal {
			_, err := c.RebuildOrderProjection(ctx, &contracts.RebuildOrderProjectionReq{OrderId: o.id})
			return err
		}
		if _, _, err := c.StartOrderWorkflow(ctx, o.start); err != nil {
			return err
		}
		for {
			st, _, err := h.stores.ReadModel.Get(ctx, o.id)
			if err == nil && st.GetStatus() == contracts.OrderStatus_InventoryReserved {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s never parked at InventoryReserved (last %v, %v)", o.id, st.GetStatus(), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}))
}

// records reads the Location record of every order.
func (h *harness) records(t *testing.T, orders []seededOrder) []location.Record {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	out := make([]location.Record, len(orders))
	require.NoError(t, forEach(len(orders), 64, func(i int) (err error) {
		out[i], err = h.stores.Location.Get(ctx, grain.KindName, orders[i].id)
		return err
	}))
	return out
}

// forEach runs f for 0..n-1 on workers goroutines and returns the errors.
func forEach(n, workers int, f func(i int) error) error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("#%d: %w", i, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// quietEvidence keeps evidence out of the test log: a relocation prints a
// line per order.
func quietEvidence(ev *workflowtest.Evidence) wfOpt {
	return func(c *node.WorkflowConfig) { c.Evidence = ev }
}

// capturedLogs also keeps the member's warnings for the test to read.
func capturedLogs(t *testing.T, name string, into io.Writer) wfOpt {
	return func(c *node.WorkflowConfig) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(into, tlogWriter{t}), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)
	}
}

// A graceful stop of a member hosting thousands of grains hands every one
// off within the drain budget: terminal orders released where they stand,
// the others relocated to the remaining member with their generation.
//
// The figure: go test -count=1 -v -run TestDrainHandsOffThousandsOfGrains ./cluster/clustertest/
func TestDrainHandsOffThousandsOfGrains(t *testing.T) {
	n := drainScaleGrains
	if testing.Short() {
		n /= 10
	}
	h := newHarness(t)
	evA, evB := &workflowtest.Evidence{}, &workflowtest.Evidence{}
	wa := h.startWorkflow("workflow-a", withFixtures(), quietEvidence(evA))
	orders := h.seedOrders(t, "drain", n)
	seeded := time.Now()
	// Alone in the cluster, workflow-a activates every order.
	h.activate(t, wa.Client, orders)
	t.Logf("activated %d grains on workflow-a in %s", n, time.Since(seeded).Round(time.Millisecond))
	before := h.records(t, orders)
	for i, r := range before {
		require.Equal(t, location.Ready, r.Status, orders[i].id)
		require.Equal(t, wa.Member.ID(), r.Owner, orders[i].id)
	}
	wb := h.startWorkflow("workflow-b", withFixtures(), quietEvidence(evB))
	waitMembers(t, wa.Member.Lookup, 2)

	cfg := node.DrainConfig{Parallelism: node.DefaultDrainParallelism, Budget: 30 * time.Second}
	began := time.Now()
	rep, err := wa.DrainWith(context.Background(), cfg)
	took := time.Since(began)
	require.NoError(t, err)
	t.Logf("drained %d grains (%d terminal released, %d relocated) at parallelism %d: hand-off %s, with leaving the cluster %s",
		rep.Hosted, rep.Released, rep.Relocated, cfg.Parallelism, rep.HandOff.Round(time.Millisecond), took.Round(time.Millisecond))
	require.Less(t, took, cfg.Budget)
	require.Equal(t, node.DrainReport{Hosted: n, Released: n / 2, Relocated: n / 2, HandOff: rep.HandOff}, rep)

	after := h.records(t, orders)
	for i, o := range orders {
		if o.terminal {
			require.Equal(t, location.Missing, after[i].Status, "terminal %s is released, not moved", o.id)
			require.Equal(t, before[i].Generation, after[i].Generation, o.id)
			continue
		}
		require.Equal(t, location.Ready, after[i].Status, o.id)
		require.Equal(t, wb.Member.ID(), after[i].Owner, "%s relocated to workflow-b", o.id)
		require.Equal(t, wb.Member.Address(), after[i].PIDAddress, o.id)
		require.Equal(t, before[i].Generation, after[i].Generation, "relocation of %s keeps its generation", o.id)
	}
	hosted, err := wb.Member.Lookup.Hosted()
	require.NoError(t, err)
	require.Len(t, hosted, n/2, "workflow-b hosts exactly the relocated orders")
	replayed := 0
	for _, l := range evB.Lines() {
		if strings.HasPrefix(l, "shoppingmall-order replayed order=drain-") {
			replayed++
		}
	}
	require.Equal(t, n/2, replayed, "each relocated order replayed once at its target")
}

// When the last workflow member stops, its non-terminal orders are closed:
// authority released, each logged by id for the operator, the read model
// still showing where it stands; the next command after a member is back
// resumes it at generation + 1.
func TestDrainOfLastMemberClosesNonTerminalOrders(t *testing.T) {
	h := newHarness(t)
	var logs workflowtest.Evidence
	wa := h.startWorkflow("workflow-a", withFixtures(), quietEvidence(&workflowtest.Evidence{}), capturedLogs(t, "workflow-a", &logs))
	orders := h.seedOrders(t, "last", 10)
	h.activate(t, wa.Client, orders)
	before := h.records(t, orders)

	rep, err := wa.DrainWith(context.Background(), node.DrainConfig{Budget: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, node.DrainReport{Hosted: 10, Released: 5, Closed: 5, HandOff: rep.HandOff}, rep)

	ctx := ctxT(t, 30*time.Second)
	var closed []string
	for _, l := range logs.Lines() {
		if strings.Contains(l, `msg="`+node.DrainClosedMessage+`"`) {
			closed = append(closed, l)
		}
	}
	require.Len(t, closed, 5)
	for i, r := range h.records(t, orders) {
		o := orders[i]
		require.Equal(t, location.Missing, r.Status, "%s is not left Ready at a member that is gone", o.id)
		require.Equal(t, before[i].Generation, r.Generation, "closing %s keeps its generation", o.id)
		logged := false
		for _, l := range closed {
			logged = logged || strings.Contains(l, "order="+o.id+" ")
		}
		require.Equal(t, !o.terminal, logged, "only non-terminal %s is logged as closed", o.id)
		if !o.terminal {
			st, _, err := h.stores.ReadModel.Get(ctx, o.id)
			require.NoError(t, err)
			require.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus(), "the read model shows %s unfinished", o.id)
		}
	}

	wb := h.startWorkflow("workflow-b", withFixtures(), quietEvidence(&workflowtest.Evidence{}))
	for i, o := range orders {
		if o.terminal {
			continue
		}
		_, err := wb.Client.ContinueOrderWorkflow(ctx, &contracts.ContinueOrderWorkflowReq{OrderId: o.id})
		require.NoError(t, err, o.id)
		h.waitStatus(t, o.id, contracts.OrderStatus_Confirmed)
		r, err := h.stores.Location.Get(ctx, grain.KindName, o.id)
		require.NoError(t, err)
		require.Equal(t, before[i].Generation+1, r.Generation, o.id)
		require.Equal(t, wb.Member.ID(), r.Owner, o.id)
	}
}
