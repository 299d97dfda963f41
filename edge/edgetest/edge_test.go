package edgetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/edge"
)

// TestCommerceApiOverHTTP runs the scenarios of docs/contract.md,
// "Scenarios", against one cluster of two API and two workflow members.
func TestCommerceApiOverHTTP(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]

	t.Run("readiness lines", func(t *testing.T) {
		for _, a := range h.apis {
			ev := h.ev(a.name)
			require.Equal(t, 1, ev.Count("shoppingmall-ready kind=http node="+a.name))
			for _, wf := range []string{"workflow-a", "workflow-b"} {
				line := fmt.Sprintf("shoppingmall-ready kind=object-route node=%s target=%s", a.name, wf)
				require.Eventually(t, func() bool { return ev.Count(line) > 0 }, 10*time.Second, 10*time.Millisecond, "%q", line)
				require.Equal(t, 1, ev.Count(line))
			}
			require.Equal(t, []string{"workflow-a", "workflow-b"}, a.api.Routes.Targets())
			require.Equal(t, http.StatusOK, h.status("GET", a, "/healthz", ""))
		}
	})

	t.Run("success is Confirmed, read from either API", func(t *testing.T) {
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
		require.Equal(t, contracts.OrderStatus_Created, res.GetState().GetStatus())
		st := h.waitStatus(apiB, res.OrderId, contracts.OrderStatus_Confirmed)
		require.Equal(t, order.ReservationID(res.OrderId), st.GetReservationId())
		require.Equal(t, order.PaymentID(res.OrderId), st.GetPaymentId())
		cart := commerce.DemoSeed().Carts[0]
		require.Equal(t, cart.Amount, st.GetAmount())
		require.Equal(t, cart.Currency, st.GetCurrency())
		stA, _ := h.getState(apiA, res.OrderId)
		sameState(t, st, stA)

		ev := h.evidenceOf(apiB, res.OrderId)
		require.Equal(t, success, ev.types())
		require.EqualValues(t, 1, ev.ReserveCalls)
		require.EqualValues(t, 1, ev.AuthorizeCalls)
		require.Equal(t, "Ready", ev.Authority)
		require.Contains(t, []string{"workflow-a", "workflow-b"}, ev.OwnerNode)
		require.EqualValues(t, 1, ev.Generation)
		require.Equal(t, 1, h.ev("api-b").Count(fmt.Sprintf("shoppingmall-evidence order=%s events=4", res.OrderId)),
			"the evidence hook prints its line on the API that served it")
		started := fmt.Sprintf("shoppingmall-order started order=%s spot=shoppingmall.order-workflow/%s", res.OrderId, res.OrderId)
		require.Equal(t, 1, h.ev(ev.OwnerNode).Count(started))
	})

	t.Run("inventory failure", func(t *testing.T) {
		res := h.startOrder(apiB, startBody(commerce.DemoCartNoStock, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
		st := h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Failed)
		require.NotEmpty(t, st.GetReason())
		ev := h.evidenceOf(apiA, res.OrderId)
		require.Equal(t, inventoryFailed, ev.types())
		require.Zero(t, ev.AuthorizeCalls, "no payment call after an inventory failure")
	})

	t.Run("payment failure compensates", func(t *testing.T) {
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodDeclined, newKey(t)), http.StatusCreated)
		st := h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Failed)
		require.Equal(t, commerce.DemoDeclineReason, st.GetReason())
		ev := h.evidenceOf(apiB, res.OrderId)
		require.Equal(t, paymentFailed, ev.types())
		require.EqualValues(t, 1, ev.ReleaseCalls)
	})

	t.Run("50 concurrent starts of one key over both APIs", func(t *testing.T) {
		body := startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t))
		type reply struct {
			code int
			raw  []byte
		}
		replies := make([]reply, 50)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				code, b := h.do("POST", h.apis[i%2], "/orders", body)
				replies[i] = reply{code, b}
			}()
		}
		close(start)
		wg.Wait()
		ids := map[string]bool{}
		created := 0
		for _, r := range replies {
			require.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.code, string(r.raw))
			res := &contracts.StartOrderRes{}
			require.NoError(t, contracts.UnmarshalJSON(r.raw, res))
			ids[res.OrderId] = true
			if r.code == http.StatusCreated {
				created++
			}
		}
		require.Len(t, ids, 1, "one key, one OrderId")
		require.Equal(t, 1, created, "exactly one request recorded the start")
		var id string
		for id = range ids {
		}
		h.waitStatus(apiA, id, contracts.OrderStatus_Confirmed)
		ev := h.evidenceOf(apiA, id)
		require.Equal(t, success, ev.types(), "exactly one OrderStartedEvent")
		require.EqualValues(t, 1, ev.ReserveCalls)
	})

	t.Run("replay of a started key is 200 with the current state", func(t *testing.T) {
		key := newKey(t)
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key), http.StatusCreated)
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
		again := h.startOrder(apiB, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key), http.StatusOK)
		require.Equal(t, res.OrderId, again.OrderId)
		require.Equal(t, contracts.OrderStatus_Confirmed, again.GetState().GetStatus())
		code, b := h.do("POST", apiB, "/orders", startBody(commerce.DemoCartNoStock, commerce.DemoMethodOK, key))
		require.Equal(t, http.StatusUnprocessableEntity, code)
		requireCode(t, b, edge.CodeIdempotencyKeyReused)
	})

	t.Run("a lost mapping reaches the same order, and a reused key is still 422", func(t *testing.T) {
		// A store failover that lost the key's newest write: the mapping
		// of a Confirmed order is gone. The OrderId is the key's, so the
		// retry finds the order it started instead of making a second one.
		key := newKey(t)
		body := startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key)
		res := h.startOrder(apiA, body, http.StatusCreated)
		require.Equal(t, order.OrderIDFor([]byte(orderIDSecret), key), res.OrderId)
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
		lose := func() {
			t.Helper()
			mapping := h.keysNaming("idem:order:{" + res.OrderId + "}")
			require.Len(t, mapping, 1, "the key's mapping")
			h.del(mapping...)
		}

		lose()
		again := h.startOrder(apiB, body, http.StatusOK)
		require.Equal(t, res.OrderId, again.OrderId, "the same order, not a second one")
		require.Equal(t, contracts.OrderStatus_Confirmed, again.GetState().GetStatus())
		ev := h.evidenceOf(apiA, res.OrderId)
		require.Equal(t, success, ev.types(), "one OrderStartedEvent")
		require.EqualValues(t, 1, ev.AuthorizeCalls, "one payment authorization")
		require.EqualValues(t, 1, ev.ReserveCalls)

		// The same key for another request, with the mapping gone again:
		// the recorded start refuses it, and its mapping is given back so
		// that the key's own retry is still answered.
		lose()
		code, b := h.do("POST", apiA, "/orders", startBody(commerce.DemoCartOK, commerce.DemoMethodDeclined, key))
		require.Equal(t, http.StatusUnprocessableEntity, code, string(b))
		requireCode(t, b, edge.CodeIdempotencyKeyReused)
		require.Empty(t, h.keysNaming("idem:order:{"+res.OrderId+"}"), "the refused request's mapping was given back")
		again = h.startOrder(apiA, body, http.StatusOK)
		require.Equal(t, res.OrderId, again.OrderId)
		ev = h.evidenceOf(apiB, res.OrderId)
		require.Equal(t, success, ev.types())
		require.EqualValues(t, 1, ev.AuthorizeCalls)
	})

	t.Run("an order whose mapping is in the layout before the order's tag keeps its key", func(t *testing.T) {
		// As the release before filed it: under the key's own tag, without
		// the key beside it.
		key := newKey(t)
		body := startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key)
		res := h.startOrder(apiA, body, http.StatusCreated)
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
		mapping := h.keysNaming("idem:order:{" + res.OrderId + "}")
		require.Len(t, mapping, 1, "the mapping sits under the order's tag")
		old := strings.Replace(mapping[0], "idem:order:{"+res.OrderId+"}", "idem:{"+key+"}", 1)
		h.onRedis(func(ctx context.Context, rdb *redis.Client) {
			v, err := rdb.HGetAll(ctx, mapping[0]).Result()
			require.NoError(t, err)
			require.Equal(t, key, v["key"], "with its key")
			require.NoError(t, rdb.HSet(ctx, old, "orderId", v["orderId"], "status", v["status"], "fingerprint", v["fingerprint"]).Err())
			require.NoError(t, rdb.Del(ctx, mapping[0]).Err())
		})

		again := h.startOrder(apiB, body, http.StatusOK)
		require.Equal(t, res.OrderId, again.OrderId)
		require.Equal(t, contracts.OrderStatus_Confirmed, again.GetState().GetStatus())
		require.Empty(t, h.keysNaming("idem:order:{"+res.OrderId+"}"), "answered from the old mapping, which is not copied")
		code, b := h.do("POST", apiA, "/orders", startBody(commerce.DemoCartOK, commerce.DemoMethodDeclined, key))
		require.Equal(t, http.StatusUnprocessableEntity, code, string(b))
		requireCode(t, b, edge.CodeIdempotencyKeyReused)
		require.Len(t, h.keysNaming("idem:{"+key+"}"), 1, "the old mapping stays")
		ev := h.evidenceOf(apiA, res.OrderId)
		require.Equal(t, success, ev.types(), "one OrderStartedEvent")
		require.EqualValues(t, 1, ev.AuthorizeCalls, "one payment authorization")
	})

	t.Run("a Location record older than the stream's fence does not lock the order out", func(t *testing.T) {
		// The Location Store restored from a snapshot taken while the
		// order was passivated at generation 1, after generations up to
		// 3 had written its stream: every activation the record gives
		// (generation 2) is below the stream's fence.
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
		id := res.OrderId
		h.waitStatus(apiA, id, contracts.OrderStatus_Confirmed)
		var record, fence string
		for _, k := range h.keysNaming("{" + id + "}") {
			switch {
			case strings.HasSuffix(k, "}:fence"):
				fence = k
			case strings.HasPrefix(k, "sm:loc:") && strings.HasSuffix(k, ":{"+id+"}"):
				record = k
			}
		}
		require.NotEmpty(t, fence, "the stream's fence")
		require.NotEmpty(t, record, "the Location record")
		h.onRedis(func(ctx context.Context, rdb *redis.Client) {
			require.NoError(t, rdb.HSet(ctx, fence, "gen", 3, "epoch", 1).Err())
			require.NoError(t, rdb.Del(ctx, record).Err())
			require.NoError(t, rdb.HSet(ctx, record, "generation", 1).Err())
		})

		code, b := h.do("POST", apiB, "/orders/"+id+"/continue", "")
		require.Equal(t, http.StatusOK, code, "the order is served again at once: %s", b)
		h.onRedis(func(ctx context.Context, rdb *redis.Client) {
			rec, err := rdb.HGetAll(ctx, record).Result()
			require.NoError(t, err)
			require.Equal(t, "Ready", rec["status"])
			require.Equal(t, "4", rec["generation"], "the record was raised above the stream's fence")
			gen, err := rdb.HGet(ctx, fence, "gen").Result()
			require.NoError(t, err)
			require.Equal(t, "4", gen, "and the stream fenced at the new generation")
		})
		ev := h.evidenceOf(apiA, id)
		require.Equal(t, success, ev.types())
		require.EqualValues(t, 1, ev.AuthorizeCalls)
	})

	t.Run("unknown order: continue and rebuild are 404 and create nothing", func(t *testing.T) {
		id := "ord-never-" + newKey(t)
		for _, p := range []string{"/continue", "/rebuild-projection"} {
			code, b := h.do("POST", apiA, "/orders/"+id+p, "")
			require.Equal(t, http.StatusNotFound, code, string(b))
			requireCode(t, b, edge.CodeNotFound)
		}
		// Nothing of the order is left in any store: no creation lock,
		// no Location record, no stream or fence.
		require.Empty(t, h.keysNaming(id), "no key names the unknown order")
		code, b := h.do("GET", apiB, "/self-check/orders/"+id+"/evidence", "")
		require.Equal(t, http.StatusNotFound, code, "no stream was created")
		requireCode(t, b, edge.CodeNotFound)
		_, ok := h.getState(apiA, id)
		require.False(t, ok, "no projection was created")
	})

	t.Run("invalid input and unknown cart are 400 with the field", func(t *testing.T) {
		code, b := h.do("POST", apiA, "/orders", startBody("cart-nope", commerce.DemoMethodOK, newKey(t)))
		require.Equal(t, http.StatusBadRequest, code)
		requireCode(t, b, edge.CodeInvalidArgument)
		require.Contains(t, string(b), `"field":"cartId"`)
		code, _ = h.do("POST", apiA, "/orders", startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t))+" {}")
		require.Equal(t, http.StatusBadRequest, code, "trailing data")
	})

	t.Run("pending mapping resumes the same OrderId", func(t *testing.T) {
		key := newKey(t)
		body := startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key)
		code, b := h.do("POST", apiA, "/self-check/pending-mapping", body)
		require.Equal(t, http.StatusOK, code, string(b))
		var pm struct {
			OrderID string `json:"orderId"`
		}
		require.NoError(t, json.Unmarshal(b, &pm))
		require.NotEmpty(t, pm.OrderID)
		_, ok := h.getState(apiA, pm.OrderID)
		require.False(t, ok, "a pending mapping starts nothing")

		res := h.startOrder(apiB, body, http.StatusCreated)
		require.Equal(t, pm.OrderID, res.OrderId, "a pending key resumes its OrderId")
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
		require.Equal(t, success, h.evidenceOf(apiA, res.OrderId).types())
	})

	t.Run("gate stop parks at InventoryReserved; continue resumes from payment", func(t *testing.T) {
		key := newKey(t)
		code, b := h.do("POST", apiA, "/self-check/gates", fmt.Sprintf(`{"idempotencyKey":%q,"mode":"stop"}`, key))
		require.Equal(t, http.StatusOK, code, string(b))
		res := h.startOrder(apiB, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key), http.StatusCreated)
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_InventoryReserved)
		ev := h.evidenceOf(apiA, res.OrderId)
		require.Equal(t, success[:2], ev.types(), "the continuation stopped at the gate")
		require.EqualValues(t, 1, ev.ReserveCalls)
		require.Zero(t, ev.AuthorizeCalls)

		code, b = h.do("POST", apiA, "/orders/"+res.OrderId+"/continue", "{}")
		require.Equal(t, http.StatusOK, code, string(b))
		cres := &contracts.ContinueOrderWorkflowRes{}
		require.NoError(t, contracts.UnmarshalJSON(b, cres))
		require.Equal(t, contracts.OrderStatus_Confirmed, cres.GetState().GetStatus(), "continue ran the payment step (the confirmation rides with it)")
		h.waitStatus(apiB, res.OrderId, contracts.OrderStatus_Confirmed)
		ev = h.evidenceOf(apiB, res.OrderId)
		require.Equal(t, success, ev.types())
		require.EqualValues(t, 1, ev.ReserveCalls, "the reservation was not repeated")
		require.EqualValues(t, 1, ev.AuthorizeCalls)
	})

	t.Run("skipped terminal projection is repaired by continue", func(t *testing.T) {
		key := newKey(t)
		code, b := h.do("POST", apiB, "/self-check/skip-terminal-projection", fmt.Sprintf(`{"idempotencyKey":%q}`, key))
		require.Equal(t, http.StatusOK, code, string(b))
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, key), http.StatusCreated)
		require.Eventually(t, func() bool { return len(h.evidenceOf(apiB, res.OrderId).Events) == len(success) }, 15*time.Second, 10*time.Millisecond,
			"terminal event recorded")
		st, ok := h.getState(apiA, res.OrderId)
		require.True(t, ok)
		require.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus(), "the read model stays behind the stream (before the terminal append)")

		code, b = h.do("POST", apiB, "/orders/"+res.OrderId+"/continue", "")
		require.Equal(t, http.StatusOK, code, string(b))
		cres := &contracts.ContinueOrderWorkflowRes{}
		require.NoError(t, contracts.UnmarshalJSON(b, cres))
		require.Equal(t, contracts.OrderStatus_Confirmed, cres.GetState().GetStatus())
		st, _ = h.getState(apiA, res.OrderId)
		sameState(t, cres.GetState(), st)
	})

	t.Run("deleted projection is rebuilt from the stream alone", func(t *testing.T) {
		confirmed := h.confirmedOrder(t, apiA)
		before, ok := h.getState(apiA, confirmed.OrderId)
		require.True(t, ok)
		code, b := h.do("DELETE", apiB, "/self-check/orders/"+confirmed.OrderId+"/projection", "")
		require.Equal(t, http.StatusOK, code, string(b))
		_, ok = h.getState(apiA, confirmed.OrderId)
		require.False(t, ok, "projection deleted")

		code, b = h.do("POST", apiA, "/orders/"+confirmed.OrderId+"/rebuild-projection", `{"orderId":"`+confirmed.OrderId+`"}`)
		require.Equal(t, http.StatusOK, code, string(b))
		rres := &contracts.RebuildOrderProjectionRes{}
		require.NoError(t, contracts.UnmarshalJSON(b, rres))
		sameState(t, before, rres.GetState())
		after, ok := h.getState(apiB, confirmed.OrderId)
		require.True(t, ok)
		sameState(t, before, after)
		require.Len(t, h.evidenceOf(apiA, confirmed.OrderId).Events, len(success), "rebuild appends nothing")
	})

	t.Run("repeated effects return the first results and move nothing", func(t *testing.T) {
		confirmed := h.confirmedOrder(t, apiB)
		code, b := h.do("POST", apiA, "/self-check/orders/"+confirmed.OrderId+"/repeat-effects", "")
		require.Equal(t, http.StatusOK, code, string(b))
		var rep struct {
			Reservation struct {
				First, Repeat struct{ Accepted bool }
				StockBefore   map[string]int64
				StockAfter    map[string]int64
			}
			Payment struct {
				First, Repeat  struct{ Accepted bool }
				CapturedBefore int64
				CapturedAfter  int64
			}
			SameResults  bool
			NothingMoved bool
		}
		require.NoError(t, json.Unmarshal(b, &rep))
		require.True(t, rep.SameResults, string(b))
		require.True(t, rep.NothingMoved, string(b))
		require.True(t, rep.Reservation.Repeat.Accepted)
		require.NotEmpty(t, rep.Reservation.StockBefore)
		require.Equal(t, commerce.DemoSeed().Carts[0].Amount, rep.Payment.CapturedAfter)
		ev := h.evidenceOf(apiA, confirmed.OrderId)
		require.EqualValues(t, 2, ev.ReserveCalls, "the hook's repeat is counted")
	})

	t.Run("admin relocate keeps the generation; close releases authority", func(t *testing.T) {
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
		before := h.evidenceOf(apiA, res.OrderId)
		target := map[string]string{"workflow-a": "workflow-b", "workflow-b": "workflow-a"}[before.OwnerNode]
		code, b := h.do("POST", apiB, "/admin/orders/"+res.OrderId+"/relocate", fmt.Sprintf(`{"targetNode":%q}`, target))
		require.Equal(t, http.StatusOK, code, string(b))
		rel := &contracts.RelocateOrderRes{}
		require.NoError(t, contracts.UnmarshalJSON(b, rel))
		require.Equal(t, before.OwnerNode, rel.SourceNode)
		require.Equal(t, target, rel.TargetNode)
		require.Equal(t, before.Generation, rel.Generation)
		after := h.evidenceOf(apiA, res.OrderId)
		require.Equal(t, target, after.OwnerNode)
		require.Equal(t, before.Generation, after.Generation)
		require.Len(t, after.Relocations, 1)

		code, b = h.do("POST", apiA, "/admin/orders/"+res.OrderId+"/close", "")
		require.Equal(t, http.StatusOK, code, string(b))
		require.Equal(t, "Missing", h.evidenceOf(apiA, res.OrderId).Authority)
		// The next command activates a new generation of the same order.
		code, b = h.do("POST", apiB, "/orders/"+res.OrderId+"/continue", "")
		require.Equal(t, http.StatusOK, code, string(b))
		require.Equal(t, before.Generation+1, h.evidenceOf(apiA, res.OrderId).Generation)
	})
}

// TestGetWorksWhileOwnerIsDead: a dead Ready owner leaves reads working
// and commands Unavailable, fast, with nothing re-created elsewhere.
func TestGetWorksWhileOwnerIsDead(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]
	created := map[string]string{edge.LabelRoute: "/orders", edge.LabelMethod: "POST", edge.LabelCode: "201"}
	res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
	require.Equal(t, 1.0, apiA.metric(t, edge.MetricHTTPRequests, created), "the API that served the start counted it")
	require.Zero(t, apiB.metric(t, edge.MetricHTTPRequests, created))
	want := h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
	before := h.evidenceOf(apiA, res.OrderId)
	require.Equal(t, "Ready", before.Authority)

	h.workflows[before.OwnerNode].Member.Crash()
	for _, a := range h.apis {
		require.Eventually(t, func() bool { return len(a.api.Member.Lookup.Eligible(grain.KindName)) == 1 }, 10*time.Second, 10*time.Millisecond,
			"%s sees the owner gone", a.name)
	}

	for _, a := range h.apis {
		st, ok := h.getState(a, res.OrderId)
		require.True(t, ok, "GET reads the read model, owner or not")
		sameState(t, want, st)
	}
	ownerGone := map[string]string{edge.LabelReason: edge.ReasonOwnerGone}
	for _, p := range []string{"/continue", "/rebuild-projection"} {
		gone, unavailable := apiB.metric(t, edge.MetricUnavailable, ownerGone), apiB.metric(t, edge.MetricUnavailable, nil)
		route := map[string]string{edge.LabelRoute: "/orders/:orderId" + p, edge.LabelMethod: "POST", edge.LabelCode: "503"}
		began := time.Now()
		code, b := h.do("POST", apiB, "/orders/"+res.OrderId+p, "")
		took := time.Since(began)
		require.Equal(t, http.StatusServiceUnavailable, code, string(b))
		requireCode(t, b, edge.CodeUnavailable)
		require.Equal(t, 1.0, apiB.metric(t, edge.MetricUnavailable, ownerGone)-gone, "OWNER_GONE counted once")
		require.Equal(t, 1.0, apiB.metric(t, edge.MetricUnavailable, nil)-unavailable, "and no other reason")
		require.Equal(t, 1.0, apiB.metric(t, edge.MetricHTTPRequests, route), "under the route template")
		require.Less(t, took, requestTimeout/10, "Unavailable must be fast, not a timeout")
		require.NotContains(t, string(b), before.OwnerMember, "no owner identity leaks")
		t.Logf("%s with a dead owner answered 503 in %s", p, took)
	}
	code, b := h.do("POST", apiA, "/admin/orders/"+res.OrderId+"/relocate", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "relocation is not crash failover: %s", b)
	after := h.evidenceOf(apiB, res.OrderId)
	require.Equal(t, before.OwnerMember, after.OwnerMember, "nothing re-created elsewhere")
	require.Equal(t, before.Generation, after.Generation)
	require.Len(t, after.Events, len(success))
}

// confirmedOrder starts an order of its own through a and waits until it
// is Confirmed, so that no subtest depends on what an earlier one left.
func (h *harness) confirmedOrder(t *testing.T, a *apiNode) *contracts.StartOrderRes {
	t.Helper()
	res := h.startOrder(a, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
	h.waitStatus(a, res.OrderId, contracts.OrderStatus_Confirmed)
	return res
}
