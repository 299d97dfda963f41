package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// The timeline is fixed in advance: order i is handed out due at i/rate,
// never before, and every order is sent although none has finished.
func TestOpenLoopKeepsItsTimelineRegardlessOfCompletions(t *testing.T) {
	const rate, d = 200.0, 250 * time.Millisecond
	release := make(chan struct{})
	type call struct {
		i        int64
		due, at  time.Duration
		beforeOK bool
	}
	var mu sync.Mutex
	var calls []call
	var ran atomic.Int64
	go func() {
		// Nothing finishes before the last order was sent (bounded, so a
		// broken scheduler fails the assertions below instead of hanging).
		deadline := time.Now().Add(5 * time.Second)
		for ran.Load() < scheduledCount(rate, d) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		close(release)
	}()
	run := runOpenLoop(context.Background(), openLoopConfig{Rate: rate, Duration: d, MaxInFlight: 1000, SendGrace: time.Second}, quiet,
		func(_ context.Context, i int64, phaseStart, scheduled time.Time) orderResult {
			now := time.Now()
			mu.Lock()
			calls = append(calls, call{i: i, due: scheduled.Sub(phaseStart), at: now.Sub(phaseStart), beforeOK: !now.Before(scheduled)})
			mu.Unlock()
			ran.Add(1)
			<-release
			return orderResult{Status: "Confirmed", Path: pathSuccess, Start: scheduled.Sub(phaseStart), E2E: time.Since(scheduled)}
		})
	require.EqualValues(t, 50, run.Scheduled)
	require.EqualValues(t, 50, run.Sent)
	require.Zero(t, run.Missed)
	require.Len(t, run.Results, 50)
	require.EqualValues(t, 50, run.MaxInFlight, "every order was in flight at once: none waited for another")
	sort.Slice(calls, func(a, b int) bool { return calls[a].i < calls[b].i })
	require.Len(t, calls, 50)
	for k, c := range calls {
		require.EqualValues(t, k, c.i)
		require.Equal(t, time.Duration(k)*5*time.Millisecond, c.due, "order %d's place on the timeline", k)
		require.True(t, c.beforeOK, "order %d sent at %s, before it was due at %s", k, c.at, c.due)
	}
}

// stallingAPI answers POST /orders at once, except the stallOn-th POST,
// which it holds for stall; every GET reports the order Confirmed.
type stallingAPI struct {
	stallOn int64
	stall   time.Duration
	posts   atomic.Int64
}

func (s *stallingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		if s.posts.Add(1) == s.stallOn {
			time.Sleep(s.stall)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"orderId":"o-1","state":{"orderId":"o-1","status":"Created"}}`))
		return
	}
	w.Header().Set(client.HeaderWait, client.WaitReached)
	_, _ = w.Write([]byte(`{"state":{"orderId":"o-1","status":"Confirmed"}}`))
}

// With one order in flight at most, a server that stalls one answer holds
// up the orders due behind it. They are answered at once when finally
// sent, but their latency counts from when they were due, so the stall
// shows in each of them, not only in the stalled one (coordinated
// omission corrected), and in the percentiles.
func TestOpenLoopLatencyIncludesAStallFromTheScheduledTime(t *testing.T) {
	const stall = 300 * time.Millisecond
	api := &stallingAPI{stallOn: 3, stall: stall}
	srv := httptest.NewServer(api)
	defer srv.Close()
	l := newLoad(loadConfig{APIs: []string{srv.URL}, Concurrency: 1, Poll: time.Millisecond, PollTimeout: 10 * time.Second, RunID: "t"})
	cfg := openLoopConfig{Rate: 100, Duration: 200 * time.Millisecond, MaxInFlight: 1, SendGrace: 5 * time.Second}
	run := l.openLoop(context.Background(), cfg, quiet)
	require.EqualValues(t, 20, run.Sent)
	require.Zero(t, run.Missed)
	rs := append([]orderResult(nil), run.Results...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	for i, r := range rs {
		require.Empty(t, r.Err)
		require.Equal(t, dueAt(int64(i), cfg.Rate), r.Start, "Start is the due time")
	}
	// The third order (due at 20 ms) stalled until about 320 ms; the one
	// due at 30 ms could only be sent then.
	stalled, next := rs[2], rs[3]
	require.GreaterOrEqual(t, stalled.StartLat, stall)
	require.GreaterOrEqual(t, next.StartLag, stall-50*time.Millisecond, "sent late: the only slot was held")
	require.GreaterOrEqual(t, next.StartLat, stall-50*time.Millisecond, "its latency counts from its due time")
	require.GreaterOrEqual(t, next.E2E, next.StartLat)
	// Every order due during the stall carries what is left of it.
	for _, r := range rs[3:] {
		if left := 20*time.Millisecond + stall - r.Start; left > 50*time.Millisecond {
			require.GreaterOrEqual(t, r.StartLat, left-40*time.Millisecond, "order due at %s", r.Start)
		}
	}
	require.Greater(t, run.Late, int64(10))

	st := buildOpenLoop(cfg, "test", 0, run)
	require.EqualValues(t, 20, st.StartOrderMs.N)
	require.EqualValues(t, 20, st.Counts.Terminal)
	// Over half the orders were due during the stall: the median shows it.
	require.Greater(t, st.StartOrderMs.P50, 100.0)
	require.GreaterOrEqual(t, st.StartToTerminalMs.P99, ms(stall))
	require.False(t, st.Goals.StartOrderP99Met)
}

// An interrupted phase counts the orders it never sent as missed.
func TestOpenLoopCountsMissedStarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64
	run := runOpenLoop(ctx, openLoopConfig{Rate: 20, Duration: time.Second, MaxInFlight: 10, SendGrace: time.Second}, quiet,
		func(_ context.Context, _ int64, phaseStart, scheduled time.Time) orderResult {
			if sent.Add(1) == 5 {
				cancel()
			}
			return orderResult{Status: "Confirmed", Start: scheduled.Sub(phaseStart)}
		})
	require.EqualValues(t, 20, run.Scheduled)
	// The order due right after the cancel may already be on its way when
	// the cancel lands on a loaded machine; every other one is missed.
	require.GreaterOrEqual(t, run.Sent, int64(5))
	require.LessOrEqual(t, run.Sent, int64(6))
	require.Equal(t, run.Scheduled, run.Sent+run.Missed, "every order is sent or missed")
}

func TestHdrPercentilesReadTheHistogram(t *testing.T) {
	require.Equal(t, hdrPct{}, hdrPercentiles(newLatencyHistogram()))

	// 1..1000 ms: each percentile within the histogram's 0.1%.
	h := newLatencyHistogram()
	for i := 1; i <= 1000; i++ {
		require.False(t, recordLatency(h, time.Duration(i)*time.Millisecond))
	}
	p := hdrPercentiles(h)
	require.EqualValues(t, 1000, p.N)
	for _, c := range []struct{ got, want float64 }{{p.P50, 500}, {p.P90, 900}, {p.P99, 990}, {p.P999, 999}, {p.Max, 1000}, {p.Mean, 500.5}} {
		require.InEpsilon(t, c.want, c.got, 0.001)
		require.GreaterOrEqual(t, c.got, c.want*0.9999, "a percentile never understates")
	}

	// 990 fast, 10 slow: p99 is still fast, p99.9 is slow.
	h = newLatencyHistogram()
	for i := 0; i < 990; i++ {
		recordLatency(h, time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		recordLatency(h, 100*time.Millisecond)
	}
	p = hdrPercentiles(h)
	require.InEpsilon(t, 1.0, p.P99, 0.001)
	require.InEpsilon(t, 100.0, p.P999, 0.001)

	// Out of range: sub-µs is 1 µs, beyond the top is clamped and told.
	h = newLatencyHistogram()
	require.False(t, recordLatency(h, 10*time.Nanosecond))
	require.True(t, recordLatency(h, time.Hour))
	require.EqualValues(t, 1, h.Min())
	require.InEpsilon(t, float64(latencyMax), float64(h.Max()), 0.001)
}

func TestBuildOpenLoopCountsAndGoals(t *testing.T) {
	run := openLoopRun{Scheduled: 5, Sent: 4, Missed: 1, Late: 2, MaxLag: 3 * time.Millisecond, Elapsed: time.Second,
		Steal: stealBetween(machineCPU{Total: 100, Steal: 1}, machineCPU{Total: 300, Steal: 21})}
	for i := 0; i < 3; i++ {
		run.Results = append(run.Results, orderResult{Path: pathSuccess, Status: "Confirmed", StartLat: 5 * time.Millisecond, E2E: 40 * time.Millisecond, Waits: 1})
	}
	run.Results = append(run.Results, orderResult{Path: pathPayment, Err: "POST /orders: status 503", Polls: 0})
	st := buildOpenLoop(openLoopConfig{Rate: 5, Duration: time.Second, MaxInFlight: 8}, "src", 10, run)
	require.Equal(t, 0.5, st.RateOverPeak)
	require.EqualValues(t, 3, st.Counts.Terminal)
	require.EqualValues(t, 1, st.Counts.Errors)
	require.Equal(t, "POST /orders: status 503", st.Counts.FirstError)
	require.EqualValues(t, 1, st.MissedStarts)
	require.EqualValues(t, 2, st.LateStarts)
	require.EqualValues(t, 3, st.Waits)
	require.EqualValues(t, 3, st.StartOrderMs.N, "an order that failed to start has no StartOrder latency")
	require.True(t, st.Goals.StartOrderP99Met)
	require.True(t, st.Goals.StartToTerminalP99Met)
	require.NotNil(t, st.Steal, "the phase's steal is reported with its latencies")
	require.InDelta(t, 0.1, st.Steal.Share, 1e-9)
	rep := &report{OpenLoop: st}
	require.InDelta(t, 10.0, *openLoopSteal(rep), 1e-9, "compared in percent")
	var out strings.Builder
	printReport(&out, rep)
	require.Contains(t, out.String(), "10.0% of the machine's CPU time during the open loop")

	run.Results = append(run.Results, orderResult{Path: pathSuccess, Status: "Confirmed", StartLat: 30 * time.Millisecond, E2E: 200 * time.Millisecond})
	st = buildOpenLoop(openLoopConfig{Rate: 5, Duration: time.Second}, "src", 10, run)
	require.False(t, st.Goals.StartOrderP99Met)
	require.False(t, st.Goals.StartToTerminalP99Met)
}

func TestOpenLoopRateChoice(t *testing.T) {
	cur := &report{}
	cur.Throughput.OrdersPerSec = 300
	rate, src := openLoopRate(options{}, cur, nil)
	require.Equal(t, 150.0, rate)
	require.Contains(t, src, "50% of the closed-loop 300.0")

	rate, src = openLoopRate(options{openLoopRate: 42}, cur, nil)
	require.Equal(t, 42.0, rate)
	require.Equal(t, "-open-loop-rate", src)

	base := &report{OpenLoop: &openLoopStats{RatePerSec: 100}}
	rate, src = openLoopRate(options{}, cur, base)
	require.Equal(t, 100.0, rate, "after a baseline, the same offered load")
	require.Contains(t, src, "baseline")

	rate, _ = openLoopRate(options{}, &report{}, nil)
	require.Zero(t, rate)
}
