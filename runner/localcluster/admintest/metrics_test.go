package admintest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// scrape reads a node's /metrics, at the address the state records, as a
// Prometheus server would.
func (e *env) scrape(node string) map[string]*dto.MetricFamily {
	e.t.Helper()
	n, ok := e.c.State().Node(node)
	require.True(e.t, ok)
	require.True(e.t, strings.HasPrefix(n.MetricsURL, "http://127.0.0.1:"), "metrics on loopback: %q", n.MetricsURL)
	res, err := e.hc.Get(n.MetricsURL + "/metrics")
	require.NoError(e.t, err)
	defer res.Body.Close()
	require.Equal(e.t, http.StatusOK, res.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	require.NoError(e.t, err)
	return mfs
}

// redisRoundTrips is a scrape's shoppingmall_redis_round_trips_total of
// one store.
func redisRoundTrips(mfs map[string]*dto.MetricFamily, store string) float64 {
	for _, m := range mfs["shoppingmall_redis_round_trips_total"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "store" && lp.GetValue() == store {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Every process serves /metrics on its own loopback listener, and the
// Redis figures there move by exactly what a request costs: a GET of an
// order is one read-model round trip, a StartOrder on a warm API one cart
// read and one idempotency reservation. A workflow's profiles, on its
// ops listener, need the cluster's token.
func TestMetricsPerProcessAndWorkflowProfilesLocked(t *testing.T) {
	e := start(t)
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		mfs := e.scrape(n)
		for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines"} {
			require.Contains(t, mfs, name, "%s serves the process and Go collectors", n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func(key string) string {
		res, rep, err := e.public[localcluster.APIB].StartOrder(ctx, &contracts.StartOrderReq{
			CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: key})
		require.NoError(t, err)
		require.True(t, rep.OK(), "%s", rep)
		e.waitStatus(res.GetOrderId(), contracts.OrderStatus_Confirmed)
		return res.GetOrderId()
	}
	// The first order loads the scripts (EVALSHA, then EVAL once).
	start("admintest-metrics-warm")

	wfEvents := func() float64 {
		total := 0.0
		for _, wf := range localcluster.WorkflowNodes {
			total += redisRoundTrips(e.scrape(wf), "events")
		}
		return total
	}
	commerceBefore, eventsBefore := redisRoundTrips(e.scrape(localcluster.APIB), "commerce"), wfEvents()
	id := start("admintest-metrics")
	commerce := redisRoundTrips(e.scrape(localcluster.APIB), "commerce") - commerceBefore
	events := wfEvents() - eventsBefore
	require.Equal(t, 1.0, commerce, "api-b: the cart read with the idempotency reservation, one script on one Redis server")
	require.Positive(t, events, "the workflows recorded the order's events")

	before := redisRoundTrips(e.scrape(localcluster.APIA), "readmodel")
	for range 3 {
		st, rep, err := e.public[localcluster.APIA].GetOrder(ctx, id)
		require.NoError(t, err)
		require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus(), "%s", rep)
	}
	require.Equal(t, 3.0, redisRoundTrips(e.scrape(localcluster.APIA), "readmodel")-before, "api-a: one read-model round trip per GET")
	t.Logf("one warm order: api-b commerce round trips %.0f, workflows' events round trips %.0f; 3 GETs: api-a read model 3", commerce, events)

	st := e.c.State()
	for _, wf := range localcluster.WorkflowNodes {
		n, ok := st.Node(wf)
		require.True(t, ok)
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			got := e.call("GET", n.OpsURL+p, "", "")
			require.Equal(t, http.StatusUnauthorized, got.status, "%s %s without a token", wf, p)
			got = e.call("GET", n.OpsURL+p, "Bearer wrong-"+e.token, "")
			require.Equal(t, http.StatusUnauthorized, got.status, "%s %s with a wrong token", wf, p)
			got = e.call("GET", n.OpsURL+p, e.bearer(), "")
			require.Equal(t, http.StatusOK, got.status, "%s %s with the token", wf, p)
		}
		got := e.call("GET", n.OpsURL+"/healthz", "", "")
		require.Equal(t, http.StatusOK, got.status, "probes need no token")
		got = e.call("GET", n.MetricsURL+"/debug/pprof/", e.bearer(), "")
		require.Equal(t, http.StatusNotFound, got.status, "no profiles on the metrics listener")
	}
}
