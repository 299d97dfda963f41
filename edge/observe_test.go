package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// observed is an env whose server counts into its own registry and logs
// JSON lines, so that tests read exact metric deltas and log fields.
type observed struct {
	*env
	reg  *telemetry.Registry
	json *workflowtest.Evidence
}

func newObserved(t *testing.T, opts ...envOpt) *observed {
	t.Helper()
	o := &observed{reg: telemetry.NewRegistry(), json: &workflowtest.Evidence{}}
	o.env = newEnv(t, append(opts, o.options())...)
	o.logOnFailure(t)
	return o
}

func (o *observed) logOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("server log:\n" + o.json.String())
		}
	})
}

// options points the server's metrics and logs at o.
func (o *observed) options() envOpt {
	return func(c *Config) {
		c.Metrics = o.reg
		c.Logger = slog.New(slog.NewJSONHandler(o.json, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// sum is the current value of a metric over the series matching labels
// (a histogram's sample count).
func (o *observed) sum(name string, labels map[string]string) float64 {
	o.t.Helper()
	v, err := telemetry.Sum(o.reg.Gatherer(), name, labels)
	require.NoError(o.t, err)
	return v
}

// request serves one request on h with the given headers.
func request(h http.Handler, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// logLines are the server's JSON log records with the message msg.
func (o *observed) logLines(msg string) []map[string]any {
	o.t.Helper()
	var out []map[string]any
	for _, l := range o.json.Lines() {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var m map[string]any
		require.NoError(o.t, json.Unmarshal([]byte(l), &m), l)
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// accessLine is the one access log line with requestId id.
func (o *observed) accessLine(id string) map[string]any {
	o.t.Helper()
	var found []map[string]any
	for _, l := range o.logLines(LogMsgAccess) {
		if l[LogKeyRequestID] == id {
			found = append(found, l)
		}
	}
	require.Len(o.t, found, 1, "one access line for request %s", id)
	return found[0]
}

func requests(route, method, code string) map[string]string {
	return map[string]string{LabelRoute: route, LabelMethod: method, LabelCode: code}
}

func durations(route, method string) map[string]string {
	return map[string]string{LabelRoute: route, LabelMethod: method}
}

// One request moves its own series by exactly one, under the route
// template, and nothing else.
func TestHTTPMetricsCountEachRequestOnceUnderItsRouteTemplate(t *testing.T) {
	o := newObserved(t, withAdmin())
	o.rm.put(created("ord-x"))
	steps := []struct {
		h                   http.Handler
		method, path, body  string
		auth                bool
		route, metric, code string
	}{
		{o.srv, "POST", "/orders", startBody(cartOK, "a", "p", "k"), false, "/orders", "POST", "201"},
		{o.srv, "POST", "/orders", startBody(cartOK, "a", "p", "k"), false, "/orders", "POST", "200"},
		{o.srv, "GET", "/orders/ord-x", "", false, "/orders/:orderId", "GET", "200"},
		{o.srv, "GET", "/orders/ord-y", "", false, "/orders/:orderId", "GET", "404"},
		{o.srv, "POST", "/nope/ord-x", "{}", false, RouteUnmatched, "POST", "404"},
		{o.srv, "BREW", "/coffee", "", false, RouteUnmatched, MethodOther, "404"},
		// A wrong method has no template either: the raw path would be
		// unbounded, and the code tells it from an unknown path.
		{o.srv, "BREW", "/orders", "", false, RouteUnmatched, MethodOther, "405"},
		{o.srv, "GET", "/orders", "", false, RouteUnmatched, "GET", "405"},
		{o.srv, "DELETE", "/orders/ord-x", "", false, RouteUnmatched, "DELETE", "405"},
		{o.srv.AdminHandler(), "POST", "/admin/orders/ord-x/close", "", true, "/admin/orders/:orderId/close", "POST", "200"},
		{o.srv.AdminHandler(), "POST", "/admin/orders/ord-x/close", "", false, "/admin/orders/:orderId/close", "POST", "401"},
		{o.srv.AdminHandler(), "GET", "/admin/orders/ord-x/close", "", true, RouteUnmatched, "GET", "405"},
		{o.srv.AdminHandler(), "GET", "/admin/orders/ord-x/close", "", false, RouteUnmatched, "GET", "401"},
		{o.srv.AdminHandler(), "GET", "/admin/nope/ord-x", "", true, RouteUnmatched, "GET", "404"},
	}
	for i, st := range steps {
		before := o.sum(MetricHTTPRequests, nil)
		beforeSeries := o.sum(MetricHTTPRequests, requests(st.route, st.metric, st.code))
		beforeHist := o.sum(MetricHTTPRequestDuration, durations(st.route, st.metric))
		hdr := map[string]string{}
		if st.auth {
			hdr["Authorization"] = "Bearer " + testAdminToken
		}
		w := request(st.h, st.method, st.path, st.body, hdr)
		require.Equal(t, st.code, fmt.Sprint(w.Code), "step %d %s %s: %s", i, st.method, st.path, w.Body.String())
		require.Equal(t, 1.0, o.sum(MetricHTTPRequests, requests(st.route, st.metric, st.code))-beforeSeries,
			"step %d: %s{route=%q,method=%q,code=%q} +1", i, MetricHTTPRequests, st.route, st.metric, st.code)
		require.Equal(t, 1.0, o.sum(MetricHTTPRequests, nil)-before, "step %d: no other series moved", i)
		require.Equal(t, 1.0, o.sum(MetricHTTPRequestDuration, durations(st.route, st.metric))-beforeHist,
			"step %d: one duration observed", i)
	}
	require.Equal(t, float64(len(steps)), o.sum(MetricHTTPRequestDuration, nil), "one observation per request")

	// No raw path ever became a label value.
	mfs, err := o.reg.Gatherer().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != MetricHTTPRequests && mf.GetName() != MetricHTTPRequestDuration {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				require.NotContains(t, lp.GetValue(), "ord-", "%s label %s", mf.GetName(), lp.GetName())
				require.NotContains(t, lp.GetValue(), "nope")
				require.NotEqual(t, "BREW", lp.GetValue())
			}
		}
	}
}

// An Unavailable answer counts its reason once; answers without a reason
// count none.
func TestUnavailableAnswerCountsItsReasonOnce(t *testing.T) {
	o := newObserved(t)
	reason := func(r string) float64 { return o.sum(MetricUnavailable, map[string]string{LabelReason: r}) }
	for _, r := range reasons {
		require.Zero(t, reason(r), "%s shows at zero from the start", r)
	}
	mfs, err := o.reg.Gatherer().Gather()
	require.NoError(t, err)
	series := 0
	for _, mf := range mfs {
		if mf.GetName() == MetricUnavailable {
			series = len(mf.GetMetric())
		}
	}
	require.Equal(t, len(reasons), series, "every reason's series exists before its first answer")

	o.orders.err = fmt.Errorf("%w: owner has left", placement.ErrUnavailable)
	w := o.do("POST", "/orders/ord-1/continue", "{}")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, ReasonOwnerGone, decodeError(t, w).Reason)
	require.Equal(t, 1.0, reason(ReasonOwnerGone))
	require.Equal(t, 1.0, o.sum(MetricUnavailable, nil), "no other reason counted")

	o.orders.err = fmt.Errorf("%w: no member", placement.ErrNoMember)
	w = o.do("POST", "/orders", startBody(cartOK, "a", "p", "k"))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, 1.0, reason(ReasonNoEligibleMember))
	require.Equal(t, 2.0, o.sum(MetricUnavailable, nil))

	// /readyz's own 503 (no workflow member; the listener is not up yet,
	// so STARTING comes first) counts too, through the same place.
	w = o.do("GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, 1.0, reason(ReasonStarting))
	require.Equal(t, 3.0, o.sum(MetricUnavailable, nil))

	// Other errors carry no reason and count nothing.
	o.orders.err = nil
	require.Equal(t, http.StatusNotFound, o.do("GET", "/orders/ord-none", "").Code)
	require.Equal(t, http.StatusBadRequest, o.do("POST", "/orders", "{}").Code)
	require.Equal(t, 3.0, o.sum(MetricUnavailable, nil))
}

func TestClientRequestIDIsKeptEchoedAndLogged(t *testing.T) {
	o := newObserved(t)
	o.orders.err = fmt.Errorf("%w: owner has left", placement.ErrUnavailable)
	const id = "client-req_42.a~B"
	w := request(o.srv, "POST", "/orders/ord-1/continue", "{}", map[string]string{HeaderRequestID: id})
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, id, w.Header().Get(HeaderRequestID))

	// A line logged while serving the request carries its id.
	failed := o.logLines("request failed")
	require.Len(t, failed, 1)
	require.Equal(t, id, failed[0][LogKeyRequestID])
	require.Equal(t, id, o.accessLine(id)[LogKeyRequestID])

	// An id of exactly the bound is kept.
	long := strings.Repeat("a", MaxRequestIDLen)
	w = request(o.srv, "GET", "/healthz", "", map[string]string{HeaderRequestID: long})
	require.Equal(t, long, w.Header().Get(HeaderRequestID))
}

func TestBadRequestIDIsReplaced(t *testing.T) {
	o := newObserved(t)
	for _, bad := range []string{
		strings.Repeat("a", MaxRequestIDLen+1),
		"two words",
		"quote\"d",
		"semi;colon",
		"nön-ascii",
		"ctl\x01char",
		"new\nline",
	} {
		w := request(o.srv, "GET", "/healthz", "", map[string]string{HeaderRequestID: bad})
		require.Equal(t, http.StatusOK, w.Code)
		got := w.Header().Get(HeaderRequestID)
		require.NotEqual(t, bad, got, "%q is replaced", bad)
		_, err := uuid.Parse(got)
		require.NoError(t, err, "the replacement %q is a generated id", got)
		o.accessLine(got)
	}
	require.NotContains(t, o.json.String(), "two words", "a refused id is never logged")
}

func TestMissingRequestIDIsGeneratedOnBothListeners(t *testing.T) {
	o := newObserved(t, withAdmin())
	seen := map[string]bool{}
	for _, h := range []http.Handler{o.srv, o.srv, o.srv.AdminHandler()} {
		w := request(h, "GET", "/healthz", "", nil)
		id := w.Header().Get(HeaderRequestID)
		_, err := uuid.Parse(id)
		require.NoError(t, err, "generated id %q", id)
		require.False(t, seen[id], "ids are fresh")
		seen[id] = true
		o.accessLine(id)
	}
	// Unauthenticated admin calls get one too.
	w := request(o.srv.AdminHandler(), "POST", "/admin/orders/o/close", "", map[string]string{HeaderRequestID: "adm-1"})
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, "adm-1", w.Header().Get(HeaderRequestID))
	ids := []any{}
	for _, l := range o.logLines("admin request refused: missing or wrong bearer token") {
		ids = append(ids, l[LogKeyRequestID])
	}
	require.Contains(t, ids, "adm-1", "the refusal's log line carries the id")
	require.Equal(t, 401.0, o.accessLine("adm-1")["status"])
}

func TestAccessLogLineNamesMethodRouteStatusOrderAndRequestID(t *testing.T) {
	o := newObserved(t)
	o.rm.put(created("ord-x"))

	w := request(o.srv, "POST", "/orders", startBody(cartOK, "a", "p", "k"), map[string]string{HeaderRequestID: "r-start"})
	require.Equal(t, http.StatusCreated, w.Code)
	l := o.accessLine("r-start")
	require.Equal(t, "INFO", l["level"])
	require.Equal(t, "POST", l["method"])
	require.Equal(t, "/orders", l["route"])
	require.Equal(t, 201.0, l["status"])
	require.Equal(t, order.OrderIDFor([]byte(testOrderIDSecret), "k"), l["orderId"], "the reply names the order")
	require.Contains(t, l, "duration")

	request(o.srv, "GET", "/orders/ord-x", "", map[string]string{HeaderRequestID: "r-get"})
	l = o.accessLine("r-get")
	require.Equal(t, "GET", l["method"])
	require.Equal(t, "/orders/:orderId", l["route"])
	require.Equal(t, 200.0, l["status"])
	require.Equal(t, "ord-x", l["orderId"], "the route names the order")

	request(o.srv, "GET", "/healthz", "", map[string]string{HeaderRequestID: "r-health"})
	l = o.accessLine("r-health")
	require.Equal(t, "/healthz", l["route"])
	require.NotContains(t, l, "orderId", "no order, no key")

	request(o.srv, "POST", "/orders", `{"cartId":`, map[string]string{HeaderRequestID: "r-bad"})
	l = o.accessLine("r-bad")
	require.Equal(t, 400.0, l["status"])
	require.NotContains(t, l, "orderId", "a refused start names no order")

	request(o.srv, "GET", "/nope", "", map[string]string{HeaderRequestID: "r-none"})
	l = o.accessLine("r-none")
	require.Equal(t, RouteUnmatched, l["route"])
	require.Equal(t, 404.0, l["status"])

	// The text format (the process's default) shows the same fields.
	var text workflowtest.Evidence
	e := newEnv(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&text, nil)) })
	request(e.srv, "GET", "/orders/ord-q", "", map[string]string{HeaderRequestID: "r-text"})
	line := ""
	for _, s := range text.Lines() {
		if strings.Contains(s, `msg="http request"`) {
			line = s
		}
	}
	for _, want := range []string{"method=GET", "route=/orders/:orderId", "status=404", "duration=", "orderId=ord-q", "requestId=r-text"} {
		require.Contains(t, line, want)
	}
}

// A panic is answered 500, counted and logged with the request's id.
func TestPanicIsCountedAndLoggedWithTheRequestID(t *testing.T) {
	o := newObserved(t)
	o.orders.check = func(*contracts.StartOrderWorkflowReq) { panic("boom") }
	w := request(o.srv, "POST", "/orders", startBody(cartOK, "a", "p", "k"), map[string]string{HeaderRequestID: "r-panic"})
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.Equal(t, CodeInternal, decodeError(t, w).Code)
	require.Equal(t, "r-panic", w.Header().Get(HeaderRequestID))
	require.Equal(t, 1.0, o.sum(MetricHTTPRequests, requests("/orders", "POST", "500")))
	require.Equal(t, 1.0, o.sum(MetricHTTPRequests, nil))
	l := o.accessLine("r-panic")
	require.Equal(t, 500.0, l["status"])
	require.Equal(t, order.OrderIDFor([]byte(testOrderIDSecret), "k"), l["orderId"])
	panicked := o.logLines("handler panicked")
	require.Len(t, panicked, 1)
	require.Equal(t, "r-panic", panicked[0][LogKeyRequestID])
}

// The stuck resume's takeover, dispatched through the admin router, keeps
// its caller's request id: one operator call, one id in every line. Each
// dispatch is a request of its own in the metrics and the access log.
func TestDispatchedAdminRequestKeepsTheCallersID(t *testing.T) {
	o := &observed{reg: telemetry.NewRegistry(), json: &workflowtest.Evidence{}}
	o.env, _ = stuckEnv(t, o.options(), func(c *Config) { c.Takeover = &fakeTakeover{} })
	o.logOnFailure(t)
	w := request(o.srv.AdminHandler(), "POST", "/admin/orders/stuck/resume?takeover=true", "",
		map[string]string{"Authorization": "Bearer " + testAdminToken, HeaderRequestID: "resume-1"})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "resume-1", w.Header().Get(HeaderRequestID))
	routes := map[string][]string{}
	for _, l := range o.logLines(LogMsgAccess) {
		require.Equal(t, "resume-1", l[LogKeyRequestID], "every access line of the call: %v", l)
		id, _ := l["orderId"].(string)
		routes[l["route"].(string)] = append(routes[l["route"].(string)], id)
	}
	require.Len(t, routes["/admin/orders/stuck/resume"], 1)
	require.ElementsMatch(t, []string{"ord-left", "ord-recorded"}, routes[takeoverRoute])
	require.Len(t, routes, 2)
	require.Equal(t, 2.0, o.sum(MetricHTTPRequests, requests(takeoverRoute, "POST", "200")))
	for _, l := range o.logLines("takeover") {
		require.Equal(t, "resume-1", l[LogKeyRequestID])
	}
}

func TestLogHandlerAddsTheIDOnceAndOnlyInARequest(t *testing.T) {
	var buf workflowtest.Evidence
	log := slog.New(LogHandler(LogHandler(slog.NewJSONHandler(&buf, nil)))).With("k", "v")
	ctx := context.WithValue(context.Background(), requestInfoKey{}, &requestInfo{id: "rid-1"})
	require.Equal(t, "rid-1", RequestID(ctx))
	require.Empty(t, RequestID(context.Background()))
	log.InfoContext(ctx, "in a request")
	log.InfoContext(context.Background(), "outside")
	lines := buf.Lines()
	require.Len(t, lines, 2)
	require.Equal(t, 1, strings.Count(lines[0], `"requestId":"rid-1"`), lines[0])
	require.Contains(t, lines[0], `"k":"v"`)
	require.NotContains(t, lines[1], "requestId")
}
