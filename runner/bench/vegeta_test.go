package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The pacer hands out exactly runOverload's timeline: the same count per
// segment, each order at the same offset, and stops after the last.
func TestPlanPacerFollowsTheOverloadTimeline(t *testing.T) {
	plan := overloadPlanFor(417.3, 2*time.Second, time.Second, 8, 0)
	p := newPlanPacer(plan)
	var n int64
	var off time.Duration
	for si, s := range plan.Segments {
		for k := int64(0); k < segmentCount(s); k++ {
			seg, got, ok := p.due(n)
			require.True(t, ok, "order %d", n)
			require.Equal(t, si, seg, "order %d", n)
			require.Equal(t, off+dueAt(k, s.Rate), got, "order %d", n)
			n++
		}
		off += s.Duration
	}
	require.Equal(t, plan.total(), n)
	_, _, ok := p.due(n)
	require.False(t, ok, "past the timeline")
	_, stop := p.Pace(0, uint64(n))
	require.True(t, stop, "the pacer stops after the last order")

	_, due5, _ := p.due(5)
	wait, stop := p.Pace(due5-time.Millisecond, 5)
	require.False(t, stop)
	require.Equal(t, time.Millisecond, wait, "waits until the order is due")
	wait, _ = p.Pace(due5+time.Second, 5)
	require.Zero(t, wait, "a late order goes at once")

	require.InDelta(t, 3*417.3, p.Rate(time.Second), 1e-9)
	require.InDelta(t, 0.5*417.3, p.Rate(2500*time.Millisecond), 1e-9)
	require.Zero(t, p.Rate(3*time.Second))
}

// Each result is classified as ours would be, keyed to its segment and due
// time by its sequence number; the most in flight comes from the
// intervals, back-to-back requests counted once.
func TestVegetaRunReadsResultsAsOverloadResults(t *testing.T) {
	plan := overloadPlan{Segments: []overloadSegment{{Name: "burst", Rate: 10, Duration: 300 * time.Millisecond}, {Name: "tail", Rate: 10, Duration: 200 * time.Millisecond}}, Workers: 4}
	start := time.Unix(1000, 0)
	shedHdr := http.Header{"Retry-After": []string{"2"}}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	results := []*vegeta.Result{
		{Seq: 0, Code: 201, Timestamp: start, Latency: ms(50), Body: []byte(`{"orderId":"o-1"}`)},
		{Seq: 1, Code: 503, Timestamp: start.Add(ms(120)), Latency: ms(30), Headers: shedHdr, Body: []byte(problemBody(503, "UNAVAILABLE", "OVERLOADED", "x"))},
		// Sent at the instant the shed was answered: not two in flight.
		{Seq: 2, Method: "POST", Code: 0, Timestamp: start.Add(ms(150)), Latency: ms(15000), Error: "Post: context deadline exceeded"},
		{Seq: 3, Code: 503, Timestamp: start.Add(ms(300)), Latency: ms(10), Body: []byte(problemBody(503, "UNAVAILABLE", "NO_ELIGIBLE_MEMBER", "x"))},
		{Seq: 4, Code: 200, Timestamp: start.Add(ms(400)), Latency: ms(1), Body: []byte(`{"orderId":"o-2"}`)},
		// The targeter failed: never sent (no method), so missed.
		{Seq: 5, Code: 0, Timestamp: start.Add(ms(410)), Error: "no more"},
	}
	run := vegetaRun(plan, start, results, time.Second)
	require.Equal(t, []int64{3, 2}, run.Scheduled)
	require.Equal(t, []int64{3, 2}, run.Sent)
	require.Equal(t, []int64{0, 0}, run.NotSent)
	require.Zero(t, run.Missed, "seq 5 is past the timeline")
	require.Len(t, run.Results, 5)
	byKey := map[string]overloadResult{}
	for _, r := range run.Results {
		byKey[r.Key] = r
	}
	require.Equal(t, outcomeAdmitted, byKey["201"].Outcome)
	require.Equal(t, "o-1", byKey["201"].OrderID)
	require.Equal(t, outcomeShed, byKey["503 OVERLOADED"].Outcome)
	require.True(t, byKey["503 OVERLOADED"].RetryAfterOK)
	require.Equal(t, ms(20), byKey["503 OVERLOADED"].Lag, "due at 100 ms, sent at 120")
	require.Equal(t, ms(50), byKey["503 OVERLOADED"].FromDue)
	require.Equal(t, ms(30), byKey["503 OVERLOADED"].FromSent)
	require.Equal(t, outcomeError, byKey["transport error"].Outcome)
	require.Equal(t, outcomeRefused, byKey["503 NO_ELIGIBLE_MEMBER"].Outcome)
	require.Equal(t, 1, byKey["503 NO_ELIGIBLE_MEMBER"].Segment)
	require.Equal(t, 1, byKey["200"].Segment)
	require.Equal(t, ms(20), run.MaxLag, "the shed's")
	require.EqualValues(t, 2, run.PeakInFlight, "the timed-out request and seq 3")

	// Seq 4 never sent: one fewer sent in the tail, one missed.
	results[4].Method, results[4].Code, results[4].Body = "", 0, nil
	run = vegetaRun(plan, start, results, time.Second)
	require.Equal(t, []int64{3, 1}, run.Sent)
	require.EqualValues(t, 1, run.Missed)
	require.Len(t, run.Results, 4)
}

// Against an API over loopback, vegeta sends every order of the timeline,
// each body built once, round robin over the APIs, and its answers are
// read as ours.
func TestRunVegetaAgainstAnAPI(t *testing.T) {
	a, b := &fakeOverloadAPI{state: map[string]string{}}, &fakeOverloadAPI{state: map[string]string{}}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	t.Cleanup(sa.Close)
	t.Cleanup(sb.Close)
	l := newLoad(loadConfig{APIs: []string{sa.URL, sb.URL}, Concurrency: 1, RunID: "t"})
	plan := overloadPlan{Segments: []overloadSegment{{Name: "burst", Rate: 400, Duration: 250 * time.Millisecond}, {Name: "tail", Rate: 100, Duration: 100 * time.Millisecond}}, Workers: 8}
	run, err := runVegeta(context.Background(), plan, []string{sa.URL, sb.URL}, func(int64) ([]byte, error) {
		_, body := l.startRequest(l.seq.Add(1))
		return json.Marshal(body)
	}, quiet)
	require.NoError(t, err)
	require.Equal(t, []int64{100, 10}, run.Scheduled)
	require.Equal(t, run.Scheduled, run.Sent)
	require.Zero(t, run.Missed)
	require.EqualValues(t, 110, a.posts.Load()+b.posts.Load())
	require.EqualValues(t, 55, a.posts.Load(), "round robin")
	require.LessOrEqual(t, run.PeakInFlight, int64(plan.Workers))
	got := map[string]int{}
	for _, r := range run.Results {
		got[r.Outcome]++
		require.GreaterOrEqual(t, r.FromDue, r.FromSent)
	}
	require.Positive(t, got[outcomeAdmitted])
	require.Positive(t, got[outcomeShed])
	require.Positive(t, got[outcomeRefused])
	require.Equal(t, 110, got[outcomeAdmitted]+got[outcomeShed]+got[outcomeRefused], "no transport errors")
}

// A body that cannot be built stops the attack; what was not sent is
// Missed, not lost silently.
func TestRunVegetaCountsWhatItNeverSent(t *testing.T) {
	api := &fakeOverloadAPI{state: map[string]string{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	plan := overloadPlan{Segments: []overloadSegment{{Name: "burst", Rate: 200, Duration: 200 * time.Millisecond}}, Workers: 4}
	run, err := runVegeta(context.Background(), plan, []string{srv.URL}, func(n int64) ([]byte, error) {
		if n >= 10 {
			return nil, errors.New("no more")
		}
		return []byte(`{}`), nil
	}, quiet)
	require.NoError(t, err)
	require.Positive(t, run.Missed)
	require.EqualValues(t, plan.total()-run.Missed, len(run.Results))
}
