package edge

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
)

// waitEnv is an env whose read model is the workflowtest fake, which is
// also the TerminalWatcher: its terminal writes wake the waits.
type waitEnv struct {
	*env
	rm *workflowtest.ReadModel
}

func newWaitEnv(t *testing.T, opts ...envOpt) *waitEnv {
	t.Helper()
	rm := workflowtest.NewReadModel()
	opts = append([]envOpt{func(c *Config) { c.ReadModel, c.Terminal = rm, rm }}, opts...)
	return &waitEnv{env: newEnv(t, opts...), rm: rm}
}

func waitPath(id, timeoutMs string) string {
	return "/orders/" + id + "?waitFor=terminal&timeoutMs=" + timeoutMs
}

func orderState(id string, s contracts.OrderStatus) *contracts.OrderState {
	return &contracts.OrderState{OrderId: id, Status: s, UpdatedAtUnixMs: 1}
}

// requireNoSideEffects: no grain call, no store write, no idempotency
// reservation, and no waiter left registered.
func (e *waitEnv) requireNoSideEffects(t *testing.T) {
	t.Helper()
	require.Zero(t, e.orders.calls(), "a read never calls a grain")
	require.Zero(t, e.rm.Puts.Load()+e.rm.Deletes.Load(), "a read never writes the read model")
	require.Zero(t, e.idem.calls, "a read never reserves a key")
	require.Zero(t, e.rm.Watchers(), "every wait unregisters")
}

func TestWaitParameterValidation(t *testing.T) {
	cases := []struct {
		name, query, field string
	}{
		{"waitFor without timeoutMs", "waitFor=terminal", QueryTimeoutMs},
		{"timeoutMs without waitFor", "timeoutMs=100", QueryTimeoutMs},
		{"waitFor empty", "waitFor=&timeoutMs=100", QueryWaitFor},
		{"waitFor unknown", "waitFor=confirmed&timeoutMs=100", QueryWaitFor},
		{"waitFor case", "waitFor=Terminal&timeoutMs=100", QueryWaitFor},
		{"waitFor twice", "waitFor=terminal&waitFor=terminal&timeoutMs=100", QueryWaitFor},
		{"timeoutMs empty", "waitFor=terminal&timeoutMs=", QueryTimeoutMs},
		{"timeoutMs over the bound", "waitFor=terminal&timeoutMs=30001", QueryTimeoutMs},
		{"timeoutMs far over", "waitFor=terminal&timeoutMs=99999999999999999999", QueryTimeoutMs},
		{"timeoutMs negative", "waitFor=terminal&timeoutMs=-1", QueryTimeoutMs},
		{"timeoutMs plus sign", "waitFor=terminal&timeoutMs=%2B5", QueryTimeoutMs},
		{"timeoutMs decimal", "waitFor=terminal&timeoutMs=1.5", QueryTimeoutMs},
		{"timeoutMs unit", "waitFor=terminal&timeoutMs=5s", QueryTimeoutMs},
		{"timeoutMs space", "waitFor=terminal&timeoutMs=%205", QueryTimeoutMs},
		{"timeoutMs twice", "waitFor=terminal&timeoutMs=5&timeoutMs=5", QueryTimeoutMs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newWaitEnv(t)
			e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Confirmed))
			w := e.do("GET", "/orders/o1?"+tc.query, "")
			require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
			ae := decodeError(t, w)
			require.Equal(t, CodeInvalidArgument, ae.Code)
			require.Equal(t, tc.field, ae.Field, ae.Message)
			require.Empty(t, w.Header().Get(HeaderWait))
			require.Zero(t, e.rm.Gets.Load(), "a refused wait reads nothing")
			e.requireNoSideEffects(t)
		})
	}
	t.Run("the bounds are inclusive", func(t *testing.T) {
		e := newWaitEnv(t)
		e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Confirmed))
		for _, ms := range []string{"0", "1", "0100", "30000"} {
			w := e.do("GET", waitPath("o1", ms), "")
			require.Equal(t, http.StatusOK, w.Code, "timeoutMs=%s: %s", ms, w.Body.String())
			require.Equal(t, WaitReached, w.Header().Get(HeaderWait))
		}
	})
	t.Run("an invalid order id is refused first", func(t *testing.T) {
		e := newWaitEnv(t)
		w := e.do("GET", "/orders/a%7Bb?waitFor=nope", "")
		require.Equal(t, http.StatusBadRequest, w.Code)
		require.Equal(t, "orderId", decodeError(t, w).Field)
	})
	t.Run("a server without a watcher refuses the wait", func(t *testing.T) {
		e := newEnv(t)
		e.rm.put(orderState("o1", contracts.OrderStatus_Created))
		w := e.do("GET", waitPath("o1", "100"), "")
		require.Equal(t, http.StatusBadRequest, w.Code)
		require.Equal(t, QueryWaitFor, decodeError(t, w).Field)
	})
}

// A plain GET is unchanged: one read, no wait, no X-Wait.
func TestPlainGetDoesNotWait(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Created))
	w := e.do("GET", "/orders/o1", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, w.Header().Get(HeaderWait))
	require.Equal(t, contracts.OrderStatus_Created, decodeMessage[contracts.GetOrderStateRes](t, w).GetState().GetStatus())
	require.EqualValues(t, 1, e.rm.Gets.Load())
	require.Zero(t, e.rm.Watchers())
	e.requireNoSideEffects(t)
}

func TestWaitOnATerminalOrderAnswersAtOnce(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 3, orderState("o1", contracts.OrderStatus_Failed))
	start := time.Now()
	w := e.do("GET", waitPath("o1", "30000"), "")
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, WaitReached, w.Header().Get(HeaderWait))
	require.Equal(t, contracts.OrderStatus_Failed, decodeMessage[contracts.GetOrderStateRes](t, w).GetState().GetStatus())
	require.EqualValues(t, 1, e.rm.Gets.Load())
	e.requireNoSideEffects(t)
}

// doAsync sends a request in the background.
func (e *waitEnv) doAsync(path string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() { out <- serve(e.srv, "GET", path, "") }()
	return out
}

func receive(t *testing.T, out <-chan *httptest.ResponseRecorder, within time.Duration) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case w := <-out:
		return w
	case <-time.After(within):
		require.FailNow(t, "no answer within "+within.String())
		return nil
	}
}

// The wait answers when the projection turns terminal, having read once
// before waiting and once per wake: the intermediate non-terminal write
// wakes nobody.
func TestWaitAnswersWhenTheProjectionTurnsTerminal(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Created))
	out := e.doAsync(waitPath("o1", "20000"))
	require.Eventually(t, func() bool { return e.rm.Watchers() == 1 && e.rm.Gets.Load() == 1 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	e.rm.Seed("o1", 2, orderState("o1", contracts.OrderStatus_InventoryReserved))
	e.rm.Seed("o1", 3, orderState("o1", contracts.OrderStatus_Confirmed))
	w := receive(t, out, 10*time.Second)
	t.Logf("answered %s after the terminal write", time.Since(start))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, WaitReached, w.Header().Get(HeaderWait))
	require.Equal(t, contracts.OrderStatus_Confirmed, decodeMessage[contracts.GetOrderStateRes](t, w).GetState().GetStatus())
	require.EqualValues(t, 2, e.rm.Gets.Load(), "one read before the wait, one after the wake")
	e.requireNoSideEffects(t)
}

// At the timeout the wait answers the current state, 200, X-Wait:
// timeout, having read only at its start and at its end.
func TestWaitTimesOutWithTheCurrentState(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 2, orderState("o1", contracts.OrderStatus_InventoryReserved))
	start := time.Now()
	w := e.do("GET", waitPath("o1", "300"), "")
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 5*time.Second)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, WaitTimeout, w.Header().Get(HeaderWait))
	require.Equal(t, contracts.OrderStatus_InventoryReserved, decodeMessage[contracts.GetOrderStateRes](t, w).GetState().GetStatus())
	require.EqualValues(t, 2, e.rm.Gets.Load(), "a read at the start and one at the end, none in between")
	e.requireNoSideEffects(t)

	// timeoutMs=0 reads once more at once and does not wait.
	w = e.do("GET", waitPath("o1", "0"), "")
	require.Equal(t, WaitTimeout, w.Header().Get(HeaderWait))
}

// An unknown order is the plain GET's 404, at once: the wait does not
// wait for the order to appear.
func TestWaitForAnUnknownOrderIsThePlainGets404(t *testing.T) {
	e := newWaitEnv(t)
	plain := e.do("GET", "/orders/nobody", "")
	start := time.Now()
	w := e.do("GET", waitPath("nobody", "20000"), "")
	require.Less(t, time.Since(start), 5*time.Second, "no wait for an unknown order")
	require.Equal(t, http.StatusNotFound, plain.Code)
	require.Equal(t, plain.Code, w.Code)
	require.Equal(t, decodeError(t, plain), decodeError(t, w))
	require.Equal(t, CodeNotFound, decodeError(t, w).Code)
	require.Empty(t, w.Header().Get(HeaderWait))
	e.requireNoSideEffects(t)
}

// A record that disappears mid-wait (a projection being rebuilt) does
// not end the wait; the record that comes back terminal does.
func TestWaitOutlastsAMissingRecord(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Created))
	out := e.doAsync(waitPath("o1", "20000"))
	require.Eventually(t, func() bool { return e.rm.Gets.Load() == 1 }, 5*time.Second, time.Millisecond)
	e.rm.Remove("o1")
	e.rm.Seed("o1", 4, orderState("o1", contracts.OrderStatus_Failed))
	w := receive(t, out, 10*time.Second)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, WaitReached, w.Header().Get(HeaderWait))
}

// Many waits of one order are all answered by its one terminal write;
// another order's waits are not.
func TestWaitFansOutPerOrder(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("a", 1, orderState("a", contracts.OrderStatus_Created))
	e.rm.Seed("b", 1, orderState("b", contracts.OrderStatus_Created))
	var outs []<-chan *httptest.ResponseRecorder
	for range 20 {
		outs = append(outs, e.doAsync(waitPath("a", "20000")))
	}
	other := e.doAsync(waitPath("b", "20000"))
	require.Eventually(t, func() bool { return e.rm.Watchers() == 21 }, 5*time.Second, time.Millisecond)
	e.rm.Seed("a", 2, orderState("a", contracts.OrderStatus_Confirmed))
	for _, out := range outs {
		w := receive(t, out, 10*time.Second)
		require.Equal(t, WaitReached, w.Header().Get(HeaderWait))
	}
	require.Equal(t, 1, e.rm.Watchers(), "b's wait is still waiting")
	e.rm.Seed("b", 2, orderState("b", contracts.OrderStatus_Failed))
	require.Equal(t, WaitReached, receive(t, other, 10*time.Second).Header().Get(HeaderWait))
	e.requireNoSideEffects(t)
}

// A client that goes away ends its wait and its registration.
func TestWaitEndsWhenTheClientLeaves(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Created))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest("GET", waitPath("o1", "20000"), nil).WithContext(ctx)
		e.srv.ServeHTTP(httptest.NewRecorder(), r)
	}()
	require.Eventually(t, func() bool { return e.rm.Watchers() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the wait outlived its client")
	}
	e.requireNoSideEffects(t)
}

// serveOn serves srv's public API on a loopback listener.
func serveOn(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

func get(url string) (*http.Response, []byte, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res, body, err
}

// The server's ReadTimeout (RequestTimeout + 10 s), shorter than the
// longest wait, does not cut a wait short: net/http lifts the read
// deadline while a handler runs, so the request's context lives on.
func TestWaitOutlastsTheServersReadTimeout(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Created))
	e.srv.http.ReadTimeout = 200 * time.Millisecond
	base := serveOn(t, e.srv)
	start := time.Now()
	res, body, err := get(base + waitPath("o1", "1000"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "the wait ran its full time")
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.Equal(t, WaitTimeout, res.Header.Get(HeaderWait))
}

// Shutdown does not sit out the waits: each answers at once with the
// order's state.
func TestShutdownEndsTheWaits(t *testing.T) {
	e := newWaitEnv(t)
	e.rm.Seed("o1", 1, orderState("o1", contracts.OrderStatus_Created))
	base := serveOn(t, e.srv)
	type reply struct {
		res  *http.Response
		body []byte
		err  error
	}
	out := make(chan reply, 1)
	go func() {
		res, body, err := get(base + waitPath("o1", "30000"))
		out <- reply{res, body, err}
	}()
	require.Eventually(t, func() bool { return e.rm.Watchers() == 1 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.srv.Shutdown(ctx))
	require.Less(t, time.Since(start), 5*time.Second, "Shutdown waited for the wait's timeout")
	r := <-out
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.res.StatusCode, string(r.body))
	require.Equal(t, WaitTimeout, r.res.Header.Get(HeaderWait))
}
