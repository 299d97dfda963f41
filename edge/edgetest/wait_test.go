package edgetest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
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

// waitAsync is waitFor on a goroutine: its reply, and how long it took.
func (h *harness) waitAsync(a *apiNode, id string, ms int) <-chan waited {
	out := make(chan waited, 1)
	go func() {
		began := time.Now()
		res, err := h.http.Get(a.url + "/orders/" + id + "?waitFor=terminal&timeoutMs=" + fmt.Sprint(ms))
		w := waited{err: err}
		if err == nil {
			defer res.Body.Close()
			b, rerr := io.ReadAll(res.Body)
			m := &contracts.GetOrderStateRes{}
			w.err = errors.Join(rerr, contracts.UnmarshalJSON(b, m))
			w.code, w.wait, w.state = res.StatusCode, res.Header.Get(edge.HeaderWait), m.GetState()
		}
		w.took = time.Since(began)
		out <- w
	}()
	return out
}

type waited struct {
	code  int
	wait  string
	state *contracts.OrderState
	took  time.Duration
	err   error
}

// TestAWaitOnItsOwnStartOutlivesTheGrainThatWouldTellIt: the API that
// started an order waits for it with no subscription, counting on the
// owner's notice over the cluster link; when that owner can no longer
// send it, the wait is covered by the order's channel at once, not when
// the vouch runs out: a grain that moves away tells the API so as it
// leaves, and a member whose link drops (a crash) voids every vouch of
// the API. Either way the wait is answered as soon as the order ends
// under its next owner. The vouch is made to last a minute here, so only
// those two paths can answer within the test's bound.
func TestAWaitOnItsOwnStartOutlivesTheGrainThatWouldTellIt(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]
	feed := apiA.api.Terminal
	feed.VouchFor = time.Minute
	other := map[string]string{"workflow-a": "workflow-b", "workflow-b": "workflow-a"}
	const bound = 15 * time.Second

	// waitCovered starts apiA's wait for id, vouched for, and returns it
	// once cover (which ends the grain that would tell apiA) made the wait
	// subscribe to the order's channel.
	waitCovered := func(id string, cover func()) <-chan waited {
		st, known := feed.Known(id)
		require.True(t, known, "apiA started %s and vouches for it", id)
		require.Nil(t, st)
		subs, waiters := feed.OrderSubscriptions(), feed.Waiters()
		reply := h.waitAsync(apiA, id, 30_000)
		require.Eventually(t, func() bool { return feed.Waiters() == waiters+1 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, subs, feed.OrderSubscriptions(), "the vouched wait subscribes to nothing")
		cover()
		require.Eventually(t, func() bool { return feed.OrderSubscriptions() == subs+1 }, 10*time.Second, 5*time.Millisecond,
			"the wait is covered by %s's channel", id)
		_, known = feed.Known(id)
		require.False(t, known, "the vouch for %s ended", id)
		return reply
	}
	requireReached := func(reply <-chan waited, id string) {
		w := <-reply
		require.NoError(t, w.err)
		require.Equal(t, http.StatusOK, w.code)
		require.Equal(t, edge.WaitReached, w.wait)
		require.Equal(t, contracts.OrderStatus_Confirmed, w.state.GetStatus())
		require.Less(t, w.took, bound, "answered by the order's channel, not by the wait's timeout")
		t.Logf("%s: apiA's wait answered after %s", id, w.took)
	}

	// A planned relocation: the source grain tells apiA it leaves.
	id, before := h.parkedOrder(t, apiA, apiA)
	told := feed.Delivered()
	reply := waitCovered(id, func() {
		code, b := h.do("POST", apiB, "/admin/orders/"+id+"/relocate", fmt.Sprintf(`{"targetNode":%q}`, other[before.OwnerNode]))
		require.Equal(t, http.StatusOK, code, string(b))
	})
	require.Equal(t, told+1, feed.Delivered(), "the leaving grain's notice, not terminal, ended the vouch")
	code, b := h.do("POST", apiB, "/orders/"+id+"/continue", "")
	require.Equal(t, http.StatusOK, code, string(b))
	requireReached(reply, id)

	// A crash: the owner's link to apiA drops.
	id, before = h.parkedOrder(t, apiA, apiA)
	reply = waitCovered(id, func() { h.workflows[before.OwnerNode].Member.Crash() })
	require.Eventually(t, func() bool { return len(apiB.api.Member.Lookup.Eligible(grain.KindName)) == 1 }, 10*time.Second, 10*time.Millisecond,
		"apiB sees the owner gone")
	code, b = h.do("POST", apiB, "/admin/orders/"+id+"/takeover?caller=wait-test", "")
	require.Equal(t, http.StatusOK, code, string(b))
	code, b = h.do("POST", apiB, "/orders/"+id+"/continue", "")
	require.Equal(t, http.StatusOK, code, string(b))
	requireReached(reply, id)

	// What an operator sees of it.
	require.EqualValues(t, feed.OrderSubscriptions(), apiA.metric(t, edge.MetricNoticeSubscriptions, nil))
	require.EqualValues(t, feed.Delivered(), apiA.metric(t, edge.MetricLinkNotices, nil))
	require.Positive(t, feed.Delivered())
}
