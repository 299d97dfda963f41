package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/edge"
)

// orderAPI is a canned public API: it records each request and answers
// from the route's queue of replies, the last one repeated.
type orderAPI struct {
	mu      sync.Mutex
	got     []string
	bodies  []string
	headers []http.Header
	replies map[string][]cannedReply
}

type cannedReply struct {
	status int
	header map[string]string
	body   string
}

func newOrderAPI(t *testing.T, replies map[string][]cannedReply) (*orderAPI, string) {
	a := &orderAPI{replies: replies}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *orderAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	route := r.Method + " " + r.URL.Path
	a.got = append(a.got, r.Method+" "+r.URL.RequestURI())
	a.bodies = append(a.bodies, string(b))
	a.headers = append(a.headers, r.Header.Clone())
	q := a.replies[route]
	if len(q) == 0 {
		a.mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"NOT_FOUND","message":"no route ` + route + `"}}`))
		return
	}
	rep := q[0]
	if len(q) > 1 {
		a.replies[route] = q[1:]
	}
	a.mu.Unlock()
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	_, _ = w.Write([]byte(rep.body))
}

func (a *orderAPI) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

func stateJSON(id, status string) string {
	return `{"orderId":"` + id + `","status":"` + status + `","updatedAtUnixMs":1000}`
}

func runOrder(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = order(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestOrderPlaceSendsAFreshKeyAndPrintsIt(t *testing.T) {
	a, api := newOrderAPI(t, map[string][]cannedReply{
		"POST /orders": {{status: http.StatusCreated, body: `{"orderId":"ord-1","state":` + stateJSON("ord-1", "Created") + `}`}},
	})
	code, out, errOut := runOrder("place", "-api", api, "-cart", "cart-1", "-address", "addr-1", "-method", "pm-1")
	require.Equal(t, exitOK, code, errOut)
	t.Log("\n" + out + errOut)

	require.Equal(t, []string{"POST /orders"}, a.requests())
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.bodies[0]), &body))
	require.Equal(t, map[string]any{"cartId": "cart-1", "shippingAddressId": "addr-1", "paymentMethodId": "pm-1"}, body)
	key := a.headers[0].Get("Idempotency-Key")
	_, err := uuid.Parse(key)
	require.NoError(t, err, "a fresh UUID as the key, got %q", key)
	require.Contains(t, errOut, "idempotency key "+key, "the key is printed for a retry")
	require.Contains(t, errOut, "placed: order ord-1 Created")

	var res struct {
		OrderID string                  `json:"orderId"`
		State   struct{ Status string } `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), "stdout is the reply as JSON")
	require.Equal(t, "ord-1", res.OrderID)
	require.Equal(t, "Created", res.State.Status)
	require.Contains(t, out, "\n  \"orderId\": \"ord-1\"", "pretty-printed")

	// A second place without -key is a new order: a new key.
	_, _, _ = runOrder("place", "-api", api, "-cart", "cart-1", "-address", "addr-1", "-method", "pm-1")
	require.NotEqual(t, key, a.headers[1].Get("Idempotency-Key"))
}

func TestOrderPlaceWithKeyAndWait(t *testing.T) {
	a, api := newOrderAPI(t, map[string][]cannedReply{
		"POST /orders":      {{status: http.StatusOK, body: `{"orderId":"ord-2","state":` + stateJSON("ord-2", "PaymentAuthorized") + `}`}},
		"GET /orders/ord-2": {{status: http.StatusOK, header: map[string]string{edge.HeaderWait: edge.WaitReached}, body: `{"state":` + stateJSON("ord-2", "Confirmed") + `}`}},
	})
	code, out, errOut := runOrder("place", "-api", api, "-cart", "c", "-address", "a", "-method", "m", "-key", "my-key", "-wait", "-timeout", "2m")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "my-key", a.headers[0].Get("Idempotency-Key"))
	require.Equal(t, []string{"POST /orders", "GET /orders/ord-2?waitFor=terminal&timeoutMs=30000"}, a.requests(),
		"one wait asks for at most edge.MaxWaitMs")
	require.Contains(t, errOut, "already placed with this key: order ord-2 PaymentAuthorized (idempotency key my-key)")
	require.Contains(t, errOut, "order ord-2 Confirmed")
	require.Contains(t, out, `"status": "Confirmed"`, "with -wait stdout is the outcome")
	require.NotContains(t, out, "PaymentAuthorized")
}

func TestOrderGet(t *testing.T) {
	a, api := newOrderAPI(t, map[string][]cannedReply{
		"GET /orders/ord-3": {{status: http.StatusOK, body: `{"state":{"orderId":"ord-3","status":"Failed","reason":"payment declined","updatedAtUnixMs":5}}`}},
	})
	// The ORDER_ID may stand before the flags too.
	code, out, errOut := runOrder("get", "ord-3", "-api", api)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, []string{"GET /orders/ord-3"}, a.requests(), "a plain GET: no wait parameters")
	require.Contains(t, out, `"reason": "payment declined"`)
	require.Contains(t, errOut, "order ord-3 Failed (payment declined)")

	code, out, errOut = runOrder("get", "-api", api, "ord-x")
	require.Equal(t, exitRefused, code)
	require.Contains(t, out, "NOT_FOUND", "the error body as sent")
	require.Contains(t, errOut, "404 Not Found: NOT_FOUND")
}

func TestOrderWaitLoopsUntilTerminal(t *testing.T) {
	waitTimeout := map[string]string{edge.HeaderWait: edge.WaitTimeout}
	a, api := newOrderAPI(t, map[string][]cannedReply{
		"GET /orders/ord-4": {
			{status: http.StatusOK, header: waitTimeout, body: `{"state":` + stateJSON("ord-4", "InventoryReserved") + `}`},
			{status: http.StatusOK, header: map[string]string{edge.HeaderWait: edge.WaitReached}, body: `{"state":` + stateJSON("ord-4", "Confirmed") + `}`},
		},
	})
	code, out, errOut := runOrder("wait", "-api", api, "ord-4", "-timeout", "10s")
	require.Equal(t, exitOK, code, errOut)
	got := a.requests()
	require.Len(t, got, 2, "a non-terminal answer is asked again")
	require.Equal(t, "GET /orders/ord-4?waitFor=terminal&timeoutMs=10000", got[0])
	require.Regexp(t, `^GET /orders/ord-4\?waitFor=terminal&timeoutMs=\d+$`, got[1])
	require.NotContains(t, got[1], "timeoutMs=10000", "the second wait asks for what is left")
	require.Contains(t, out, `"status": "Confirmed"`)
	require.NotContains(t, out, "InventoryReserved", "only the last state is printed")
	require.Contains(t, errOut, "order ord-4 Confirmed")

	// Never terminal within -timeout: the last state, and exit 3.
	_, api = newOrderAPI(t, map[string][]cannedReply{
		"GET /orders/ord-5": {{status: http.StatusOK, header: waitTimeout, body: `{"state":` + stateJSON("ord-5", "Created") + `}`}},
	})
	code, out, errOut = runOrder("wait", "-api", api, "-timeout", "300ms", "ord-5")
	require.Equal(t, exitUnavailable, code)
	require.Contains(t, out, `"status": "Created"`)
	require.Contains(t, errOut, "order ord-5 Created, not Confirmed or Failed after 300ms")
}

func TestOrderContinue(t *testing.T) {
	a, api := newOrderAPI(t, map[string][]cannedReply{
		"POST /orders/ord-6/continue": {{status: http.StatusOK, body: `{"state":` + stateJSON("ord-6", "PaymentAuthorized") + `}`}},
	})
	code, out, errOut := runOrder("continue", "-api", api, "ord-6")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, []string{"POST /orders/ord-6/continue"}, a.requests())
	require.JSONEq(t, `{}`, a.bodies[0])
	require.Contains(t, out, `"status": "PaymentAuthorized"`)
	require.Contains(t, errOut, "order ord-6 PaymentAuthorized")

	code, _, errOut = runOrder("continue", "-api", api, "-command-id", "cmd-1", "ord-6")
	require.Equal(t, exitOK, code, errOut)
	require.JSONEq(t, `{"sourceCommandId":"cmd-1"}`, a.bodies[1])
}

// TestOrderRefusedIsExit1 covers both error shapes: the nested one and
// the RFC 9457 problem.
func TestOrderRefusedIsExit1(t *testing.T) {
	nested := `{"error":{"code":"KEY_REUSED","message":"the key was used for another request"}}`
	problem := `{"type":"about:blank","title":"Unprocessable Content","status":422,"detail":"the key was used for another request","code":"KEY_REUSED"}`
	for name, body := range map[string]string{"nested": nested, "problem": problem} {
		t.Run(name, func(t *testing.T) {
			_, api := newOrderAPI(t, map[string][]cannedReply{"POST /orders": {{status: http.StatusUnprocessableEntity, body: body}}})
			code, out, errOut := runOrder("place", "-api", api, "-cart", "c", "-address", "a", "-method", "m", "-key", "k1")
			require.Equal(t, exitRefused, code)
			require.Equal(t, body, strings.TrimSpace(out), "the error body as sent")
			require.Contains(t, errOut, "422 Unprocessable Entity: KEY_REUSED: the key was used for another request")
			require.NotContains(t, errOut, "retry", "a refusal is not retried with the same key")
		})
	}
}

func TestOrderUnavailableIsExit3(t *testing.T) {
	nested := `{"error":{"code":"UNAVAILABLE","message":"too many requests in flight","reason":"OVERLOADED"}}`
	problem := `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"too many requests in flight","code":"UNAVAILABLE","reason":"OVERLOADED"}`
	for name, body := range map[string]string{"nested": nested, "problem": problem} {
		t.Run(name, func(t *testing.T) {
			_, api := newOrderAPI(t, map[string][]cannedReply{
				"POST /orders":     {{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "2"}, body: body}},
				"GET /orders/ord7": {{status: http.StatusGatewayTimeout, body: strings.ReplaceAll(body, "OVERLOADED", "GRAIN_TIMEOUT")}},
			})
			code, out, errOut := runOrder("place", "-api", api, "-cart", "c", "-address", "a", "-method", "m", "-key", "k2")
			require.Equal(t, exitUnavailable, code)
			require.Equal(t, body, strings.TrimSpace(out))
			require.Contains(t, errOut, "503 Service Unavailable: UNAVAILABLE (reason OVERLOADED)")
			require.Contains(t, errOut, "retry after 2s; retry with -key k2")

			code, _, errOut = runOrder("get", "-api", api, "ord7")
			require.Equal(t, exitUnavailable, code)
			require.Contains(t, errOut, "504 Gateway Timeout: UNAVAILABLE (reason GRAIN_TIMEOUT)")
		})
	}

	// No answer at all is unavailable too.
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	code, _, errOut := runOrder("get", "-api", srv.URL, "ord-8")
	require.Equal(t, exitUnavailable, code)
	require.Contains(t, errOut, "no answer from "+srv.URL)
}

func TestOrderUsageIsExit2(t *testing.T) {
	a, api := newOrderAPI(t, nil)
	for _, args := range [][]string{
		nil,
		{"cancel"},
		{"place", "-api", api},
		{"place", "-api", api, "-cart", "c", "-address", "a"},
		{"place", "-api", api, "-cart", "c", "-address", "a", "-method", "m", "extra"},
		{"place", "-api", api, "-cart", "c", "-address", "a", "-method", "m", "-wait", "-timeout", "0s"},
		{"place", "-no-such-flag"},
		{"get", "-api", api},
		{"get", "-api", api, "ord-1", "ord-2"},
		{"wait", "-api", api, "ord-1", "-timeout", "-1s"},
		{"continue", "-api", api},
	} {
		code, _, errOut := runOrder(args...)
		require.Equal(t, exitUsage, code, "%q: %s", args, errOut)
		require.NotEmpty(t, errOut, "%q says why", args)
	}
	require.Empty(t, a.requests(), "a usage error sends nothing")
	_, _, errOut := runOrder("place", "-api", api, "-cart", "c")
	require.Contains(t, errOut, "-address, -method required")
	_, _, errOut = runOrder()
	require.Contains(t, errOut, "usage: commerce-api order place|get|wait|continue")
}

func TestOrderAPIDefaultsToTheEnvironment(t *testing.T) {
	a, api := newOrderAPI(t, map[string][]cannedReply{
		"GET /orders/ord-9": {{status: http.StatusOK, body: `{"state":` + stateJSON("ord-9", "Created") + `}`}},
	})
	t.Setenv(envPublicAPI, api)
	code, _, errOut := runOrder("get", "ord-9")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, []string{"GET /orders/ord-9"}, a.requests())
}

func TestErrorSummaryReadsBothShapes(t *testing.T) {
	require.Equal(t, errorSummary{Code: "INVALID_ARGUMENT", Field: "cartId", Message: "is required"},
		errorSummaryOf([]byte(`{"type":"about:blank","title":"Bad Request","status":400,"detail":"is required","code":"INVALID_ARGUMENT","field":"cartId"}`)))
	require.Equal(t, errorSummary{Code: "NOT_FOUND", Message: "Not Found"},
		errorSummaryOf([]byte(`{"title":"Not Found","status":404,"code":"NOT_FOUND"}`)), "title when there is no detail")
	require.Equal(t, errorSummary{Code: "UNAVAILABLE", Reason: "OWNER_GONE", Message: "owner gone"},
		errorSummaryOf([]byte(`{"error":{"code":"UNAVAILABLE","message":"owner gone","reason":"OWNER_GONE"}}`)))
	require.Equal(t, errorSummary{}, errorSummaryOf([]byte(`<html>bad gateway</html>`)))
	require.Equal(t, errorSummary{}, errorSummaryOf(nil))
}
