package clustertest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// writtenStart records a start the way a build writing the given event
// schema would: the first envelope, then the OrderStartedEvent as the
// stream's first entry, stamped with schema. No grain ran for it.
func (h *harness) writtenStart(t *testing.T, schema int) *contracts.StartOrderWorkflowReq {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	lines := make([]order.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = order.Line{SKU: l.GetSku(), Quantity: l.GetQuantity()}
	}
	ev, err := order.Start(order.State{OrderID: req.OrderId}, order.StartOrder{
		OrderID: req.OrderId, CartID: req.CartId, ShippingAddressID: req.ShippingAddressId,
		SourceCommandID: req.SourceCommandId, Lines: lines, Amount: req.Amount, Currency: req.Currency,
	})
	require.NoError(t, err)
	typ, data, err := workflow.EncodeEvent(ev)
	require.NoError(t, err)
	env, err := workflow.EncodeEnvelope(req)
	require.NoError(t, err)
	require.NoError(t, h.stores.Relocation.SaveFirst(ctx, req.OrderId, env))
	c := h.redis.Client()
	defer c.Close()
	require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: "sm:es:{" + req.OrderId + "}:stream", Values: map[string]any{
		"eventId": ev.ID(), "orderId": req.OrderId, "eventType": typ, "version": 1,
		"sourceCommandId": req.SourceCommandId, "createdAtUnixMs": time.Now().UnixMilli(), "data": data,
		"schema": strconv.Itoa(schema),
	}}).Err())
	return req
}

// An order whose stream holds an event of a newer schema than every
// member's build reads is never folded: each member refuses to open it,
// the lookup asks the next member (another build might read it) instead
// of giving up on the first, and the caller gets VERSION_UNSUPPORTED, an
// outage of the builds, never OPEN_FAILED or INTERNAL. Nothing is
// recorded Ready and no step runs. The same start at this build's schema
// is served to the end.
func TestAnEventOfANewerSchemaIsRefusedNotFolded(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	h.startWorkflow("workflow-b")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)

	newer := h.writtenStart(t, workflow.SchemaVersion+1)
	for range 3 {
		began := time.Now()
		_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: newer.OrderId})
		require.Error(t, err)
		t.Logf("continue of an order of schema %d: %v (%s)", workflow.SchemaVersion+1, err, time.Since(began).Round(time.Millisecond))
		require.Equal(t, errkind.VersionUnsupported, errkind.Of(err), "503 VERSION_UNSUPPORTED: %v", err)
		require.False(t, errors.Is(err, location.ErrTimeout))
		require.Less(t, time.Since(began), 3*time.Second, "refused at once, not at a deadline")
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, newer.OrderId)
		require.NoError(t, err)
		require.NotEqual(t, location.Ready, rec.Status, "a grain that cannot read its stream is never recorded Ready")
	}
	require.Equal(t, []string{order.TypeOrderStarted}, h.eventTypes(t, newer.OrderId), "nothing was decided from a half-read stream")
	asked := 0
	for _, name := range []string{"workflow-a", "workflow-b"} {
		if strings.Contains(h.logged(name).String(), "this build reads up to") {
			asked++
		}
	}
	require.Equal(t, 2, asked, "both members were asked before the lookup gave up")

	same := h.writtenStart(t, workflow.SchemaVersion)
	_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: same.OrderId})
	require.NoError(t, err)
	h.waitStatus(t, same.OrderId, contracts.OrderStatus_Confirmed)
}

// holdsSchema marks orderID's stream as holding an event of schema, as the
// append of a build writing it does in its own step (the fence hash).
func (h *harness) holdsSchema(t *testing.T, orderID string, schema int) {
	t.Helper()
	c := h.redis.Client()
	defer c.Close()
	require.NoError(t, c.HSet(ctxT(t, 5*time.Second), "sm:es:{"+orderID+"}:fence", "schema", schema).Err())
}

// In a cluster of mixed builds an order goes only to members that read
// it. workflow-a advertises schema 2, workflow-b only 1, at level 2:
// orders holding schema 2 always activate on workflow-a, and a
// relocation to workflow-b, named or not, is refused and leaves the order
// where it is; orders of the base schema go to both. With workflow-a
// gone, an order of schema 2 that never ran is VERSION_UNSUPPORTED at
// once, and workflow-b was never asked to open it.
func TestPlacementSendsAnOrderOnlyToMembersThatReadIt(t *testing.T) {
	h := newHarness(t)
	wa := h.startWorkflow("workflow-a")
	wb := h.startWorkflow("workflow-b")
	ctx := ctxT(t, 10*time.Second)
	// workflow-a advertises as a build of schema 2 would, over its own.
	<-wa.Member.Lookup.NamePublished()
	require.NoError(t, h.stores.Location.PutMember(ctx, wa.Member.ID(), "workflow-a", 2))
	_, _, err := h.stores.Location.RaiseSchemaLevel(ctx, location.SchemaLevel{Level: 2, RaisedBy: "test"})
	require.NoError(t, err)
	a := h.startAPIWith("api-a", func(c *cluster.Config) { c.StateSchema = h.stores.StateSchema() })
	waitMembers(t, a.member.Lookup, 2)
	for _, l := range []*placement.Lookup{a.member.Lookup, wa.Member.Lookup} {
		require.Eventually(t, func() bool {
			level, ms, _ := l.SchemaView()
			return level == 2 && ms[wa.Member.ID()] == 2 && ms[wb.Member.ID()] == 1
		}, 10*time.Second, 20*time.Millisecond, "placement's view follows the level and the advertisements")
	}

	// Consecutive creations, so that the lookup's round robin alone would
	// put every other one on workflow-b.
	var held []string
	for range 8 {
		newer := h.writtenStart(t, 1)
		h.holdsSchema(t, newer.OrderId, 2)
		_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: newer.OrderId})
		require.NoError(t, err)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, newer.OrderId)
		require.NoError(t, err)
		require.Equal(t, wa.Member.ID(), rec.Owner, "an order of schema 2 is placed on the member that reads it")
		held = append(held, newer.OrderId)
	}
	owners := map[string]int{}
	for range 6 {
		base := h.writtenStart(t, 1)
		_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: base.OrderId})
		require.NoError(t, err)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, base.OrderId)
		require.NoError(t, err)
		owners[rec.Owner]++
	}
	require.Len(t, owners, 2, "orders of the base schema go to both builds: %v", owners)

	for _, target := range []string{"workflow-b", ""} {
		_, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: held[0], TargetNode: target, OperationId: "op-" + target})
		require.Error(t, err, "relocation to %q", target)
		t.Logf("relocation of an order of schema 2 to %q: %v", target, err)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, held[0])
		require.NoError(t, err)
		require.Equal(t, location.Ready, rec.Status)
		require.Equal(t, wa.Member.ID(), rec.Owner, "the order stays where it is read")
	}

	wa.Member.Crash()
	waitMembers(t, a.member.Lookup, 1)
	fresh := h.writtenStart(t, 1)
	h.holdsSchema(t, fresh.OrderId, 2)
	began := time.Now()
	_, err = a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: fresh.OrderId})
	require.Error(t, err)
	require.Equal(t, errkind.VersionUnsupported, errkind.Of(err), "503 VERSION_UNSUPPORTED: %v", err)
	require.Less(t, time.Since(began), 3*time.Second, "refused at once")
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, fresh.OrderId)
	require.NoError(t, err)
	require.NotEqual(t, location.Ready, rec.Status, "workflow-b, which would open it, was never asked")
}

// waitingOrder is an order that a build of schema 2 started and then was
// rolled back from: its start recorded and projected as Created, its
// stream holding schema 2, and nobody owning it.
func (h *harness) waitingOrder(t *testing.T) string {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	req := h.writtenStart(t, 1)
	h.holdsSchema(t, req.OrderId, 2)
	st := &contracts.OrderState{OrderId: req.OrderId, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: time.Now().Add(-time.Minute).UnixMilli()}
	_, err := h.stores.ReadModel.Put(ctx, req.OrderId, 1, st)
	require.NoError(t, err)
	require.NoError(t, h.stores.ReadModel.(readmodel.ActiveIndex).IndexActive(ctx, req.OrderId, st))
	return req.OrderId
}

// After a rollback below the level, orders that hold the newer schema
// wait (VERSION_UNSUPPORTED) with nobody to move them; a member of a
// build that reads them continues them when it joins, and only them: an
// order of the base schema is left to its owner or the next command.
func TestAMemberThatReadsTheWaitingOrdersContinuesThem(t *testing.T) {
	h := newHarness(t)
	wa := h.startWorkflow("workflow-a")
	ctx := ctxT(t, 10*time.Second)
	_, _, err := h.stores.Location.RaiseSchemaLevel(ctx, location.SchemaLevel{Level: 2, RaisedBy: "test"})
	require.NoError(t, err)
	a := h.startAPIWith("api-a", func(c *cluster.Config) { c.StateSchema = h.stores.StateSchema() })
	waitMembers(t, a.member.Lookup, 1)
	require.Eventually(t, func() bool { level, _, _ := a.member.Lookup.SchemaView(); return level == 2 }, 10*time.Second, 20*time.Millisecond)

	waiting := []string{h.waitingOrder(t), h.waitingOrder(t)}
	for _, id := range waiting {
		_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: id})
		require.Equal(t, errkind.VersionUnsupported, errkind.Of(err), "%v", err)
	}
	base := h.writtenStart(t, 1).OrderId
	st := &contracts.OrderState{OrderId: base, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: time.Now().Add(-time.Minute).UnixMilli()}
	_, err = h.stores.ReadModel.Put(ctx, base, 1, st)
	require.NoError(t, err)
	require.NoError(t, h.stores.ReadModel.(readmodel.ActiveIndex).IndexActive(ctx, base, st))

	n, err := wa.ResumeReadable(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a member that reads no more than the others resumes nothing")

	wb := h.startWorkflow("workflow-b")
	<-wb.Member.Lookup.NamePublished()
	require.NoError(t, h.stores.Location.PutMember(ctx, wb.Member.ID(), "workflow-b", 2)) // a build of schema 2
	waitMembers(t, wb.Member.Lookup, 2)
	require.Eventually(t, func() bool { _, ms, _ := wb.Member.Lookup.SchemaView(); return ms[wb.Member.ID()] == 2 }, 10*time.Second, 20*time.Millisecond)
	n, err = wb.ResumeReadable(ctxT(t, 30*time.Second))
	require.NoError(t, err)
	require.Equal(t, len(waiting), n)
	for _, id := range waiting {
		h.waitStatus(t, id, contracts.OrderStatus_Confirmed)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, id)
		require.NoError(t, err)
		require.Equal(t, wb.Member.ID(), rec.Owner, "placed on the build that reads it")
	}
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, base)
	require.NoError(t, err)
	require.Equal(t, location.Missing, rec.Status, "an order of the base schema is not this resume's")
}
