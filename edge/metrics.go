package edge

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// The edge's metrics' full names. Both listeners (public and admin) count
// under the same names: their routes never overlap.
const (
	// MetricHTTPRequests counts answered requests by route template
	// (LabelRoute), method (LabelMethod) and status code (LabelCode).
	MetricHTTPRequests = telemetry.Namespace + "_http_requests_total"
	// MetricHTTPRequestDuration is the time from the request reaching the
	// edge's router to its handler returning, by route and method.
	MetricHTTPRequestDuration = telemetry.Namespace + "_http_request_duration_seconds"
	// MetricUnavailable counts 503 and 504 answers by their contract
	// reason (LabelReason): ReasonOwnerGone, ReasonStoreUnavailable, ...
	// /readyz's own 503s are among them.
	MetricUnavailable = telemetry.Namespace + "_unavailable_total"
	// MetricWaits counts the answered waits of GET ?waitFor=terminal by
	// outcome (LabelOutcome: WaitReached or WaitTimeout) and by whether
	// the process vouched for the order, so that the wait skipped its
	// first read (LabelVouched: "true" or "false"; see wait.go).
	MetricWaits = telemetry.Namespace + "_order_waits_total"
	// MetricShedSeconds is the server-side latency of the answers shed by
	// admission control (503 OVERLOADED, admission.go), by route kind
	// (LabelRouteKind): from the admission check to the reply written.
	MetricShedSeconds = telemetry.Namespace + "_http_shed_seconds"
	// MetricShed counts the answers shed by admission control, by route
	// kind.
	MetricShed = telemetry.Namespace + "_http_shed_total"
	// MetricInFlight is the requests admitted and not yet answered, by
	// route kind: how much of each in-flight budget is in use.
	MetricInFlight = telemetry.Namespace + "_http_in_flight"
	// MetricNoticeSubscriptions counts the subscriptions to an order's
	// terminal notices the API made: one per wait for an order it could
	// not vouch for (wait.go), whose notice then comes through Redis. A
	// rise beside a steady rate of waits after their own start says that
	// owners' notices over the cluster link stopped coming.
	MetricNoticeSubscriptions = telemetry.Namespace + "_order_notice_subscriptions_total"
	// MetricLinkNotices counts the notices owners sent the API over the
	// cluster link: an order's end, or its grain leaving before it.
	MetricLinkNotices = telemetry.Namespace + "_order_link_notices_total"
)

// noticeCounts is what a TerminalWatcher that subscribes per order and
// hears owners over the cluster link counts (readmodel.TerminalFeed).
type noticeCounts interface {
	OrderSubscriptions() int64
	Delivered() int64
}

// countNotices exposes w's counts, read at scrape time.
func countNotices(reg *telemetry.Registry, w noticeCounts) {
	f := reg.Factory()
	f.NewCounterFunc(prometheus.CounterOpts{Name: MetricNoticeSubscriptions,
		Help: "Subscriptions to an order's terminal notices: one per wait for an order the API could not vouch for."},
		func() float64 { return float64(w.OrderSubscriptions()) })
	f.NewCounterFunc(prometheus.CounterOpts{Name: MetricLinkNotices,
		Help: "Notices the owners sent this API over the cluster link: an order's end, or its grain leaving before it."},
		func() float64 { return float64(w.Delivered()) })
}

// The edge's metric labels.
const (
	// LabelRoute is the route template as registered (/orders/:orderId),
	// never the raw path, whose values are unbounded; RouteUnmatched for
	// a request no route matched, by path or by method.
	LabelRoute = "route"
	// LabelMethod is the request method, one of the standard ones or
	// MethodOther.
	LabelMethod = "method"
	// LabelCode is the reply's status code (201, 503, ...).
	LabelCode = "code"
	// LabelReason is a 503/504's contract reason.
	LabelReason = "reason"
	// LabelOutcome is an answered wait's X-Wait value.
	LabelOutcome = "outcome"
	// LabelVouched says whether a wait skipped its first read.
	LabelVouched = "vouched"
	// LabelRouteKind is an admission budget's route kind (RouteKindStart,
	// ...).
	LabelRouteKind = "route_kind"
)

const (
	// RouteUnmatched is LabelRoute's value for a request no route matched
	// (answered 404, or 405 for a known path with another method; 401 for
	// either on the admin listener without the token), whatever its path:
	// LabelCode tells them apart.
	RouteUnmatched = "unmatched"
	// MethodOther is LabelMethod's value for a non-standard method, which
	// a client may invent freely.
	MethodOther = "OTHER"
)

// httpBuckets span a read-model hit (a millisecond) up to the default
// request timeout (10 s) and a little past it.
var httpBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15}

// shedBuckets resolve the shed answers' latency around its 10 ms bound,
// from a tenth of a millisecond up.
var shedBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}

// reasons are every contract reason, so that each series shows from the
// first scrape on, at zero, and a rate or delta never starts from an
// absent series.
var reasons = []string{ReasonOwnerGone, ReasonStoreUnavailable, ReasonNoEligibleMember,
	ReasonRelocationRolledBack, ReasonDeadlineExceeded, ReasonCanceled, ReasonStarting,
	ReasonOverloaded, ReasonOwnerUnreachable, ReasonStoreFull, ReasonVersionUnsupported}

type httpMetrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	unavailable *prometheus.CounterVec
	// waits[outcome reached][vouched] are MetricWaits' four series.
	waits [2][2]prometheus.Counter
	// shed and shedSeconds are MetricShed's and MetricShedSeconds' series,
	// by route kind index.
	shed        [numKinds]prometheus.Counter
	shedSeconds [numKinds]prometheus.Observer
	// series caches each (route, method, code)'s children: observe runs on
	// every request, and a label lookup hashes the labels each time. The
	// keys are bounded as the labels are.
	series sync.Map // seriesKey → *httpSeries
}

type seriesKey struct {
	route, method string
	status        int
}

type httpSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newHTTPMetrics(reg *telemetry.Registry, ad *admission) *httpMetrics {
	f := reg.Factory()
	m := &httpMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: MetricHTTPRequests,
			Help: "HTTP requests answered by the edge, by route template (\"unmatched\" for none), method and status code."},
			[]string{LabelRoute, LabelMethod, LabelCode}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: MetricHTTPRequestDuration,
			Help: "Time the edge took to answer an HTTP request, by route template and method.", Buckets: httpBuckets},
			[]string{LabelRoute, LabelMethod}),
		unavailable: f.NewCounterVec(prometheus.CounterOpts{Name: MetricUnavailable,
			Help: "Answers 503 or 504 by contract reason (OWNER_GONE, STORE_UNAVAILABLE, NO_ELIGIBLE_MEMBER, ...), /readyz included."},
			[]string{LabelReason}),
	}
	for _, r := range reasons {
		m.unavailable.WithLabelValues(r)
	}
	waits := f.NewCounterVec(prometheus.CounterOpts{Name: MetricWaits,
		Help: "Answered waits (GET ?waitFor=terminal) by outcome (reached, timeout) and by whether the API vouched for the order and skipped the wait's first read."},
		[]string{LabelOutcome, LabelVouched})
	for r, outcome := range []string{WaitTimeout, WaitReached} {
		for v, vouched := range []string{"false", "true"} {
			m.waits[r][v] = waits.WithLabelValues(outcome, vouched)
		}
	}
	shed := f.NewCounterVec(prometheus.CounterOpts{Name: MetricShed,
		Help: "Requests answered 503 OVERLOADED by the edge's admission control, by route kind (start, command, read, wait)."},
		[]string{LabelRouteKind})
	shedSeconds := f.NewHistogramVec(prometheus.HistogramOpts{Name: MetricShedSeconds,
		Help: "Server-side latency of the answers shed by admission control, by route kind.", Buckets: shedBuckets},
		[]string{LabelRouteKind})
	for i, rk := range routeKinds {
		m.shed[i] = shed.WithLabelValues(string(rk))
		m.shedSeconds[i] = shedSeconds.WithLabelValues(string(rk))
		b := &ad.budgets[i]
		// Read at scrape time: the request path only moves the counter.
		f.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricInFlight,
			Help:        "Requests admitted and not yet answered, by route kind: the part of each in-flight budget in use.",
			ConstLabels: prometheus.Labels{LabelRouteKind: string(rk)}},
			func() float64 { return float64(b.n.Load()) })
	}
	return m
}

// shedAnswer records one shed answer of route kind index k.
func (m *httpMetrics) shedAnswer(k int, d time.Duration) {
	m.shed[k].Inc()
	m.shedSeconds[k].Observe(d.Seconds())
}

// waited records one answered wait.
func (m *httpMetrics) waited(reached, vouched bool) {
	m.waits[b2i(reached)][b2i(vouched)].Inc()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// observe records one answered request.
func (m *httpMetrics) observe(route, method string, status int, d time.Duration) {
	method = methodLabel(method)
	key := seriesKey{route: route, method: method, status: status}
	v, ok := m.series.Load(key)
	if !ok {
		v, _ = m.series.LoadOrStore(key, &httpSeries{
			requests: m.requests.WithLabelValues(route, method, strconv.Itoa(status)),
			duration: m.duration.WithLabelValues(route, method),
		})
	}
	s := v.(*httpSeries)
	s.requests.Inc()
	s.duration.Observe(d.Seconds())
}

// methodLabel bounds the method label: an unmatched request's method is
// whatever the client sent.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return MethodOther
}
