package edgetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/edge"
)

// timeline reads GET /admin/orders/{id}/timeline, strictly decoded.
func (h *harness) timeline(a *apiNode, id string) *edge.TimelineReply {
	h.t.Helper()
	code, b := h.do("GET", a, "/admin/orders/"+id+"/timeline", "")
	require.Equal(h.t, http.StatusOK, code, string(b))
	var rep edge.TimelineReply
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(h.t, dec.Decode(&rep), string(b))
	var tb strings.Builder
	tw := tabwriter.NewWriter(&tb, 0, 4, 1, ' ', 0)
	for _, e := range rep.Entries {
		line, _ := json.Marshal(e)
		fmt.Fprintf(tw, "%d\t%s\t%s\n", e.AtUnixMs, e.Kind, line)
	}
	_ = tw.Flush()
	h.t.Logf("timeline of %s (authority %+v):\n%s", id, rep.Authority, tb.String())
	return &rep
}

// ofKind returns the entries of one kind, in the timeline's order.
func ofKind(rep *edge.TimelineReply, kind string) []edge.TimelineEntry {
	var out []edge.TimelineEntry
	for _, e := range rep.Entries {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// position is the index in the timeline of the first entry matching f.
func position(t *testing.T, rep *edge.TimelineReply, what string, f func(edge.TimelineEntry) bool) int {
	t.Helper()
	for i, e := range rep.Entries {
		if f(e) {
			return i
		}
	}
	t.Fatalf("the timeline has no %s", what)
	return -1
}

func eventVersion(v int64) func(edge.TimelineEntry) bool {
	return func(e edge.TimelineEntry) bool { return e.Kind == edge.EntryEvent && e.Version == v }
}

// requireEvents checks the events are versions 1..n of the given types, in
// order, and returns them.
func requireEvents(t *testing.T, rep *edge.TimelineReply, types []string) []edge.TimelineEntry {
	t.Helper()
	evs := ofKind(rep, edge.EntryEvent)
	require.Len(t, evs, len(types))
	for i, e := range evs {
		require.EqualValues(t, i+1, e.Version, "events in version order")
		require.Equal(t, types[i], e.EventType)
		require.Equal(t, order.EventID(rep.OrderID, e.Version), e.EventID)
		require.NotZero(t, e.AtUnixMs)
	}
	for i := 1; i < len(rep.Entries); i++ {
		require.LessOrEqual(t, rep.Entries[i-1].AtUnixMs, rep.Entries[i].AtUnixMs, "entry %d in time order (one clock here)", i)
	}
	return evs
}

// requireEffects checks the reservation and the authorization of a
// confirmed order: their deterministic ids and first results, each at the
// event that recorded it.
func requireEffects(t *testing.T, rep *edge.TimelineReply, reservedAt, authorizedAt int64) {
	t.Helper()
	effects := ofKind(rep, edge.EntryEffect)
	require.Len(t, effects, 2, "a reservation and an authorization, no release")
	rsv, pay := effects[0], effects[1]
	require.Equal(t, edge.EffectReservation, rsv.Effect)
	require.Equal(t, order.ReservationID(rep.OrderID), rsv.EffectID)
	require.Equal(t, "accepted", rsv.Result)
	require.EqualValues(t, 1, rsv.Calls)
	require.Equal(t, reservedAt, rsv.RecordedByVersion)
	require.Equal(t, edge.EffectAuthorization, pay.Effect)
	require.Equal(t, order.PaymentID(rep.OrderID), pay.EffectID)
	require.Equal(t, "accepted", pay.Result)
	require.Equal(t, commerce.DemoSeed().Carts[0].Amount, pay.Amount)
	require.EqualValues(t, 1, pay.Calls)
	require.Equal(t, authorizedAt, pay.RecordedByVersion)
	require.Equal(t, position(t, rep, "reservation", func(e edge.TimelineEntry) bool { return e.Effect == edge.EffectReservation })+1,
		position(t, rep, "v2", eventVersion(reservedAt)), "the reservation stands just before the event recording it")
	require.Equal(t, position(t, rep, "authorization", func(e edge.TimelineEntry) bool { return e.Effect == edge.EffectAuthorization })+1,
		position(t, rep, "v3", eventVersion(authorizedAt)), "the authorization stands just before the event recording it")
}

func requireState(t *testing.T, rep *edge.TimelineReply, status contracts.OrderStatus) {
	t.Helper()
	st := &contracts.OrderState{}
	require.NoError(t, contracts.UnmarshalJSON(rep.State, st), string(rep.State))
	require.Equal(t, rep.OrderID, st.GetOrderId())
	require.Equal(t, status, st.GetStatus())
	require.EqualValues(t, len(ofKind(rep, edge.EntryEvent)), rep.StateVersion)
}

// parkedOrder starts an order whose continuation stops at the
// InventoryReserved gate, so that it is live and unfinished.
func (h *harness) parkedOrder(t *testing.T, start, read *apiNode) (string, *evidence) {
	t.Helper()
	key := newKey(t)
	code, b := h.do("POST", start, "/self-check/gates", fmt.Sprintf(`{"idempotencyKey":%q,"mode":"stop"}`, key))
	require.Equal(t, http.StatusOK, code, string(b))
	res := h.startOrder(start, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key), http.StatusCreated)
	h.waitStatus(read, res.OrderId, contracts.OrderStatus_InventoryReserved)
	ev := h.evidenceOf(read, res.OrderId)
	require.Equal(t, success[:2], ev.types())
	return res.OrderId, ev
}

// TestOrderTimeline: GET /admin/orders/{id}/timeline of a relocated order
// and of a taken-over order, an unknown order, and without the token.
func TestOrderTimeline(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]
	other := map[string]string{"workflow-a": "workflow-b", "workflow-b": "workflow-a"}

	t.Run("relocated order", func(t *testing.T) {
		id, before := h.parkedOrder(t, apiA, apiB)
		target := other[before.OwnerNode]
		code, b := h.do("POST", apiB, "/admin/orders/"+id+"/relocate", fmt.Sprintf(`{"targetNode":%q}`, target))
		require.Equal(t, http.StatusOK, code, string(b))
		rel := &contracts.RelocateOrderRes{}
		require.NoError(t, contracts.UnmarshalJSON(b, rel))
		code, b = h.do("POST", apiA, "/orders/"+id+"/continue", "")
		require.Equal(t, http.StatusOK, code, string(b))
		h.waitStatus(apiB, id, contracts.OrderStatus_Confirmed)
		after := h.evidenceOf(apiA, id)
		require.Equal(t, target, after.OwnerNode)

		rep := h.timeline(apiA, id)
		require.Equal(t, id, rep.OrderID)
		requireState(t, rep, contracts.OrderStatus_Confirmed)
		require.Equal(t, edge.TimelineAuthority{Status: "Ready", Member: after.OwnerMember, Node: target, Generation: 1}, rep.Authority)

		evs := requireEvents(t, rep, success)
		// The source wrote under fence (1, 1); the relocation's target
		// opened the stream again at the same generation, epoch 2.
		for _, e := range evs {
			want := [2]int64{1, 1}
			if e.Version > 2 {
				want = [2]int64{1, 2}
			}
			require.Equal(t, want, [2]int64{e.FenceGeneration, e.FenceEpoch}, "fence of v%d", e.Version)
		}

		own := ofKind(rep, edge.EntryOwnership)
		require.Equal(t, []edge.TimelineEntry{
			{AtUnixMs: own[0].AtUnixMs, Kind: edge.EntryOwnership, Change: "activation", Member: before.OwnerMember, Node: before.OwnerNode, Generation: 1},
			{AtUnixMs: own[1].AtUnixMs, Kind: edge.EntryOwnership, Change: "relocation", Member: after.OwnerMember, Node: target, Generation: 1},
		}, own, "the cold activation at generation 1, then the move to the other member at the same generation")
		require.NotEqual(t, before.OwnerMember, after.OwnerMember)

		ops := ofKind(rep, edge.EntryOperation)
		require.Len(t, ops, 1)
		require.Equal(t, rel.OperationId, ops[0].OperationID)
		require.Equal(t, "relocation", ops[0].OperationKind)
		require.Equal(t, "committed", ops[0].OperationState)
		require.Equal(t, before.OwnerNode, ops[0].Source)
		require.Equal(t, target, ops[0].Target)
		require.EqualValues(t, 1, ops[0].Generation)

		activated := position(t, rep, "activation", func(e edge.TimelineEntry) bool { return e.Change == "activation" })
		moved := position(t, rep, "relocation", func(e edge.TimelineEntry) bool { return e.Change == "relocation" })
		require.Less(t, activated, position(t, rep, "v1", eventVersion(1)), "activated before the first event")
		require.Less(t, position(t, rep, "v2", eventVersion(2)), moved, "moved after the source's events")
		require.Less(t, moved, position(t, rep, "v3", eventVersion(3)), "moved before the target's events")
		requireEffects(t, rep, 2, 3)
	})

	t.Run("unknown order is 404 and leaves no key behind", func(t *testing.T) {
		opt, err := redis.ParseURL(h.redisURL)
		require.NoError(t, err)
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys := func() []string {
			all, err := rdb.Keys(ctx, "*").Result()
			require.NoError(t, err)
			return all
		}
		before := keys()
		id := "ord-never-" + newKey(t)
		for _, a := range h.apis {
			code, b := h.do("GET", a, "/admin/orders/"+id+"/timeline", "")
			require.Equal(t, http.StatusNotFound, code, string(b))
			requireCode(t, b, edge.CodeNotFound)
		}
		require.ElementsMatch(t, before, keys(), "the timeline wrote nothing")
		for _, k := range keys() {
			require.NotContains(t, k, id)
		}
	})

	t.Run("the admin token is required", func(t *testing.T) {
		req, err := http.NewRequest("GET", apiA.adminURL+"/admin/orders/any/timeline", nil)
		require.NoError(t, err)
		res, err := h.http.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		var body bytes.Buffer
		_, _ = body.ReadFrom(res.Body)
		requireCode(t, body.Bytes(), edge.CodeUnauthenticated)
		code, _ := h.do("GET", apiA, "/orders/any/timeline", "")
		require.Equal(t, http.StatusNotFound, code, "not on the public listener")
		code, b := h.do("GET", apiA, "/admin/orders/stuck?olderThan=1h", "")
		require.Equal(t, http.StatusOK, code, "the stuck report still answers beside the timeline: %s", b)
	})

	// Last: it crashes a workflow member.
	t.Run("taken-over order", func(t *testing.T) {
		id, before := h.parkedOrder(t, apiB, apiA)
		h.workflows[before.OwnerNode].Member.Crash()
		for _, a := range h.apis {
			require.Eventually(t, func() bool { return len(a.api.Member.Lookup.Eligible(grain.KindName)) == 1 }, 10*time.Second, 10*time.Millisecond,
				"%s sees the owner gone", a.name)
		}
		code, b := h.do("POST", apiA, "/admin/orders/"+id+"/takeover?caller=timeline-test", "")
		require.Equal(t, http.StatusOK, code, string(b))
		var tk edge.TakeoverReply
		require.NoError(t, json.Unmarshal(b, &tk))
		require.Len(t, tk.Orders, 1)
		require.Equal(t, [2]int64{1, 2}, [2]int64{tk.Orders[0].OldGeneration, tk.Orders[0].NewGeneration})
		code, b = h.do("POST", apiB, "/orders/"+id+"/continue", "")
		require.Equal(t, http.StatusOK, code, string(b))
		h.waitStatus(apiA, id, contracts.OrderStatus_Confirmed)
		after := h.evidenceOf(apiA, id)
		survivor := other[before.OwnerNode]
		require.Equal(t, survivor, after.OwnerNode)

		rep := h.timeline(apiB, id)
		requireState(t, rep, contracts.OrderStatus_Confirmed)
		require.Equal(t, edge.TimelineAuthority{Status: "Ready", Member: after.OwnerMember, Node: survivor, Generation: 3}, rep.Authority)
		evs := requireEvents(t, rep, success)
		for _, e := range evs {
			want := [2]int64{1, 1}
			if e.Version > 2 {
				want = [2]int64{3, 1} // the fence was raised to 2; the next owner activated above it
			}
			require.Equal(t, want, [2]int64{e.FenceGeneration, e.FenceEpoch}, "fence of v%d", e.Version)
		}

		own := ofKind(rep, edge.EntryOwnership)
		require.Len(t, own, 3)
		require.Equal(t, []edge.TimelineEntry{
			{AtUnixMs: own[0].AtUnixMs, Kind: edge.EntryOwnership, Change: "activation", Member: before.OwnerMember, Node: before.OwnerNode, Generation: 1},
			{AtUnixMs: own[1].AtUnixMs, Kind: edge.EntryOwnership, Change: "takeover", Member: before.OwnerMember, Node: before.OwnerNode, Generation: 2},
			{AtUnixMs: own[2].AtUnixMs, Kind: edge.EntryOwnership, Change: "activation", Member: after.OwnerMember, Node: survivor, Generation: 3},
		}, own, "activation, takeover from the dead owner to generation 2, activation above it")

		ops := ofKind(rep, edge.EntryOperation)
		require.Len(t, ops, 1)
		op := ops[0]
		require.Equal(t, tk.Orders[0].OperationID, op.OperationID)
		require.Equal(t, "takeover", op.OperationKind)
		require.Equal(t, "committed", op.OperationState)
		require.Equal(t, before.OwnerNode, op.Source)
		require.Equal(t, before.OwnerMember, op.Member)
		require.Equal(t, [2]int64{1, 2}, [2]int64{op.Generation, op.NewGeneration}, "old and new generation")
		require.Equal(t, "timeline-test", op.Caller)

		opAt := position(t, rep, "takeover operation", func(e edge.TimelineEntry) bool { return e.Kind == edge.EntryOperation })
		takenAt := position(t, rep, "takeover", func(e edge.TimelineEntry) bool { return e.Change == "takeover" })
		require.Less(t, position(t, rep, "v2", eventVersion(2)), opAt)
		require.Less(t, opAt, takenAt, "recorded, then the record reset")
		require.Less(t, takenAt, position(t, rep, "v3", eventVersion(3)))
		requireEffects(t, rep, 2, 3)
	})
}
