package clustertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/takeover"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// These tests read the order workflow's metrics the way a scraper does:
// the text the registry's /metrics handler serves, parsed. Each workflow
// member has a registry of its own, as each process has.

func withMetrics(reg *telemetry.Registry) wfOpt {
	return func(c *node.WorkflowConfig) { c.Metrics = reg }
}

// orderMetrics are the families the order workflow side adds; a reading
// holds every series of them (a histogram by its _count).
var orderMetrics = []string{
	workflow.MetricOrdersStarted, workflow.MetricOrdersTerminal, workflow.MetricStepDuration,
	grain.MetricStepRetries, grain.MetricStepPermanentFailures, grain.MetricGrainRestarts,
	placement.MetricActivations, placement.MetricActivationsAborted, placement.MetricGrainsHosted,
}

// reading is one scrape: series (name{label="value",...}) → value.
type reading map[string]float64

// scraper serves reg over HTTP and reads it as a scraper does.
type scraper struct {
	t   *testing.T
	url string
}

func newScraper(t *testing.T, reg *telemetry.Registry) *scraper {
	srv := httptest.NewServer(reg.Handler())
	t.Cleanup(srv.Close)
	return &scraper{t: t, url: srv.URL + telemetry.MetricsPath}
}

func (s *scraper) scrape() reading {
	s.t.Helper()
	resp, err := http.Get(s.url)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(s.t, err)
	out := reading{}
	for _, name := range orderMetrics {
		mf, ok := families[name]
		require.True(s.t, ok, "/metrics serves %s", name)
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[series(name, m)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[series(name, m)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[series(name+"_count", m)] = float64(m.GetHistogram().GetSampleCount())
			default:
				s.t.Fatalf("%s has unexpected type %s", name, mf.GetType())
			}
		}
	}
	return out
}

func series(name string, m *dto.Metric) string {
	var labels []string
	for _, l := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	if len(labels) == 0 {
		return name
	}
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

// Series names as the exposition spells them.
var (
	started        = workflow.MetricOrdersStarted
	confirmed      = workflow.MetricOrdersTerminal + `{outcome="confirmed"}`
	failed         = workflow.MetricOrdersTerminal + `{outcome="failed"}`
	coldStarts     = placement.MetricActivations + `{cause="cold"}`
	relocations    = placement.MetricActivations + `{cause="relocation"}`
	takeovers      = placement.MetricActivations + `{cause="takeover"}`
	abortedColds   = placement.MetricActivationsAborted + `{cause="cold"}`
	hosted         = placement.MetricGrainsHosted
	reserveSteps   = stepCount("reserve_inventory")
	authorizeSteps = stepCount("authorize_payment")
	releaseSteps   = stepCount("release_inventory")
	confirmSteps   = stepCount("confirm")
	failSteps      = stepCount("fail")
)

func stepCount(step string) string {
	return workflow.MetricStepDuration + `_count{step="` + step + `"}`
}

// requireDelta asserts that after - before is exactly want on the series
// want names and 0 on every other series of the order metrics.
func requireDelta(t *testing.T, before, after reading, want reading, msg string) {
	t.Helper()
	got, expect := reading{}, reading{}
	for k := range after {
		got[k] = after[k] - before[k]
		expect[k] = 0
	}
	for k, v := range want {
		require.Contains(t, after, k, "%s: series %s", msg, k)
		expect[k] = v
	}
	require.Equal(t, expect, got, msg)
}

// waitFor scrapes until series reads want, then returns that reading.
func (s *scraper) waitFor(series string, want float64) reading {
	s.t.Helper()
	var last reading
	require.Eventually(s.t, func() bool {
		last = s.scrape()
		return last[series] == want
	}, 10*time.Second, 10*time.Millisecond, "%s to reach %v", series, want)
	return last
}

// One confirmed order, one failed one and one activation that could not
// open, each moves the workflow member's metrics by exactly its own
// deltas.
func TestMetricsOfOrdersAsScraped(t *testing.T) {
	h := newHarness(t)
	reg := telemetry.NewRegistry()
	h.startWorkflow("workflow-a", withMetrics(reg))
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	m := newScraper(t, reg)
	zero := m.scrape()
	require.Equal(t, 0.0, zero[hosted])
	for k, v := range zero {
		require.Zero(t, v, "%s before any order", k)
	}

	before := zero
	ok := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), ok)
	require.NoError(t, err)
	h.waitStatus(t, ok.OrderId, contracts.OrderStatus_Confirmed)
	after := m.waitFor(confirmed, 1)
	requireDelta(t, before, after, reading{
		started: 1, confirmed: 1, coldStarts: 1, hosted: 1,
		reserveSteps: 1, authorizeSteps: 1, confirmSteps: 1,
	}, "a confirmed order")
	// A repeated start of the same order changes nothing.
	_, recorded, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), ok)
	require.NoError(t, err)
	require.False(t, recorded)
	requireDelta(t, after, m.scrape(), nil, "a repeated start")

	before = m.scrape()
	declined := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodDeclined)
	_, _, err = a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), declined)
	require.NoError(t, err)
	h.waitStatus(t, declined.OrderId, contracts.OrderStatus_Failed)
	requireDelta(t, before, m.waitFor(failed, 1), reading{
		started: 1, failed: 1, coldStarts: 1, hosted: 1,
		reserveSteps: 1, authorizeSteps: 1, releaseSteps: 1, failSteps: 1,
	}, "an order whose payment was declined")

	// A stream the grain cannot replay aborts its activation: nothing is
	// hosted, nothing recorded Ready.
	before = m.scrape()
	corrupt := fmt.Sprintf("ord-corrupt-%d", time.Now().UnixNano())
	ctx := ctxT(t, 10*time.Second)
	fence, _, err := h.stores.Events.Open(ctx, corrupt, 1)
	require.NoError(t, err)
	_, err = h.stores.Events.Append(ctx, corrupt, 0, fence, []eventstore.Envelope{{
		EventID: "ev-junk", OrderID: corrupt, EventType: "NoSuchEvent", SourceCommandID: "cmd-junk", Data: []byte("junk"),
	}})
	require.NoError(t, err)
	_, err = a.client.ContinueOrderWorkflow(ctx, &contracts.ContinueOrderWorkflowReq{OrderId: corrupt})
	require.Error(t, err)
	requireDelta(t, before, m.scrape(), reading{abortedColds: 1}, "an activation that could not open")
	require.Equal(t, location.Missing, h.record(t, corrupt).Status)
}

// A planned relocation counts at the target as one activation of cause
// relocation; the steps, and the terminal event, count where they ran.
func TestMetricsOfARelocationAsScraped(t *testing.T) {
	h := newHarness(t)
	regs := map[string]*telemetry.Registry{"workflow-a": telemetry.NewRegistry(), "workflow-b": telemetry.NewRegistry()}
	ws := map[string]*node.Workflow{}
	scrapers := map[string]*scraper{}
	for name, reg := range regs {
		ws[name] = h.startWorkflow(name, withFixtures(), withMetrics(reg))
		scrapers[name] = newScraper(t, reg)
	}
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	before := map[string]reading{"workflow-a": scrapers["workflow-a"].scrape(), "workflow-b": scrapers["workflow-b"].scrape()}

	req, source := h.parkedOrder(t, a, ws)
	target := other(source)
	_, err := a.client.RelocateOrder(ctxT(t, 10*time.Second), &contracts.RelocateOrderReq{OrderId: req.OrderId, TargetNode: target})
	require.NoError(t, err)
	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctxT(t, 5*time.Second), req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctxT(t, 10*time.Second), &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)

	requireDelta(t, before[target], scrapers[target].waitFor(confirmed, 1), reading{
		relocations: 1, hosted: 1, authorizeSteps: 1, confirmSteps: 1, confirmed: 1,
	}, "the target")
	requireDelta(t, before[source], scrapers[source].waitFor(hosted, 0), reading{
		started: 1, coldStarts: 1, reserveSteps: 1,
	}, "the source, which no longer hosts the order")
}

// The first activation after a takeover counts as cause takeover on the
// member it lands on, and consumes the record's mark: a later one would
// be cold.
func TestMetricsOfATakeoverAsScraped(t *testing.T) {
	h := newHarness(t)
	regs := map[string]*telemetry.Registry{"workflow-a": telemetry.NewRegistry(), "workflow-b": telemetry.NewRegistry()}
	ws := map[string]*node.Workflow{}
	scrapers := map[string]*scraper{}
	for name, reg := range regs {
		ws[name] = h.startWorkflow(name, withFixtures(), withMetrics(reg))
		scrapers[name] = newScraper(t, reg)
	}
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)

	req, lost := h.parkedOrder(t, a, ws)
	survivor := other(lost)
	requireDelta(t, reading{}, scrapers[lost].scrape(), reading{
		started: 1, coldStarts: 1, hosted: 1, reserveSteps: 1,
	}, "the owner, before it is lost")
	ws[lost].Member.Crash()
	waitMembers(t, a.member.Lookup, 1)

	svc, err := takeover.New(takeover.Config{
		Kind: grain.KindName, Location: h.stores.Location, Relocations: h.stores.Relocation, Fences: h.stores.Events,
		Live: a.member.Lookup.Live, DropRoute: a.member.Lookup.DropRoute,
	})
	require.NoError(t, err)
	res, err := svc.Order(ctxT(t, 10*time.Second), takeover.Request{OrderID: req.OrderId, Caller: t.Name()})
	require.NoError(t, err)
	require.Equal(t, takeover.TakenOver, res.Outcome)
	require.True(t, h.record(t, req.OrderId).TakenOver, "the reset marks the record for the next activation")

	before := scrapers[survivor].scrape()
	require.NoError(t, h.stores.Fixtures.ReleaseGate(ctxT(t, 5*time.Second), req.IdempotencyKey))
	_, err = a.client.ResumeOrder(ctxT(t, 10*time.Second), &contracts.ResumeOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	requireDelta(t, before, scrapers[survivor].waitFor(confirmed, 1), reading{
		takeovers: 1, hosted: 1, authorizeSteps: 1, confirmSteps: 1, confirmed: 1,
	}, "the member the taken-over order resumed on")
	rec := h.record(t, req.OrderId)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, ws[survivor].Member.ID(), rec.Owner)
	require.Equal(t, res.NewGeneration+1, rec.Generation)
	require.False(t, rec.TakenOver, "the activation's commit consumed the mark")
}
