package clustertest

import (
	"context"
	"fmt"
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
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
)

// parkedOrder starts an order whose continuation holds at
// InventoryReserved, and returns it with its owner's workflow.
func (h *harness) parkedOrder(t *testing.T, a *api, ws map[string]*node.Workflow) (*contracts.StartOrderWorkflowReq, string) {
	t.Helper()
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	require.NoError(t, h.stores.Fixtures.ArmGate(ctxT(t, 5*time.Second), req.IdempotencyKey, fixture.GateHold))
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_InventoryReserved)
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	for name, w := range ws {
		if w.Member.ID() == rec.Owner {
			return req, name
		}
	}
	require.FailNow(t, "the owner is none of the workflows", "owner %s of %s", rec.Owner, req.OrderId)
	return nil, ""
}

func other(name string) string {
	if name == "workflow-a" {
		return "workflow-b"
	}
	return "workflow-a"
}

func TestPlannedRelocationKeepsGenerationAndResumesAtPayment(t *testing.T) {
	h := newHarness(t)
	ws := map[string]*node.Workflow{
		"workflow-a": h.startWorkflow("workflow-a", withFixtures()),
		"workflow-b": h.startWorkflow("workflow-b", withFixtures()),
	}
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	req, source := h.parkedOrder(t, a, ws)
	target := other(source)
	before, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)

	// Messages sent while the order moves are answered, never dropped and
	// never Unavailable.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var answered, failed atomic.Int64
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := a.client.RebuildOrderProjection(ctxT(t, 10*time.Second), &contracts.RebuildOrderProjectionReq{OrderId: req.OrderId})
				if err != nil {
					failed.Add(1)
					t.Logf("mid-move request failed: %v", err)
				} else {
					answered.Add(1)
				}
			}
		}()
	}
	res, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId, TargetNode: target, OperationId: "op-" + req.OrderId})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return answered.Load() > 20 }, 5*time.Second, 10*time.Millisecond, "requests after the move are answered")
	close(stop)
	wg.Wait()
	require.Zero(t, failed.Load(), "no request sent during the move may fail")

	require.Equal(t, before.Generation, res.Generation)
	require.Equal(t, source, res.SourceNode)
	require.Equal(t, target, res.TargetNode)
	after, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, after.Status)
	require.Equal(t, ws[target].Member.ID(), after.Owner)
	require.Equal(t, before.Generation, after.Generation, "relocation keeps the generation")
	require.Zero(t, hostedOf{ws[source].Member.Lookup}.hostedCountOf(req.OrderId), "the source stopped")
	require.Equal(t, 1, hostedOf{ws[target].Member.Lookup}.hostedCountOf(req.OrderId))

	op, err := h.stores.Relocation.GetOperation(ctxT(t, 5*time.Second), "op-"+req.OrderId)
	require.NoError(t, err)
	require.Equal(t, relocation.OpCommitted, op.State)
	require.Equal(t, source, op.Source)
	require.Equal(t, target, op.Target)

	replayed := fmt.Sprintf("shoppingmall-order replayed order=%s generation=%d", req.OrderId, before.Generation)
	require.Equal(t, 1, h.evidence(target).Count(replayed))
	require.Zero(t, h.evidence(source).Count(replayed))

	// Payment has not run yet: it starts at the target once the gate opens.
	ctx := ctxT(t, 10*time.Second)
	calls, err := h.stores.Commerce.Payment().AuthorizeCalls(ctx, order.PaymentID(req.OrderId))
	require.NoError(t, err)
	require.Zero(t, calls)
	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctx, req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctx, &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	st := h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)

	require.Equal(t, success, h.eventTypes(t, req.OrderId), "same event order as the plain success path")
	require.Equal(t, order.ReservationID(req.OrderId), st.GetReservationId(), "the existing ReservationId is kept")
	reserves, err := h.stores.Commerce.Inventory().ReserveCalls(ctx, order.ReservationID(req.OrderId))
	require.NoError(t, err)
	require.EqualValues(t, 1, reserves, "ReserveInventory ran once")
	calls, err = h.stores.Commerce.Payment().AuthorizeCalls(ctx, order.PaymentID(req.OrderId))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls)
	repeated := "shoppingmall-order external-effect-repeated order=" + req.OrderId
	require.Zero(t, h.evidence(source).Count(repeated)+h.evidence(target).Count(repeated))
}

func TestRelocationOfDeadOwnerIsRefused(t *testing.T) {
	h := newHarness(t)
	ws := map[string]*node.Workflow{
		"workflow-a": h.startWorkflow("workflow-a", withFixtures()),
		"workflow-b": h.startWorkflow("workflow-b", withFixtures()),
	}
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	req, source := h.parkedOrder(t, a, ws)
	ws[source].Member.Crash()
	waitMembers(t, a.member.Lookup, 1)
	began := time.Now()
	_, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId})
	require.ErrorIs(t, err, placement.ErrUnavailable, "relocating a dead owner's order is not crash failover")
	require.Less(t, time.Since(began), time.Second)
	require.Zero(t, hostedOf{ws[other(source)].Member.Lookup}.hostedCountOf(req.OrderId))
}

// A relocation that fails before the target activates rolls back to the
// source; repeating it completes the move.
func TestInterruptedRelocationRollsBackAndRepeatCompletes(t *testing.T) {
	h := newHarness(t)
	ws := map[string]*node.Workflow{
		"workflow-a": h.startWorkflow("workflow-a", withFixtures()),
		"workflow-b": h.startWorkflow("workflow-b", withFixtures()),
	}
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	req, source := h.parkedOrder(t, a, ws)
	target := other(source)

	ws[target].Member.Lookup.SetDraining(true) // the target refuses to activate
	_, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId, TargetNode: target, OperationId: "op-1"})
	require.ErrorIs(t, err, grain.ErrFailedPrecondition)
	op, err := h.stores.Relocation.GetOperation(ctxT(t, 5*time.Second), "op-1")
	require.NoError(t, err)
	require.Equal(t, relocation.OpAborted, op.State, "the interrupted operation is visible")
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, ws[source].Member.ID(), rec.Owner, "rolled back to the source, never half-owned")

	ws[target].Member.Lookup.SetDraining(false)
	res, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId, TargetNode: target, OperationId: "op-2"})
	require.NoError(t, err)
	require.Equal(t, rec.Generation, res.Generation)
	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctxT(t, 5*time.Second), req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctxT(t, 10*time.Second), &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
}

// A graceful stop hands every live order to the remaining member.
func TestGracefulDrainKeepsOrdersReachable(t *testing.T) {
	h := newHarness(t)
	wa, wb := h.startWorkflow("workflow-a"), h.startWorkflow("workflow-b")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	var onA []string
	for i := 0; i < 8; i++ {
		req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
		_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
		require.NoError(t, err)
		h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
		require.NoError(t, err)
		if rec.Owner == wa.Member.ID() {
			onA = append(onA, req.OrderId)
		}
	}
	require.NotEmpty(t, onA)
	require.NoError(t, wa.Drain(ctxT(t, 30*time.Second)))
	waitMembers(t, a.member.Lookup, 1)
	for _, id := range onA {
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, id)
		require.NoError(t, err)
		require.Equal(t, location.Missing, rec.Status, "terminal order %s is released, not moved", id)
		require.EqualValues(t, 1, rec.Generation)
		c, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: id})
		require.NoError(t, err, "order %s must stay reachable after a graceful stop", id)
		require.Equal(t, contracts.OrderStatus_Confirmed, c.GetState().GetStatus())
		rec, err = h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, id)
		require.NoError(t, err)
		require.Equal(t, wb.Member.ID(), rec.Owner, "order %s reactivated on workflow-b", id)
		require.EqualValues(t, 2, rec.Generation)
	}
}

// A relocation interrupted after it began (the owner marked Moving, the
// operation recorded, nothing activated) is completed by repeating it with
// its operation id: callers waiting meanwhile are answered by the target.
func TestInterruptedRelocationIsCompletedByRepeating(t *testing.T) {
	h := newHarness(t)
	ws := map[string]*node.Workflow{
		"workflow-a": h.startWorkflow("workflow-a", withFixtures()),
		"workflow-b": h.startWorkflow("workflow-b", withFixtures()),
	}
	a := h.startAPI("api-a")
	a.client = grain.NewClient(a.member.Lookup, grain.WithRelocations(h.stores.Relocation))
	waitMembers(t, a.member.Lookup, 2)
	req, source := h.parkedOrder(t, a, ws)
	target := other(source)
	ctx := ctxT(t, 20*time.Second)
	rec, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)

	// The source began the move and was interrupted before the target
	// activated.
	_, err = h.stores.Location.BeginMove(ctx, grain.KindName, req.OrderId, rec.PIDID, "op-int")
	require.NoError(t, err)
	require.NoError(t, h.stores.Relocation.PutOperation(ctx, relocation.Operation{
		ID: "op-int", OrderID: req.OrderId, Source: source, Target: target, Generation: rec.Generation,
		State: relocation.OpMoving, StartedAtUnixMs: 1, UpdatedAtUnixMs: 1,
	}))
	open, found, err := h.stores.Relocation.OpenOperation(ctx, req.OrderId)
	require.NoError(t, err)
	require.True(t, found, "the interrupted operation is visible")
	require.Equal(t, "op-int", open.ID)

	// A command sent while the order is Moving waits for the new owner.
	waiting := make(chan error, 1)
	go func() {
		_, err := a.client.RebuildOrderProjection(ctxT(t, 20*time.Second), &contracts.RebuildOrderProjectionReq{OrderId: req.OrderId})
		waiting <- err
	}()

	res, err := a.client.RelocateOrder(ctx, &contracts.RelocateOrderReq{OrderId: req.OrderId, OperationId: "op-int"})
	require.NoError(t, err)
	require.Equal(t, target, res.TargetNode)
	require.Equal(t, rec.Generation, res.Generation)
	require.NoError(t, <-waiting, "the command sent mid-move is answered by the target")

	after, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, after.Status)
	require.Equal(t, ws[target].Member.ID(), after.Owner)
	require.Equal(t, rec.Generation, after.Generation)
	op, err := h.stores.Relocation.GetOperation(ctx, "op-int")
	require.NoError(t, err)
	require.Equal(t, relocation.OpCommitted, op.State)
	require.Eventually(t, func() bool { return hostedOf{ws[source].Member.Lookup}.hostedCountOf(req.OrderId) == 0 }, 5*time.Second, 10*time.Millisecond,
		"the fenced source stops")
	// The target writes its replay line as its grain opens, which need not
	// come before the answers above: wait for it, then count it once.
	replayed := fmt.Sprintf("shoppingmall-order replayed order=%s generation=%d", req.OrderId, rec.Generation)
	require.Eventually(t, func() bool { return h.evidence(target).Count(replayed) >= 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, h.evidence(target).Count(replayed))

	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctx, req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctx, &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
	reserves, err := h.stores.Commerce.Inventory().ReserveCalls(ctx, order.ReservationID(req.OrderId))
	require.NoError(t, err)
	require.EqualValues(t, 1, reserves)
}

// With no other eligible member, a graceful stop closes its orders
// instead: authority released, generation kept, the next command
// activates generation + 1 once a member is back.
func TestGracefulDrainWithoutPeerClosesOrders(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.NoError(t, w.Drain(ctxT(t, 30*time.Second)))
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Missing, rec.Status, "closed, not left Ready at a member that is gone")
	require.EqualValues(t, 1, rec.Generation)
	h.startWorkflow("workflow-b")
	waitMembers(t, a.member.Lookup, 1)
	c, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: req.OrderId})
	require.NoError(t, err)
	require.Equal(t, contracts.OrderStatus_Confirmed, c.GetState().GetStatus())
	rec, err = h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.EqualValues(t, 2, rec.Generation)
}

// inDoubtMove is the Location Store with its next BeginMove applied but
// answered as a store failure: a write the primary took and its replica
// did not confirm (a WAIT shortfall), or whose reply was lost.
type inDoubtMove struct {
	location.Store
	armed, armedCommit atomic.Bool
}

// CommitMove, armed, applies the commit and answers a store failure.
func (s *inDoubtMove) CommitMove(ctx context.Context, kind, id, opID string, target location.Record) error {
	err := s.Store.CommitMove(ctx, kind, id, opID, target)
	if err == nil && s.armedCommit.CompareAndSwap(true, false) {
		return fmt.Errorf("%w: injected: commit not confirmed by its replica", location.ErrStoreUnavailable)
	}
	return err
}

func (s *inDoubtMove) BeginMove(ctx context.Context, kind, id, pidID, opID string) (int64, error) {
	g, err := s.Store.BeginMove(ctx, kind, id, pidID, opID)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		return 0, fmt.Errorf("%w: injected: write not confirmed by its replica", location.ErrStoreUnavailable)
	}
	return g, err
}

// startInDoubt is two workflow members whose Location Store is
// inDoubtMove, an API, and an order parked at its payment on source.
func startInDoubt(t *testing.T) (*harness, *inDoubtMove, map[string]*node.Workflow, *api, *contracts.StartOrderWorkflowReq, string) {
	t.Helper()
	h := newHarness(t)
	loc := &inDoubtMove{Store: h.stores.Location}
	stores := *h.stores
	stores.Location = loc
	withDoubt := func(c *node.WorkflowConfig) { c.Stores = &stores }
	ws := map[string]*node.Workflow{
		"workflow-a": h.startWorkflow("workflow-a", withFixtures(), withDoubt),
		"workflow-b": h.startWorkflow("workflow-b", withFixtures(), withDoubt),
	}
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	req, source := h.parkedOrder(t, a, ws)
	return h, loc, ws, a, req, source
}

// A relocation whose first write is in doubt rolls it back: the record
// is Ready at the source again, not Moving under an operation nobody
// knows, the answer is the store's 503, and the source goes on serving
// the order to its end.
func TestRelocationWhoseFirstWriteIsInDoubtRollsBack(t *testing.T) {
	h, loc, ws, a, req, source := startInDoubt(t)

	loc.armed.Store(true)
	_, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId, TargetNode: other(source), OperationId: "op-doubt"})
	require.ErrorIs(t, err, grain.ErrStoreUnavailable, "the store's failure, answered as such")
	require.False(t, loc.armed.Load(), "the BeginMove landed before its answer was lost")
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status, "rolled back, not left Moving")
	require.Equal(t, ws[source].Member.ID(), rec.Owner)

	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctxT(t, 5*time.Second), req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctxT(t, 10*time.Second), &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err, "the source still serves the order")
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
}

// A relocation whose commit is in doubt commits again (a no-op once it
// landed) instead of leaving the record Moving: the move completes and
// the target serves the order.
func TestRelocationWhoseCommitIsInDoubtCompletes(t *testing.T) {
	h, loc, ws, a, req, source := startInDoubt(t)
	target := other(source)

	loc.armedCommit.Store(true)
	res, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId, TargetNode: target, OperationId: "op-commit"})
	require.NoError(t, err, "the commit was repeated")
	require.False(t, loc.armedCommit.Load())
	require.Equal(t, target, res.TargetNode)
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, ws[target].Member.ID(), rec.Owner)

	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctxT(t, 5*time.Second), req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctxT(t, 10*time.Second), &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
}
