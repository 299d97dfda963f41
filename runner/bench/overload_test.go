package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

func TestSegmentCountMatchesTheOpenLoopsTimeline(t *testing.T) {
	for _, c := range []struct {
		rate float64
		d    time.Duration
	}{{200, 250 * time.Millisecond}, {3 * 417.3, 60 * time.Second}, {0.5 * 417.3, 30 * time.Second}, {7, time.Second}, {1000, time.Millisecond}, {0, time.Second}, {5, 0}} {
		require.Equal(t, scheduledCount(c.rate, c.d), segmentCount(overloadSegment{Rate: c.rate, Duration: c.d}), "rate %v for %s", c.rate, c.d)
	}
}

func TestOverloadPlanIsThreeTimesThePeakThenHalfAndBounded(t *testing.T) {
	p := overloadPlanFor(100, 60*time.Second, 30*time.Second, 64, 100000)
	require.Equal(t, []overloadSegment{{Name: "burst", Rate: 300, Duration: 60 * time.Second}, {Name: "tail", Rate: 50, Duration: 30 * time.Second}}, p.Segments)
	require.EqualValues(t, 300*60+50*30, p.total())
	require.Equal(t, 90*time.Second, p.length())
	require.NoError(t, p.validate())

	require.Len(t, overloadPlanFor(100, time.Second, 0, 1, 10).Segments, 1, "no tail")
	require.ErrorContains(t, overloadPlanFor(100, 60*time.Second, 30*time.Second, 64, 1000).validate(), "above the bound")
	require.Error(t, overloadPlanFor(0, time.Second, 0, 1, 10).validate(), "no peak, no burst")
	require.Error(t, overloadPlanFor(100, time.Second, 0, 0, 1000).validate(), "no workers")
}

func TestClassifyAnswer(t *testing.T) {
	hdr := func(ra string) http.Header {
		h := http.Header{}
		if ra != "" {
			h.Set("Retry-After", ra)
		}
		return h
	}
	shed := problemBody(503, "UNAVAILABLE", "OVERLOADED", "overloaded")
	for _, c := range []struct {
		name string
		code int
		h    http.Header
		body string
		err  error
		want overloadAnswer
	}{
		{"created", 201, nil, `{"orderId":"o-1","state":{"orderId":"o-1","status":"Created"}}`, nil,
			overloadAnswer{Outcome: outcomeAdmitted, Key: "201", OrderID: "o-1"}},
		{"duplicate start", 200, nil, `{"orderId":"o-2","state":{"status":"Confirmed"}}`, nil,
			overloadAnswer{Outcome: outcomeAdmitted, Key: "200", OrderID: "o-2"}},
		{"created without an id", 201, nil, `{}`, nil,
			overloadAnswer{Outcome: outcomeAdmitted, Key: "201", Err: "201 without an order id"}},
		{"shed", 503, hdr("2"), shed, nil, overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED", RetryAfterOK: true}},
		{"shed, Retry-After too long", 503, hdr("5"), shed, nil, overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED"}},
		{"shed, no Retry-After", 503, hdr(""), shed, nil, overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED"}},
		{"no eligible member", 503, hdr("5"), problemBody(503, "UNAVAILABLE", "NO_ELIGIBLE_MEMBER", "none"), nil,
			overloadAnswer{Outcome: outcomeRefused, Key: "503 NO_ELIGIBLE_MEMBER"}},
		{"OVERLOADED on a 429 is not a shed", 429, nil, shed, nil, overloadAnswer{Outcome: outcomeRefused, Key: "429 OVERLOADED"}},
		{"internal", 500, nil, problemBody(500, "INTERNAL", "", "x"), nil, overloadAnswer{Outcome: outcomeRefused, Key: "500 INTERNAL"}},
		{"the old error envelope", 503, hdr("2"), `{"error":{"code":"UNAVAILABLE","reason":"OVERLOADED"}}`, nil,
			overloadAnswer{Outcome: outcomeRefused, Key: "503"}},
		{"not JSON", 502, nil, `bad gateway`, nil, overloadAnswer{Outcome: outcomeRefused, Key: "502"}},
		{"transport", 0, nil, "", errors.New("connection refused"), overloadAnswer{Outcome: outcomeError, Key: "transport error", Err: "connection refused"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, classifyAnswer(c.code, c.h, []byte(c.body), c.err))
		})
	}
}

// waitPast returns a channel closed once d has passed since t0, bounded
// by the test's own deadline through d itself.
func waitPast(t0 time.Time, d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for time.Since(t0) < d {
			<-tick.C
		}
	}()
	return ch
}

// With every worker busy, an order due is not queued behind them: it is
// counted not sent, and the generator never holds more than its pool.
func TestRunOverloadCountsOrdersNoWorkerCouldTakeAsNotSent(t *testing.T) {
	plan := overloadPlan{Segments: []overloadSegment{{Name: "burst", Rate: 200, Duration: 100 * time.Millisecond}}, Workers: 2}
	release := waitPast(time.Now(), 200*time.Millisecond) // past the 100 ms timeline
	var calls atomic.Int64
	run := runOverload(context.Background(), plan, quiet, func(ctx context.Context, _, _ int) overloadAnswer {
		calls.Add(1)
		<-release
		return overloadAnswer{Outcome: outcomeAdmitted, Key: "201", OrderID: "o"}
	})
	require.Equal(t, []int64{20}, run.Scheduled)
	require.Equal(t, []int64{2}, run.Sent)
	require.Equal(t, []int64{18}, run.NotSent)
	require.EqualValues(t, 2, calls.Load())
	require.EqualValues(t, 2, run.PeakInFlight)
	require.Zero(t, run.Missed)
	require.Len(t, run.Results, 2)
	for _, r := range run.Results {
		require.GreaterOrEqual(t, r.Lag, time.Duration(0), "handed out before it was due")
		require.GreaterOrEqual(t, r.FromDue, r.FromSent)
	}
}

// Free workers take every order, on the timeline: the tail's orders are
// due after the burst's whole length.
func TestRunOverloadSendsBothSegmentsOnTheirTimeline(t *testing.T) {
	plan := overloadPlan{Segments: []overloadSegment{
		{Name: "burst", Rate: 400, Duration: 100 * time.Millisecond},
		{Name: "tail", Rate: 100, Duration: 100 * time.Millisecond},
	}, Workers: 16}
	t0 := time.Now()
	var mu sync.Mutex
	var at []time.Duration
	run := runOverload(context.Background(), plan, quiet, func(ctx context.Context, _, seg int) overloadAnswer {
		mu.Lock()
		at = append(at, time.Since(t0))
		mu.Unlock()
		return overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED"}
	})
	require.Equal(t, []int64{40, 10}, run.Scheduled)
	require.Equal(t, run.Scheduled, run.Sent)
	require.Equal(t, []int64{0, 0}, run.NotSent)
	require.Len(t, run.Results, 50)
	bySeg := map[int][]time.Duration{}
	for _, r := range run.Results {
		bySeg[r.Segment] = append(bySeg[r.Segment], r.Due)
	}
	require.Len(t, bySeg[0], 40)
	require.Len(t, bySeg[1], 10)
	for _, d := range bySeg[1] {
		require.GreaterOrEqual(t, d, 100*time.Millisecond, "a tail order due inside the burst")
	}
	for _, d := range bySeg[0] {
		require.Less(t, d, 100*time.Millisecond)
	}
	require.GreaterOrEqual(t, run.Elapsed, 190*time.Millisecond, "the timeline's last order is due at 190 ms")
}

// An interrupted phase stops dispatching and says how many it never
// reached.
func TestRunOverloadStopsWhenInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	plan := overloadPlan{Segments: []overloadSegment{{Name: "burst", Rate: 100, Duration: time.Minute}}, Workers: 4}
	var calls atomic.Int64
	run := runOverload(ctx, plan, quiet, func(ctx context.Context, _, _ int) overloadAnswer {
		if calls.Add(1) == 3 {
			cancel()
		}
		return overloadAnswer{Outcome: outcomeAdmitted}
	})
	require.EqualValues(t, 3, run.Sent[0])
	require.EqualValues(t, 6000-3, run.Missed)
	require.Less(t, run.Elapsed, 10*time.Second)
}

// fakeOverloadAPI sheds every third POST, refuses every seventh with
// NO_ELIGIBLE_MEMBER, admits the rest, and reports each admitted order at
// status[id].
type fakeOverloadAPI struct {
	posts atomic.Int64
	mu    sync.Mutex
	state map[string]string
}

func (f *fakeOverloadAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		n := f.posts.Add(1)
		switch {
		case n%3 == 0:
			w.Header().Set("Content-Type", client.ContentTypeProblem)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, problemBody(503, "UNAVAILABLE", "OVERLOADED", "overloaded"))
		case n%7 == 0:
			w.Header().Set("Content-Type", client.ContentTypeProblem)
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, problemBody(503, "UNAVAILABLE", "NO_ELIGIBLE_MEMBER", "none"))
		default:
			id := fmt.Sprintf("o-%d", n)
			f.mu.Lock()
			f.state[id] = "Confirmed"
			if n%5 == 0 {
				f.state[id] = "InventoryReserved"
			}
			f.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"orderId":%q,"state":{"orderId":%q,"status":"Created"}}`, id, id)
		}
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/orders/")
	f.mu.Lock()
	st, ok := f.state[id]
	f.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", client.ContentTypeProblem)
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, problemBody(404, "NOT_FOUND", "", "no"))
		return
	}
	fmt.Fprintf(w, `{"state":{"orderId":%q,"status":%q,"updatedAtUnixMs":%d}}`, id, st, time.Now().UnixMilli())
}

// The generator's POSTs and the status sweep, over HTTP against a fake
// API: every answer is classified, every admitted order read back.
func TestOverloadStartAndSweepAgainstAnAPI(t *testing.T) {
	api := &fakeOverloadAPI{state: map[string]string{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	l := newLoad(loadConfig{APIs: []string{srv.URL}, Concurrency: 1, RunID: "t"})
	hc := overloadClient(8)
	posters, err := overloadPosters([]string{srv.URL}, 8)
	require.NoError(t, err)
	plan := overloadPlan{Segments: []overloadSegment{{Name: "burst", Rate: 420, Duration: 250 * time.Millisecond}}, Workers: 8}
	run := runOverload(context.Background(), plan, quiet, func(ctx context.Context, w, _ int) overloadAnswer {
		return l.overloadStart(ctx, posters[w], l.seq.Add(1))
	})
	require.EqualValues(t, 105, run.Scheduled[0])
	require.Equal(t, run.Scheduled[0], run.Sent[0]+run.NotSent[0])
	got := map[string]int{}
	var ids []string
	for _, r := range run.Results {
		got[r.Outcome]++
		if r.Outcome == outcomeAdmitted {
			require.NotEmpty(t, r.OrderID)
			ids = append(ids, r.OrderID)
		}
		if r.Outcome == outcomeShed {
			require.True(t, r.RetryAfterOK)
		}
	}
	require.EqualValues(t, api.posts.Load(), len(run.Results))
	require.Positive(t, got[outcomeShed])
	require.Positive(t, got[outcomeRefused])
	require.Positive(t, got[outcomeAdmitted])

	swept := sweepOrders(context.Background(), hc, []string{srv.URL}, append(ids, "o-missing"))
	require.Len(t, swept, len(ids)+1)
	for _, id := range ids {
		api.mu.Lock()
		want := api.state[id]
		api.mu.Unlock()
		require.Equal(t, want, swept[id].Status, id)
		require.Empty(t, swept[id].Err)
		require.Positive(t, swept[id].UpdatedAtUnixMs)
	}
	require.Contains(t, swept["o-missing"].Err, "404")
	require.False(t, swept["o-missing"].terminal())
}

// A flaky read is retried before the order counts as unreadable.
func TestSweepRetriesAFailedRead(t *testing.T) {
	var gets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"state":{"orderId":"o-1","status":"Failed","updatedAtUnixMs":7}}`)
	}))
	t.Cleanup(srv.Close)
	swept := sweepOrders(context.Background(), srv.Client(), []string{srv.URL}, []string{"o-1"})
	require.Equal(t, sweptOrder{Status: "Failed", UpdatedAtUnixMs: 7}, swept["o-1"])
	require.True(t, swept["o-1"].terminal())
}

func TestLoopbackOnly(t *testing.T) {
	require.NoError(t, loopbackOnly([]string{"http://127.0.0.1:8081", "http://localhost:9", "http://[::1]:80", "http://127.0.0.2:1"}))
	for _, u := range []string{"http://10.0.0.1:8081", "http://example.com", "http://0.0.0.0:80"} {
		require.Error(t, loopbackOnly([]string{"http://127.0.0.1:1", u}), u)
	}
}

// overloadCase builds a phase's input: peak 10/s, a 1 s burst and a 1 s
// tail, ending at tailEnd.
type overloadCase struct {
	in      overloadInput
	tailEnd time.Time
	n       int
}

func newOverloadCase() *overloadCase {
	start := time.UnixMilli(1_767_225_600_000)
	plan := overloadPlanFor(10, time.Second, time.Second, 4, 1000)
	c := &overloadCase{tailEnd: start.Add(2 * time.Second)}
	c.in = overloadInput{Plan: plan, Peak: 10, TailEnd: c.tailEnd, Settle: 30 * time.Second, Swept: map[string]sweptOrder{},
		Run: overloadRun{Start: start, Scheduled: []int64{30, 5}, Sent: []int64{30, 5}, NotSent: []int64{0, 0}, Elapsed: 2 * time.Second}}
	return c
}

// admit adds k admitted orders of segment seg whose sweep reads sw, with
// terminal times at offset from the tail's end.
func (c *overloadCase) admit(seg, k int, status string, offset time.Duration) *overloadCase {
	for i := 0; i < k; i++ {
		c.n++
		id := fmt.Sprintf("o-%d", c.n)
		c.in.Run.Results = append(c.in.Run.Results, overloadResult{overloadAnswer: overloadAnswer{Outcome: outcomeAdmitted, Key: "201", OrderID: id},
			Segment: seg, FromDue: time.Duration(c.n) * time.Millisecond})
		switch status {
		case "unreadable":
			c.in.Swept[id] = sweptOrder{Err: "GET /orders/x: 503"}
		case "unswept":
		default:
			c.in.Swept[id] = sweptOrder{Status: status, UpdatedAtUnixMs: c.tailEnd.Add(offset).UnixMilli()}
		}
	}
	return c
}

func (c *overloadCase) answer(seg, k int, a overloadAnswer) *overloadCase {
	for i := 0; i < k; i++ {
		c.in.Run.Results = append(c.in.Run.Results, overloadResult{overloadAnswer: a, Segment: seg, FromSent: time.Millisecond})
	}
	return c
}

// slowAnswer adds k answers that took d from their send to the client.
func (c *overloadCase) slowAnswer(seg, k int, a overloadAnswer, d time.Duration) *overloadCase {
	for i := 0; i < k; i++ {
		c.in.Run.Results = append(c.in.Run.Results, overloadResult{overloadAnswer: a, Segment: seg, FromSent: d})
	}
	return c
}

func (c *overloadCase) with(f func(in *overloadInput)) *overloadCase {
	f(&c.in)
	return c
}

// fastShed is a server-side shed histogram whose p99 is under 10 ms.
var fastShed = &histDelta{Bounds: []float64{0.001, 0.005, 0.01}, Cumulative: []float64{90, 100, 100}, Count: 100}

func verdicts(st *overloadStats) map[string]string {
	out := map[string]string{}
	for _, g := range st.Goals {
		key := strings.SplitN(g.Goal, " ", 2)[0] // goodput / stranded / self-fences / process / shed
		if strings.Contains(g.Goal, "client-side") {
			key = "shed client"
		}
		out[key] = g.Verdict
	}
	return out
}

func TestBuildOverloadGoodputStrandedAndGoals(t *testing.T) {
	shed := overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED", RetryAfterOK: true}
	for _, c := range []struct {
		name         string
		c            *overloadCase
		goodput      float64
		stranded     int
		byStatus     map[string]int
		ack          int
		verdicts     map[string]string
		answers      map[string]int
		unknownTimes int
	}{
		{
			name: "rides it out",
			c: newOverloadCase().admit(0, 9, "Confirmed", -time.Second).answer(0, 20, shed).admit(1, 5, "Failed", 0).
				with(func(in *overloadInput) { in.ShedServer = fastShed }),
			goodput: 0.9, ack: 14, answers: map[string]int{"201": 14, "503 OVERLOADED": 20},
			verdicts: map[string]string{"goodput": "met", "stranded": "met", "self-fences": "met", "process": "met", "shed": "met", "shed client": "met"},
		},
		{
			name: "terminal only after the tail ends",
			c: newOverloadCase().admit(0, 4, "Confirmed", -time.Millisecond).admit(0, 5, "Confirmed", time.Millisecond).
				with(func(in *overloadInput) { in.ShedServer = &histDelta{} }),
			goodput: 0.4, ack: 9, answers: map[string]int{"201": 9},
			verdicts: map[string]string{"goodput": "not met", "stranded": "met", "self-fences": "met", "process": "met", "shed": "no data (nothing shed)", "shed client": "no data (nothing shed)"},
		},
		{
			name: "stranded, unreadable and unswept orders",
			c: newOverloadCase().admit(0, 8, "Failed", -time.Second).admit(0, 2, "Created", -time.Second).admit(1, 1, "InventoryReserved", 0).
				admit(0, 1, "unreadable", 0).admit(0, 1, "unswept", 0),
			goodput: 0.8, ack: 13, stranded: 5, answers: map[string]int{"201": 13},
			byStatus: map[string]int{"Created": 2, "InventoryReserved": 1, "unreadable": 2},
			verdicts: map[string]string{"goodput": "met", "stranded": "not met", "self-fences": "met", "process": "met", "shed": "no data (histogram unavailable)", "shed client": "no data (nothing shed)"},
		},
		{
			name: "fenced and restarted, shed slowly",
			c: newOverloadCase().admit(0, 10, "Confirmed", -time.Second).answer(0, 2, shed).slowAnswer(0, 1, shed, 1500*time.Millisecond).
				answer(0, 2, overloadAnswer{Outcome: outcomeRefused, Key: "500 INTERNAL"}).
				answer(0, 1, overloadAnswer{Outcome: outcomeError, Key: "transport error"}).
				with(func(in *overloadInput) {
					in.SelfFences = 2
					in.Restarts = []string{"workflow-a pid 1 (exit status 3) → pid 2 after 250ms"}
					in.ShedServer = &histDelta{Bounds: []float64{0.01, 0.05}, Cumulative: []float64{1, 3}, Count: 3}
				}),
			goodput: 1, ack: 10, answers: map[string]int{"201": 10, "503 OVERLOADED": 3, "500 INTERNAL": 2, "transport error": 1},
			verdicts: map[string]string{"goodput": "met", "stranded": "met", "self-fences": "not met", "process": "not met", "shed": "not met", "shed client": "not met"},
		},
		{
			name:    "terminal without an event time is left out of the goodput",
			c:       newOverloadCase().admit(0, 9, "Confirmed", -time.Hour-time.Duration(1_767_225_602_000)*time.Millisecond),
			goodput: 0, ack: 9, answers: map[string]int{"201": 9}, unknownTimes: 9,
			verdicts: map[string]string{"goodput": "not met", "stranded": "met", "self-fences": "met", "process": "met", "shed": "no data (histogram unavailable)", "shed client": "no data (nothing shed)"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := buildOverload(c.c.in)
			require.InDelta(t, c.goodput, st.Goodput.OverPeak, 1e-9)
			require.InDelta(t, c.goodput*10, st.Goodput.PerSec, 1e-9)
			require.Equal(t, c.ack, st.Stranded.Acknowledged)
			require.Equal(t, c.stranded, st.Stranded.NotTerminal)
			require.Equal(t, c.byStatus, st.Stranded.ByStatus)
			require.Equal(t, c.answers, st.Answers)
			require.Equal(t, c.unknownTimes, st.Goodput.TerminalUnknownTime)
			require.Equal(t, c.verdicts, verdicts(st))
			var sum int
			for _, s := range st.Segments {
				sum += s.Admitted + s.Shed + s.Refused + s.Errors
			}
			require.Equal(t, len(c.c.in.Run.Results), sum, "every answer counted in its segment")
		})
	}
}

func TestBuildOverloadSegmentsAndSheds(t *testing.T) {
	c := newOverloadCase().admit(0, 3, "Confirmed", -time.Second).
		answer(0, 4, overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED", RetryAfterOK: true}).
		answer(1, 1, overloadAnswer{Outcome: outcomeShed, Key: "503 OVERLOADED"}).
		with(func(in *overloadInput) {
			in.Run.NotSent = []int64{7, 0}
			in.RunnerCPUSeconds = 1
		})
	st := buildOverload(c.in)
	require.Len(t, st.Segments, 2)
	require.Equal(t, overloadSegmentStats{Name: "burst", RatePerSec: 30, RateOverPeak: 3, DurationSec: 1, Scheduled: 30, Sent: 30, NotSent: 7, Admitted: 3, Shed: 4},
		st.Segments[0])
	require.Equal(t, overloadSegmentStats{Name: "tail", RatePerSec: 5, RateOverPeak: 0.5, DurationSec: 1, Scheduled: 5, Sent: 5, Shed: 1}, st.Segments[1])
	require.Equal(t, 5, st.Shed.Count)
	require.Equal(t, 1, st.Shed.WithoutRetryAfter)
	require.EqualValues(t, 5, st.Shed.ClientMs.N)
	require.False(t, st.Shed.Server.Available)
	require.EqualValues(t, 3, st.AdmittedStartOrderMs.N)
	require.InDelta(t, 0.5, st.RunnerCPUShare, 1e-9)
	require.Contains(t, strings.Join(st.Notes, "\n"), "7 orders were not sent")
	require.Contains(t, strings.Join(st.Notes, "\n"), "unavailable")

	var b strings.Builder
	printOverload(&b, st)
	out := b.String()
	for _, want := range []string{"burst", "tail", "not sent", "server-side p99 unavailable", "goodput", "stranded", "highest RSS", "[not met]", "[no data (histogram unavailable)]"} {
		require.Contains(t, out, want)
	}
}

func TestHistogramQuantileInterpolatesAsPrometheus(t *testing.T) {
	h := &histDelta{Bounds: []float64{0.001, 0.005, 0.01}, Cumulative: []float64{0, 90, 100}, Count: 100}
	require.InDelta(t, 0.001+0.004*50/90, h.quantile(0.5), 1e-12)
	require.InDelta(t, 0.005+0.005*9/10, h.quantile(0.99), 1e-12)
	// Beyond the last finite bound (the +Inf bucket): that bound.
	h = &histDelta{Bounds: []float64{0.001, 0.01}, Cumulative: []float64{50, 90}, Count: 100}
	require.Equal(t, 0.01, h.quantile(0.99))
	require.InDelta(t, 0.0005, h.quantile(0.25), 1e-12, "the first bucket starts at 0")
	require.Zero(t, (&histDelta{}).quantile(0.99))
	require.Zero(t, (*histDelta)(nil).quantile(0.99))
}

func parseScrape(t *testing.T, text string) scraped {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	return scraped(mfs)
}

func shedText(route string, b1, b10, count int) string {
	return fmt.Sprintf(`# TYPE shoppingmall_http_shed_seconds histogram
shoppingmall_http_shed_seconds_bucket{route=%[1]q,le="0.001"} %[2]d
shoppingmall_http_shed_seconds_bucket{route=%[1]q,le="0.01"} %[3]d
shoppingmall_http_shed_seconds_bucket{route=%[1]q,le="+Inf"} %[4]d
shoppingmall_http_shed_seconds_sum{route=%[1]q} 0.1
shoppingmall_http_shed_seconds_count{route=%[1]q} %[4]d
# TYPE shoppingmall_unavailable_total counter
shoppingmall_unavailable_total{reason="OVERLOADED"} %[4]d
shoppingmall_unavailable_total{reason="OWNER_GONE"} 1
`, route, b1, b10, count)
}

// The phase's growth of the shed histogram, over both APIs; an API that
// restarted (its count went down) counts from zero.
func TestShedHistogramDeltaOverTheAPIs(t *testing.T) {
	before := map[string]scraped{"a": parseScrape(t, shedText("/orders", 10, 10, 10)), "b": parseScrape(t, shedText("/orders", 50, 60, 60))}
	after := map[string]scraped{"a": parseScrape(t, shedText("/orders", 100, 108, 110)), "b": parseScrape(t, shedText("/orders", 2, 2, 2))}
	h := shedHistogramDelta(before, after)
	require.NotNil(t, h)
	require.Equal(t, []float64{0.001, 0.01}, h.Bounds)
	require.Equal(t, []float64{90 + 2, 98 + 2}, h.Cumulative)
	require.EqualValues(t, 102, h.Count)
	require.Equal(t, 0.01, h.quantile(0.99), "rank 101 lies in +Inf")

	require.Equal(t, map[string]float64{"OVERLOADED": 100 + 2, "OWNER_GONE": 0}, counterDeltaBy(before, after, metricUnavailable, labelReason))

	none := map[string]scraped{"a": parseScrape(t, "# TYPE other counter\nother 1\n")}
	require.Nil(t, shedHistogramDelta(none, none), "no API exposes it: unavailable, not zero")
	require.Nil(t, counterDeltaBy(none, none, metricUnavailable, labelReason))
}

func TestRSSSamplerReadsTheProcesses(t *testing.T) {
	s := startRSS(func() map[string]int { return map[string]int{runnerCPU: 0, "gone": 1 << 30} })
	got := s.finish()
	require.Contains(t, got, runnerCPU)
	require.NotContains(t, got, "gone", "a process that cannot be read has no figure")
	require.Positive(t, got[runnerCPU].PeakSampledMiB)
	require.GreaterOrEqual(t, got[runnerCPU].HWMMiB, got[runnerCPU].PeakSampledMiB)
}

// Only the member's own "self-fenced: ..." lines count, and only those
// written after the phase began.
func TestSelfFenceLinesAreCountedFromThePhaseStart(t *testing.T) {
	p := filepath.Join(t.TempDir(), "workflow-a.log")
	old := `{"time":"t","level":"ERROR","msg":"self-fenced: placement: evicted","member":"m1"}` + "\n"
	require.NoError(t, os.WriteFile(p, []byte(old), 0o644))
	from, err := localcluster.LogSize(p)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(`{"time":"t","level":"INFO","msg":"serving","note":"self-fenced is logged on eviction"}` + "\n" +
		`{"time":"t","level":"ERROR","msg":"self-fenced: placement: location store unreachable","member":"m2"}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	n, err := localcluster.CountLines(p, from, selfFenceLine)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestOverloadFlags(t *testing.T) {
	o, err := parseOptions(nil)
	require.NoError(t, err)
	require.Equal(t, 60*time.Second, o.overload)
	require.Equal(t, 30*time.Second, o.overloadTail)
	require.Equal(t, 30*time.Second, o.overloadSettle)
	o, err = parseOptions([]string{"-overload", "0"})
	require.NoError(t, err)
	require.Zero(t, o.overload, "0 disables the phase")
	o, err = parseOptions([]string{"-overload", "15s", "-overload-tail", "10s", "-overload-settle", "5s", "-overload-max-inflight", "256"})
	require.NoError(t, err)
	require.Equal(t, overloadConfig{Burst: 15 * time.Second, Tail: 10 * time.Second, Settle: 5 * time.Second, Workers: 256},
		overloadConfig{Burst: o.overload, Tail: o.overloadTail, Settle: o.overloadSettle, Workers: o.overloadMaxInFlight})
	require.Equal(t, generatorOurs, o.overloadGenerator, "ours by default")
	o, err = parseOptions([]string{"-overload-generator", "vegeta"})
	require.NoError(t, err)
	require.Equal(t, generatorVegeta, o.overloadGenerator)
	for _, bad := range [][]string{{"-overload", "-1s"}, {"-overload-tail", "-1s"}, {"-overload-max-inflight", "0"}, {"-overload-max-orders", "0"}, {"-overload-generator", "wrk"}} {
		_, err := parseOptions(bad)
		require.Error(t, err, "%v", bad)
	}
}

// problemBody is the API's problem details reply of code (and reason).
func problemBody(status int, code, reason, detail string) string {
	p := client.ErrorBody{Type: client.ProblemTypePrefix + code, Title: code, Status: status, Detail: detail, Code: code, Reason: reason}
	b, _ := json.Marshal(p)
	return string(b)
}
