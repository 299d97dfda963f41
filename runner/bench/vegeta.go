package main

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The overload phase's second generator (issue 49, point 3): vegeta's
// attacker, a load generator that is not ours, on the same timeline. Ours
// (runOverload) is a hand-written HTTP/1.1 poster that drops an order due
// while no worker is idle; vegeta is net/http with its own worker pool,
// which grows up to MaxWorkers while its hits are answered slowly and then
// holds back the pacer, so that an order is late rather than dropped. Its
// figures are the ones a client of the API would measure with a common
// tool, and its cost on the shared cores is what such a client costs.

// generator names the overload phase's load generator.
const (
	generatorOurs   = "ours"
	generatorVegeta = "vegeta"
)

// planPacer is an overload plan's timeline as a vegeta.Pacer: hit n is due
// at the plan's n-th due time, exactly the schedule runOverload follows.
type planPacer struct {
	plan overloadPlan
	// ends[i] is the count of orders of segments 0..i; starts[i] the
	// offset segment i begins at.
	ends   []int64
	starts []time.Duration
}

func newPlanPacer(plan overloadPlan) planPacer {
	p := planPacer{plan: plan}
	var n int64
	var off time.Duration
	for _, s := range plan.Segments {
		p.starts = append(p.starts, off)
		n += segmentCount(s)
		off += s.Duration
		p.ends = append(p.ends, n)
	}
	return p
}

// due is hit n's segment and offset from the timeline's origin; ok is
// false past the timeline's last order.
func (p planPacer) due(n int64) (segment int, off time.Duration, ok bool) {
	i := sort.Search(len(p.ends), func(i int) bool { return p.ends[i] > n })
	if i == len(p.ends) {
		return 0, 0, false
	}
	k := n
	if i > 0 {
		k -= p.ends[i-1]
	}
	return i, p.starts[i] + dueAt(k, p.plan.Segments[i].Rate), true
}

// Pace implements vegeta.Pacer: the wait until the next hit is due, and
// stop once every order of the timeline was handed out.
func (p planPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	_, off, ok := p.due(int64(hits))
	if !ok {
		return 0, true
	}
	return max(0, off-elapsed), false
}

// Rate implements vegeta.Pacer: the rate of the segment elapsed falls in.
func (p planPacer) Rate(elapsed time.Duration) float64 {
	for i, s := range p.plan.Segments {
		if elapsed < p.starts[i]+s.Duration {
			return s.Rate
		}
	}
	return 0
}

// vegetaRun is what vegeta saw, as runOverload's overloadRun: each result
// keyed to its due time by its sequence number, which vegeta hands out in
// the order of the pacer's ticks. Vegeta never drops an order (NotSent
// stays 0); one it could not send on time shows as Lag. The most requests
// in flight at once are counted from the results' intervals.
func vegetaRun(plan overloadPlan, start time.Time, results []*vegeta.Result, elapsed time.Duration) overloadRun {
	p := newPlanPacer(plan)
	nseg := len(plan.Segments)
	run := overloadRun{Start: start, Elapsed: elapsed, Scheduled: make([]int64, nseg), Sent: make([]int64, nseg), NotSent: make([]int64, nseg)}
	for i, s := range plan.Segments {
		run.Scheduled[i] = segmentCount(s)
	}
	type edge struct {
		at    time.Time
		delta int64
	}
	edges := make([]edge, 0, 2*len(results))
	for _, r := range results {
		seg, off, ok := p.due(int64(r.Seq))
		// A hit without a method failed in the targeter: never sent.
		if !ok || (r.Code == 0 && r.Method == "") {
			continue
		}
		dueAt := start.Add(off)
		end := r.Timestamp.Add(r.Latency)
		var err error
		if r.Code == 0 {
			err = errors.New(r.Error)
		}
		a := classifyAnswer(int(r.Code), r.Headers, r.Body, err)
		run.Results = append(run.Results, overloadResult{overloadAnswer: a, Segment: seg, Due: off,
			Lag: r.Timestamp.Sub(dueAt), FromDue: end.Sub(dueAt), FromSent: r.Latency})
		run.Sent[seg]++
		run.MaxLag = max(run.MaxLag, r.Timestamp.Sub(dueAt))
		edges = append(edges, edge{r.Timestamp, 1}, edge{end, -1})
	}
	// Ends sort before starts at the same instant, so that back-to-back
	// requests on one worker never count twice.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	var cur int64
	for _, e := range edges {
		cur += e.delta
		run.PeakInFlight = max(run.PeakInFlight, cur)
	}
	sent := int64(0)
	for _, n := range run.Sent {
		sent += n
	}
	run.Missed = plan.total() - sent
	return run
}

// runVegeta offers the plan's timeline through vegeta's attacker over
// apis, round robin, each hit's body from body(n); at most plan.Workers
// requests in flight, each cut at overloadRequestTimeout. It returns
// once every hit was answered, or soon after ctx ends. Orders it never
// sent (a body that could not be built stops the attack) are Missed.
func runVegeta(ctx context.Context, plan overloadPlan, apis []string, body func(n int64) ([]byte, error), report progress) (overloadRun, error) {
	if len(apis) == 0 {
		return overloadRun{}, errors.New("overload: vegeta: no API to attack")
	}
	// Vegeta's workers call the targeter concurrently.
	var next atomic.Int64
	targeter := func(t *vegeta.Target) error {
		n := next.Add(1) - 1
		b, err := body(n)
		if err != nil {
			return err
		}
		t.Method, t.URL, t.Body = http.MethodPost, apis[n%int64(len(apis))]+"/orders", b
		t.Header = http.Header{"Content-Type": []string{"application/json"}}
		return nil
	}
	atk := vegeta.NewAttacker(vegeta.Timeout(overloadRequestTimeout), vegeta.MaxWorkers(uint64(plan.Workers)), vegeta.MaxBody(1<<20))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var results []*vegeta.Result
	var admitted, other int
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
	ch := atk.Attack(targeter, newPlanPacer(plan), 0, "overload")
	for done := false; !done; {
		select {
		case r, ok := <-ch:
			if !ok {
				done = true
				break
			}
			results = append(results, r)
			if r.Code == http.StatusCreated || r.Code == http.StatusOK {
				admitted++
			} else {
				other++
			}
		case now := <-tick.C:
			if report != quiet {
				logf("overload (vegeta) %5.1fs answered=%d admitted=%d other=%d", now.Sub(start).Seconds(), len(results), admitted, other)
			}
		}
	}
	if ctx.Err() != nil {
		return overloadRun{}, ctx.Err()
	}
	return vegetaRun(plan, start, results, time.Since(start)), nil
}
