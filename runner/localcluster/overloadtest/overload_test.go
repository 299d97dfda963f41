package overloadtest

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

// The catalogue: one cart, stock for far more orders than a run starts,
// and a method that approves, so every order's only terminal status is
// Confirmed.
const (
	cartID    = "cart-overload"
	skuA      = "sku-overload-a"
	methodOK  = "pm-overload-ok"
	addressID = "addr-overload"
	stock     = 10_000_000
)

// The load. Every figure is bounded: the closed loop's clients and
// length, the open loop's rate, length, request count and requests in
// flight.
const (
	closedClients = 32
	closedFor     = 4 * time.Second
	// overloadFactor times the closed-loop capacity is the open loop's
	// offered rate, for burstFor, at most maxRequests in all.
	overloadFactor = 4
	burstFor       = 15 * time.Second
	maxRequests    = 30_000
	// maxInFlight bounds the client's open requests; a request due while
	// that many are open is not sent and counted as such (the client, not
	// the server, was the limit).
	maxInFlight = 2_000
	// terminalWithin is the stated bound: every acknowledged order is
	// terminal this long after the burst ends, with no continue.
	terminalWithin = 60 * time.Second
	requestTimeout = 5 * time.Second
)

// noAdmissionEnv, when set to 1, runs the APIs with every in-flight
// budget unbounded: what the test sees without admission control, which
// must fail it.
const noAdmissionEnv = "OVERLOADTEST_NO_ADMISSION"

func seed() commerce.Seed {
	return commerce.Seed{
		Carts: []commerce.Cart{{
			CartID: cartID, Lines: []*contracts.OrderLine{{Sku: skuA, Quantity: 1}}, Amount: 1990, Currency: "EUR",
		}},
		Stock:   map[string]int64{skuA: stock},
		Methods: []commerce.PaymentMethod{{MethodID: methodOK, Approve: true}},
	}
}

type fixture struct {
	c    *localcluster.Cluster
	apis []*client.API
	hc   *http.Client
}

func startCluster(t *testing.T) *fixture {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := localcluster.ChildEnv(os.Environ())
	if os.Getenv(noAdmissionEnv) == "1" {
		t.Logf("%s=1: every in-flight budget of the APIs is unbounded", noAdmissionEnv)
		env = append(env, "SHOPPINGMALL_ADMIT_STARTS=-1", "SHOPPINGMALL_ADMIT_COMMANDS=-1",
			"SHOPPINGMALL_ADMIT_READS=-1", "SHOPPINGMALL_ADMIT_WAITS=-1")
	}
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		RequestTimeout: requestTimeout,
		Env:            env,
		StopGrace:      10 * time.Second,
		Logf:           t.Logf,
		BeforeNodes: func(ctx context.Context, url string) error {
			opt, err := redis.ParseURL(url)
			if err != nil {
				return err
			}
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
			if err != nil {
				return err
			}
			return cs.ApplySeed(ctx, seed())
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append(c.APIs(), c.Workflows()...) {
				t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 25))
			}
		}
		for _, n := range append(c.APIs(), c.Workflows()...) {
			if err := c.Kill(n); err != nil {
				t.Logf("kill %s: %v", n, err)
			}
		}
		if err := c.Stop(); err != nil {
			t.Logf("stop: %v", err)
		}
	})
	// The client outlives the APIs' own request timeout, so a slow answer
	// is the API's 504, not a client-side cut.
	hc := &http.Client{Timeout: requestTimeout + 10*time.Second, Transport: &http.Transport{
		MaxIdleConns: maxInFlight, MaxIdleConnsPerHost: maxInFlight, IdleConnTimeout: 30 * time.Second,
	}}
	t.Cleanup(hc.CloseIdleConnections)
	f := &fixture{c: c, hc: hc}
	for _, n := range c.APIs() {
		f.apis = append(f.apis, &client.API{BaseURL: c.APIURL(n), HTTP: hc})
	}
	return f
}

// answer is one POST /orders and what it was told.
type answer struct {
	status     int // 0: no HTTP answer
	code       string
	reason     string
	retryAfter string
	orderID    string
	err        error
	took       time.Duration
}

func (a answer) acked() bool {
	return a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK) && a.orderID != ""
}

func (a answer) outcome() string {
	switch {
	case a.err != nil:
		return "transport error"
	case a.reason != "":
		return fmt.Sprintf("%d %s %s", a.status, a.code, a.reason)
	case a.code != "":
		return fmt.Sprintf("%d %s", a.status, a.code)
	}
	return strconv.Itoa(a.status)
}

func (f *fixture) start(ctx context.Context, api int, key string) answer {
	begin := time.Now()
	res, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
		CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: key,
	})
	a := answer{status: rep.Status, err: err, took: time.Since(begin), retryAfter: rep.Header.Get("Retry-After")}
	if rep.Error != nil {
		a.code, a.reason = rep.Error.Code, rep.Error.Reason
	}
	if err == nil && res != nil {
		a.orderID = res.GetOrderId()
	}
	return a
}

// closedLoop runs closedClients clients, each starting orders back to
// back for d, and returns the acknowledged starts per second.
func (f *fixture) closedLoop(ctx context.Context, run string, d time.Duration) (float64, []answer) {
	var mu sync.Mutex
	var all []answer
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range closedClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				a := f.start(ctx, w%len(f.apis), fmt.Sprintf("%s-closed-%d-%d", run, w, i))
				mu.Lock()
				all = append(all, a)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	acked := 0
	for _, a := range all {
		if a.acked() {
			acked++
		}
	}
	return float64(acked) / d.Seconds(), all
}

// openLoop offers rate starts a second for d, each sent at its due time
// whatever the earlier ones' fate, at most maxRequests; a start due
// while maxInFlight are open is not sent.
func (f *fixture) openLoop(ctx context.Context, run string, rate float64, d time.Duration) (answers []answer, notSent int) {
	n := min(int(rate*d.Seconds()), maxRequests)
	answers = make([]answer, n)
	sent := make([]bool, n)
	var open atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range n {
		due := begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			// Pacing of the open loop, not a wait for a condition.
			time.Sleep(wait)
		}
		if open.Load() >= maxInFlight {
			notSent++
			continue
		}
		open.Add(1)
		sent[i] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer open.Add(-1)
			answers[i] = f.start(ctx, i%len(f.apis), fmt.Sprintf("%s-open-%d", run, i))
		}()
	}
	wg.Wait()
	out := answers[:0]
	for i, a := range answers {
		if sent[i] {
			out = append(out, a)
		}
	}
	return out, notSent
}

// waitTerminal polls GET /orders/{id} with 16 workers until every order
// is Confirmed or Failed or the deadline passes, and returns the orders
// that are not, with what was last seen of each.
func (f *fixture) waitTerminal(ctx context.Context, ids []string, deadline time.Time) map[string]string {
	pending := append([]string(nil), ids...)
	last := map[string]string{}
	for round := 0; len(pending) > 0; round++ {
		var mu sync.Mutex
		var next []string
		work := make(chan string)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					st, rep, err := f.apis[(round+len(id))%len(f.apis)].GetOrder(ctx, id)
					seen := ""
					switch {
					case err != nil:
						seen = "error: " + err.Error()
					case st == nil:
						seen = rep.String()
					default:
						seen = st.GetStatus().String()
					}
					mu.Lock()
					last[id] = seen
					if seen != contracts.OrderStatus_Confirmed.String() && seen != contracts.OrderStatus_Failed.String() {
						next = append(next, id)
					}
					mu.Unlock()
				}
			}()
		}
		for _, id := range pending {
			work <- id
		}
		close(work)
		wg.Wait()
		pending = next
		if len(pending) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	out := map[string]string{}
	for _, id := range pending {
		out[id] = last[id]
	}
	return out
}

// shedFigures reads an API's shed answers from its own /metrics: their
// count and the upper bound of the bucket holding their 99th percentile.
func (f *fixture) shedFigures(t *testing.T, api string) (count uint64, p99 float64) {
	t.Helper()
	res, err := f.hc.Get(f.c.MetricsURL(api) + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	mf, ok := mfs[edge.MetricShedSeconds]
	require.True(t, ok, "%s serves %s", api, edge.MetricShedSeconds)
	cum := map[float64]uint64{}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	p99 = math.Inf(1)
	for _, b := range bounds {
		if count > 0 && float64(cum[b]) >= 0.99*float64(count) {
			p99 = b
			break
		}
	}
	return count, p99
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}

func tally(as []answer) string {
	outcomes := make([]string, len(as))
	for i, a := range as {
		outcomes[i] = a.outcome()
	}
	return tallyStrings(outcomes)
}

// tallyStrings counts equal strings, e.g. "201: 3, 503 UNAVAILABLE
// OVERLOADED: 1", so that a failure message stays readable.
func tallyStrings(ss []string) string {
	n := map[string]int{}
	for _, s := range ss {
		n[s]++
	}
	ks := make([]string, 0, len(n))
	for k := range n {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// TestBurstFarAboveCapacityIsRiddenOut: the closed-loop capacity is
// measured, then an open loop offers overloadFactor times it for
// burstFor. Every answer is 201/200, or 503/504 with a reason and a
// Retry-After, the shed ones 503 OVERLOADED with 1–3 s; none is INTERNAL
// or NO_ELIGIBLE_MEMBER, and every request is answered. No workflow
// member fences itself or restarts, and every acknowledged order is
// terminal within terminalWithin of the burst's end, with only reads.
func TestBurstFarAboveCapacityIsRiddenOut(t *testing.T) {
	f := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	logFrom := map[string]int64{}
	for _, n := range f.c.Workflows() {
		off, err := localcluster.LogSize(f.c.LogPath(n))
		require.NoError(t, err)
		logFrom[n] = off
	}

	capacity, closed := f.closedLoop(ctx, run, closedFor)
	t.Logf("FIGURE closed loop: %d clients for %s: %.0f acknowledged starts/s (%s)", closedClients, closedFor, capacity, tally(closed))
	require.Positive(t, capacity, "the closed loop acknowledged no start: %s", tally(closed))

	rate := overloadFactor * capacity
	burstBegin := time.Now()
	open, notSent := f.openLoop(ctx, run, rate, burstFor)
	burstEnd := time.Now()
	t.Logf("FIGURE open loop: %.0f starts/s offered (%dx capacity) for %s: %d sent, %d not sent (client cap %d open), over %s: %s",
		rate, overloadFactor, burstFor, len(open), notSent, maxInFlight, burstEnd.Sub(burstBegin).Round(time.Millisecond), tally(open))

	var ackedTook, shedTook []time.Duration
	var ids []string
	var bad []string
	overloaded := 0
	for _, a := range append(append([]answer(nil), closed...), open...) {
		switch {
		case a.acked():
			ackedTook = append(ackedTook, a.took)
			ids = append(ids, a.orderID)
			continue
		case a.err != nil:
			bad = append(bad, "no answer: "+a.err.Error())
			continue
		case a.status != http.StatusServiceUnavailable && a.status != http.StatusGatewayTimeout:
			bad = append(bad, "answered "+a.outcome())
			continue
		}
		// A 503 or 504: it says why, and when to come back.
		ra, err := strconv.Atoi(a.retryAfter)
		switch {
		case a.reason == "" || err != nil || ra < 1:
			bad = append(bad, fmt.Sprintf("%s without a reason or Retry-After (%q)", a.outcome(), a.retryAfter))
		case a.reason == edge.ReasonNoEligibleMember:
			bad = append(bad, "answered "+a.outcome())
		case a.reason == edge.ReasonOverloaded:
			overloaded++
			shedTook = append(shedTook, a.took)
			if ra > 3 {
				bad = append(bad, fmt.Sprintf("%s with Retry-After %d", a.outcome(), ra))
			}
		}
	}
	t.Logf("FIGURE acknowledged starts: %d, client-side p50 %s p99 %s; shed: %d, client-side p50 %s p99 %s",
		len(ackedTook), percentile(ackedTook, 0.5).Round(time.Millisecond), percentile(ackedTook, 0.99).Round(time.Millisecond),
		overloaded, percentile(shedTook, 0.5).Round(time.Millisecond), percentile(shedTook, 0.99).Round(time.Millisecond))
	for _, api := range f.c.APIs() {
		n, p99 := f.shedFigures(t, api)
		t.Logf("FIGURE %s: %d shed answers, server-side p99 <= %gs (%s)", api, n, p99, edge.MetricShedSeconds)
	}

	// Every acknowledged order finishes by itself: reads only.
	stuck := f.waitTerminal(ctx, ids, burstEnd.Add(terminalWithin))
	t.Logf("FIGURE %d acknowledged orders: %d not terminal %s after the burst (checked at %s)",
		len(ids), len(stuck), terminalWithin, time.Since(burstEnd).Round(time.Millisecond))

	// Then the verdicts, all of them before failing.
	require.Zero(t, len(bad), "answers under load that are neither 201/200 nor a 503/504 with a reason: %s",
		tallyStrings(bad))
	require.Positive(t, overloaded, "the open loop was never shed: it did not overload the APIs")
	for _, n := range append(f.c.APIs(), f.c.Workflows()...) {
		require.Empty(t, f.c.Restarts(n), "%s restarted", n)
	}
	for _, n := range f.c.Workflows() {
		cur := localcluster.NewLogCursor(f.c.LogPath(n), logFrom[n])
		require.NoError(t, cur.Refresh())
		fenced := cur.Lines(localcluster.MatchFunc("self-fenced", func(l string) bool {
			return strings.Contains(l, `"msg":"self-fenced: `)
		}))
		require.Empty(t, fenced, "%s fenced itself", n)
	}
	var stuckLines []string
	for id, seen := range stuck {
		stuckLines = append(stuckLines, id+": "+seen)
	}
	sort.Strings(stuckLines)
	require.Zero(t, len(stuckLines), "acknowledged orders not terminal %s after the burst (first of %d): %v",
		terminalWithin, len(stuckLines), firstN(stuckLines, 10))
}

func firstN[T any](items []T, n int) []T {
	if len(items) > n {
		return items[:n]
	}
	return items
}

func TestMain(m *testing.M) { proctest.Main(m) }
