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
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
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
