package edgetest

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/edge"
)

// waitFor is GET /orders/{id}?waitFor=terminal&timeoutMs=ms on a: the
// status, the X-Wait header and the state.
func (h *harness) waitFor(a *apiNode, id string, ms int) (int, string, *contracts.OrderState) {
	h.t.Helper()
	res, err := h.http.Get(a.url + "/orders/" + id + "?waitFor=terminal&timeoutMs=" + fmt.Sprint(ms))
	require.NoError(h.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, res.Header.Get(edge.HeaderWait), nil
	}
	m := &contracts.GetOrderStateRes{}
	require.NoError(h.t, contracts.UnmarshalJSON(b, m), string(b))
	return res.StatusCode, res.Header.Get(edge.HeaderWait), m.GetState()
}

// TestWaitForTheOutcome: the API processes as wired for production
// (edgenode: one terminal-notice subscription each) answer a wait on
// another API's order when its projection turns terminal, and a wait on
// an order whose authority is released neither activates it nor writes
// anything: it times out with the state as it is.
func TestWaitForTheOutcome(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]
	for _, a := range h.apis {
		require.NotNil(t, a.api.Terminal, "%s wires the terminal feed", a.name)
		require.Eventually(t, func() bool { return a.api.Terminal.Subscriptions() == 1 }, 10*time.Second, 5*time.Millisecond)
	}

	for _, c := range []struct {
		cart, method string
		want         contracts.OrderStatus
	}{
		{commerce.DemoCartOK, commerce.DemoMethodOK, contracts.OrderStatus_Confirmed},
		{commerce.DemoCartOK, commerce.DemoMethodDeclined, contracts.OrderStatus_Failed},
	} {
		res := h.startOrder(apiA, startBody(c.cart, c.method, newKey(t)), http.StatusCreated)
		began := time.Now()
		code, wait, st := h.waitFor(apiB, res.OrderId, 15_000)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, edge.WaitReached, wait)
		require.Equal(t, c.want, st.GetStatus())
		require.Less(t, time.Since(began), 10*time.Second)
		t.Logf("%s reached %s, waited %s", res.OrderId, st.GetStatus(), time.Since(began))
	}

	// A parked order whose authority an operator released: a wait reads
	// it, times out, and activates nothing.
	id, _ := h.parkedOrder(t, apiA, apiA)
	code, b := h.do("POST", apiA, "/admin/orders/"+id+"/close", "")
	require.Equal(t, http.StatusOK, code, string(b))
	before := h.evidenceOf(apiA, id)
	code, wait, st := h.waitFor(apiB, id, 300)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, edge.WaitTimeout, wait)
	require.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus())
	after := h.evidenceOf(apiA, id)
	require.Equal(t, before.Authority, after.Authority, "the wait activated nothing")
	require.Equal(t, before.Generation, after.Generation)
	require.Equal(t, before.OwnerMember, after.OwnerMember)
	require.Equal(t, before.types(), after.types(), "the wait wrote no event")
	t.Logf("closed order %s: authority %s generation %d, unchanged by the wait", id, after.Authority, after.Generation)
}

// TestTheOwnerTellsTheStartingAPIOfTheEnd: the grain of an order an API
// started tells that API of the order's end over the cluster link
// (grain.NoticeTo), with the terminal record; the other API is not told,
// and learns of it, if it waits, from Redis.
func TestTheOwnerTellsTheStartingAPIOfTheEnd(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]
	for _, c := range []struct {
		cart, method string
		want         contracts.OrderStatus
	}{
		{commerce.DemoCartOK, commerce.DemoMethodOK, contracts.OrderStatus_Confirmed},
		{commerce.DemoCartOK, commerce.DemoMethodDeclined, contracts.OrderStatus_Failed},
	} {
		toA, toB := apiA.api.Terminal.Delivered(), apiB.api.Terminal.Delivered()
		res := h.startOrder(apiA, startBody(c.cart, c.method, newKey(t)), http.StatusCreated)
		code, wait, st := h.waitFor(apiA, res.OrderId, 15_000)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, edge.WaitReached, wait)
		require.Equal(t, c.want, st.GetStatus())
		require.Eventually(t, func() bool { return apiA.api.Terminal.Delivered() == toA+1 }, 10*time.Second, 5*time.Millisecond,
			"the owner tells the starting API once")
		code, wait, onB := h.waitFor(apiB, res.OrderId, 15_000)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, edge.WaitReached, wait)
		sameState(t, st, onB)
		require.Equal(t, toB, apiB.api.Terminal.Delivered(), "the other API is not told over the link")
	}
}
