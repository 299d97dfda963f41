package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The overload phase (issue 26, point 7) offers a flash sale: an open loop
// at overloadFactor × the closed-loop peak for -overload, then
// overloadTailFactor × peak for -overload-tail, on a timeline fixed in
// advance. Unlike the open-loop phase it only POSTs: whether an
// acknowledged order finished is read afterwards from each order's
// GET /orders/{id} (its status, and its last event's time for "terminal
// by the end of the tail"), so that the generator holds no long-polls and
// its in-flight cap bounds sockets and goroutines alone.
//
// The generator is a fixed pool of workers. An order whose due time finds
// no idle worker is not sent, and counted apart: the client's own limit
// is then visible instead of being folded into the server's latency, and
// the generator can never become an unbounded queue on a 2-core machine
// shared with the cluster.

const (
	overloadFactor     = 3.0
	overloadTailFactor = 0.5
	// overloadRequestTimeout bounds one POST: above the API's own request
	// timeout (10 s), so that its 504 is seen rather than a client cut.
	overloadRequestTimeout = 15 * time.Second
	// overloadSweepWorkers read the acknowledged orders' statuses.
	overloadSweepWorkers = 16
	// overloadSweepBound bounds the whole status sweep.
	overloadSweepBound = 2 * time.Minute
	// rssSampleEvery is how often the processes' resident sets are read.
	rssSampleEvery = 250 * time.Millisecond
	// reasonOverloaded is the reason of a shed answer (503 UNAVAILABLE).
	reasonOverloaded = "OVERLOADED"
	// metricShedSeconds is the APIs' histogram of the time a shed answer
	// took, by the server's own clock.
	metricShedSeconds = "shoppingmall_http_shed_seconds"
	// metricUnavailable counts the APIs' 503/504 answers by reason.
	metricUnavailable = "shoppingmall_unavailable_total"
	labelReason       = "reason"
)

// overloadSegment is one stretch of the timeline at a fixed rate.
type overloadSegment struct {
	Name     string
	Rate     float64
	Duration time.Duration
}

// overloadPlan is the whole phase.
type overloadPlan struct {
	// Segments run back to back: the burst, then the tail.
	Segments []overloadSegment
	// Workers is the generator's pool: at most that many POSTs in flight.
	Workers int
	// MaxOrders bounds the timeline's orders.
	MaxOrders int64
}

// overloadPlanFor is the burst at overloadFactor × peak, then the tail
// at overloadTailFactor × peak.
func overloadPlanFor(peak float64, burst, tail time.Duration, workers int, maxOrders int64) overloadPlan {
	p := overloadPlan{Workers: workers, MaxOrders: maxOrders}
	p.Segments = append(p.Segments, overloadSegment{Name: "burst", Rate: overloadFactor * peak, Duration: burst})
	if tail > 0 {
		p.Segments = append(p.Segments, overloadSegment{Name: "tail", Rate: overloadTailFactor * peak, Duration: tail})
	}
	return p
}

// total is how many orders the timeline holds.
func (p overloadPlan) total() int64 {
	n := int64(0)
	for _, s := range p.Segments {
		n += segmentCount(s)
	}
	return n
}

// length is the timeline's length.
func (p overloadPlan) length() time.Duration {
	var d time.Duration
	for _, s := range p.Segments {
		d += s.Duration
	}
	return d
}

// segmentCount is the orders of s: i/rate < duration, as scheduledCount
// counts them, without walking them one by one.
func segmentCount(s overloadSegment) int64 {
	if s.Rate <= 0 || s.Duration <= 0 {
		return 0
	}
	n := int64(s.Rate * s.Duration.Seconds())
	for n > 0 && dueAt(n-1, s.Rate) >= s.Duration {
		n--
	}
	for dueAt(n, s.Rate) < s.Duration {
		n++
	}
	return n
}

func (p overloadPlan) validate() error {
	switch {
	case len(p.Segments) == 0 || p.Segments[0].Rate <= 0 || p.Segments[0].Duration <= 0:
		return errors.New("overload: no burst to run")
	case p.Workers <= 0:
		return errors.New("overload: no workers")
	case p.MaxOrders > 0 && p.total() > p.MaxOrders:
		return fmt.Errorf("overload: the timeline holds %d orders, above the bound of %d (-overload-max-orders)", p.total(), p.MaxOrders)
	}
	return nil
}

// Outcomes of one POST /orders.
const (
	outcomeAdmitted = "admitted" // 201 or 200: the order is acknowledged
	outcomeShed     = "shed"     // 503 UNAVAILABLE, reason OVERLOADED
	outcomeRefused  = "refused"  // any other HTTP answer
	outcomeError    = "error"    // no HTTP answer (transport error, client timeout)
)

// overloadAnswer is what one POST got.
type overloadAnswer struct {
	Outcome string
	// Key names the answer for the breakdown: "201", "503 OVERLOADED",
	// "500 INTERNAL", "transport error".
	Key     string
	OrderID string
	// RetryAfterOK: a shed answer carried a Retry-After of 1–3 s.
	RetryAfterOK bool
	Err          string
}

// overloadResult is one sent order.
type overloadResult struct {
	overloadAnswer
	Segment int
	// Due is the order's place on the timeline; Lag how late it was
	// handed to a worker.
	Due, Lag time.Duration
	// FromDue is due → answer; FromSent is sent → answer.
	FromDue, FromSent time.Duration
}

// overloadRun is what the generator saw.
type overloadRun struct {
	// Start is the timeline's origin, by the wall clock that the
	// workflows' event times also read.
	Start   time.Time
	Results []overloadResult
	// Per segment: scheduled, handed to a worker, found no idle worker.
	Scheduled, Sent, NotSent []int64
	// Missed were never reached: the bench was interrupted.
	Missed       int64
	PeakInFlight int64
	MaxLag       time.Duration
	Elapsed      time.Duration
}

type overloadJob struct {
	segment int
	due     time.Time
	dueOff  time.Duration
}

// runOverload hands order i to an idle worker at its due time, or counts
// it not sent when none is idle, and returns once every sent order was
// answered. do sends one order and must give up by its context.
func runOverload(ctx context.Context, plan overloadPlan, report progress, do func(ctx context.Context, worker, segment int) overloadAnswer) overloadRun {
	nseg := len(plan.Segments)
	run := overloadRun{Scheduled: make([]int64, nseg), Sent: make([]int64, nseg), NotSent: make([]int64, nseg)}
	for i, s := range plan.Segments {
		run.Scheduled[i] = segmentCount(s)
	}
	total := plan.total()
	// A worker is idle while its token is in idle: taking one at the due
	// time decides at once, whatever the scheduler has run so far, and the
	// job then waits in jobs only for the worker that gave the token back.
	idle := make(chan struct{}, plan.Workers)
	for range plan.Workers {
		idle <- struct{}{}
	}
	jobs := make(chan overloadJob, plan.Workers)
	var busy, peak, admitted, shed, other atomic.Int64
	var sentTotal, notSentTotal atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	run.Start = time.Now()
	start := run.Start
	for w := 0; w < plan.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []overloadResult
			for j := range jobs {
				sent := time.Now()
				a := do(ctx, w, j.segment)
				now := time.Now()
				busy.Add(-1)
				idle <- struct{}{}
				switch a.Outcome {
				case outcomeAdmitted:
					admitted.Add(1)
				case outcomeShed:
					shed.Add(1)
				default:
					other.Add(1)
				}
				mine = append(mine, overloadResult{overloadAnswer: a, Segment: j.segment, Due: j.dueOff,
					Lag: sent.Sub(j.due), FromDue: now.Sub(j.due), FromSent: now.Sub(sent)})
			}
			mu.Lock()
			run.Results = append(run.Results, mine...)
			mu.Unlock()
		}(w)
	}

	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if report == quiet {
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case now := <-t.C:
				logf("overload %5.1fs sent=%d not-sent=%d admitted=%d shed=%d other=%d in-flight=%d",
					now.Sub(start).Seconds(), sentTotal.Load(), notSentTotal.Load(), admitted.Load(), shed.Load(), other.Load(), busy.Load())
			}
		}
	}()

	var offset time.Duration
	done := int64(0)
dispatch:
	for si, s := range plan.Segments {
		for k := int64(0); k < run.Scheduled[si]; k++ {
			off := offset + dueAt(k, s.Rate)
			due := start.Add(off)
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					break dispatch
				case <-t.C:
				}
			}
			if ctx.Err() != nil {
				break dispatch
			}
			done++
			select {
			case <-idle:
				// Counted busy before the hand-off, so that the worker's
				// decrement never runs ahead of it.
				if n := busy.Add(1); n > peak.Load() {
					peak.Store(n)
				}
				jobs <- overloadJob{segment: si, due: due, dueOff: off}
				run.Sent[si]++
				sentTotal.Add(1)
				run.MaxLag = max(run.MaxLag, time.Since(due))
			default:
				run.NotSent[si]++
				notSentTotal.Add(1)
			}
		}
		offset += s.Duration
	}
	run.Missed = total - done
	close(jobs)
	wg.Wait()
	close(stopProgress)
	<-progressDone
	run.Elapsed = time.Since(start)
	run.PeakInFlight = peak.Load()
	return run
}

// classifyAnswer reads one POST /orders answer. A 503 whose error reason
// is OVERLOADED is shed, whatever else it says.
func classifyAnswer(code int, h http.Header, body []byte, err error) overloadAnswer {
	if err != nil {
		return overloadAnswer{Outcome: outcomeError, Key: "transport error", Err: err.Error()}
	}
	if code == http.StatusCreated || code == http.StatusOK {
		var rep orderReply
		a := overloadAnswer{Outcome: outcomeAdmitted, Key: strconv.Itoa(code)}
		if jerr := json.Unmarshal(body, &rep); jerr != nil || rep.OrderID == "" {
			a.Err = fmt.Sprintf("%d without an order id", code)
		}
		a.OrderID = rep.OrderID
		return a
	}
	// A body that is not problem details keys the answer by its status
	// alone.
	var p client.ErrorBody
	if eb, perr := client.DecodeError(body); perr == nil {
		p = *eb
	}
	key := strconv.Itoa(code)
	switch {
	case p.Reason != "":
		key += " " + p.Reason
	case p.Code != "":
		key += " " + p.Code
	}
	if code == http.StatusServiceUnavailable && p.Reason == reasonOverloaded {
		ra, perr := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
		return overloadAnswer{Outcome: outcomeShed, Key: key, RetryAfterOK: perr == nil && ra >= 1 && ra <= 3}
	}
	return overloadAnswer{Outcome: outcomeRefused, Key: key}
}

// overloadClient is the status sweep's client: one idle connection per
// worker and API, so that the sweep reuses its sockets instead of
// churning through ephemeral ports.
func overloadClient(workers int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: overloadRequestTimeout}
}

// overloadStart POSTs order n of the mix to its API, on the worker's own
// connections, and classifies the answer; it never waits for the outcome.
func (l *load) overloadStart(ctx context.Context, p *poster, n int64) overloadAnswer {
	_, body := l.startRequest(n)
	b, err := json.Marshal(body)
	if err != nil {
		return classifyAnswer(0, nil, nil, err)
	}
	code, h, raw, err := p.post(ctx, int(n%int64(len(l.cfg.APIs))), b)
	return classifyAnswer(code, h, raw, err)
}

// overloadPosters are the workers' posters, one each, over apis.
func overloadPosters(apis []string, workers int) ([]*poster, error) {
	ps := make([]*poster, workers)
	for i := range ps {
		p, err := newPoster(apis, "/orders", overloadRequestTimeout)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}

// loopbackOnly refuses a base URL that does not name a loopback host: the
// phase offers three times what the cluster can serve and must never
// leave the machine.
func loopbackOnly(bases []string) error {
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			return fmt.Errorf("overload: %q: %w", b, err)
		}
		h := u.Hostname()
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("overload: %s is not a loopback address", b)
		}
	}
	return nil
}

// sweptOrder is one acknowledged order's status, read after the phase.
type sweptOrder struct {
	Status string
	// UpdatedAtUnixMs is the last event's time: a terminal order's
	// terminal event.
	UpdatedAtUnixMs int64
	// Err says why the status could not be read.
	Err string
}

func (s sweptOrder) terminal() bool {
	return s.Err == "" && (s.Status == "Confirmed" || s.Status == "Failed")
}

// sweepOrders reads every id's GET /orders/{id} with a few workers,
// retrying a failed read a few times.
func sweepOrders(ctx context.Context, hc *http.Client, apis []string, ids []string) map[string]sweptOrder {
	ctx, cancel := context.WithTimeout(ctx, overloadSweepBound)
	defer cancel()
	out := make(map[string]sweptOrder, len(ids))
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < overloadSweepWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := readOrder(ctx, hc, apis[i%len(apis)], ids[i])
				for try := 1; try < 3 && s.Err != "" && ctx.Err() == nil; try++ {
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					s = readOrder(ctx, hc, apis[(i+try)%len(apis)], ids[i])
				}
				mu.Lock()
				out[ids[i]] = s
				mu.Unlock()
			}
		}()
	}
	for i := range ids {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			out[id] = sweptOrder{Err: "not read: " + context.Cause(ctx).Error()}
		}
	}
	return out
}

func readOrder(ctx context.Context, hc *http.Client, base, id string) sweptOrder {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/orders/"+url.PathEscape(id), nil)
	if err != nil {
		return sweptOrder{Err: err.Error()}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return sweptOrder{Err: err.Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return sweptOrder{Err: err.Error()}
	}
	if resp.StatusCode != http.StatusOK {
		return sweptOrder{Err: fmt.Sprintf("GET /orders/%s: %d %s", id, resp.StatusCode, strings.TrimSpace(string(raw)))}
	}
	var rep struct {
		State struct {
			Status          string `json:"status"`
			UpdatedAtUnixMs int64  `json:"updatedAtUnixMs"`
		} `json:"state"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		return sweptOrder{Err: fmt.Sprintf("GET /orders/%s: %v", id, err)}
	}
	return sweptOrder{Status: rep.State.Status, UpdatedAtUnixMs: rep.State.UpdatedAtUnixMs}
}

// rssFigure is one process's resident set, in MiB.
type rssFigure struct {
	// PeakSampledMiB is the highest VmRSS sampled during the phase, over
	// every incarnation of the process.
	PeakSampledMiB float64 `json:"peakSampledMiB"`
	// HWMMiB is the highest VmHWM read, over every incarnation: each
	// one's peak since it started, as of its last sample, which catches
	// what fell between samples (and may predate the phase).
	HWMMiB float64 `json:"hwmMiB"`
}

// rssSampler reads VmRSS and VmHWM of pids() every rssSampleEvery until
// finish.
type rssSampler struct {
	pids      func() map[string]int
	mu        sync.Mutex
	peak, hwm map[string]uint64
	stop      chan struct{}
	done      chan struct{}
}

func startRSS(pids func() map[string]int) *rssSampler {
	s := &rssSampler{pids: pids, peak: map[string]uint64{}, hwm: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssSampleEvery)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	for name, pid := range s.pids() {
		st, err := procStatus(pid)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.peak[name] = max(s.peak[name], st.VmRSS)
		s.hwm[name] = max(s.hwm[name], st.VmHWM)
		s.mu.Unlock()
	}
}

// finish stops sampling, takes a last sample and returns the figures.
func (s *rssSampler) finish() map[string]rssFigure {
	close(s.stop)
	<-s.done
	s.sample()
	out := map[string]rssFigure{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, b := range s.peak {
		out[name] = rssFigure{PeakSampledMiB: mib(b), HWMMiB: mib(s.hwm[name])}
	}
	return out
}

func procStatus(pid int) (procfs.ProcStatus, error) {
	var p procfs.Proc
	var err error
	if pid == 0 {
		p, err = procfs.Self()
	} else {
		p, err = procfs.NewProc(pid)
	}
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return p.NewStatus()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// selfFenceLine matches a member's "self-fenced: <why>" log line
// (actors/node's slog JSON).
var selfFenceLine = localcluster.MatchFunc(`"msg":"self-fenced`, func(l string) bool {
	return strings.Contains(l, `"msg":"self-fenced`)
})

// overloadCluster is what the phase needs of the cluster, so that it can
// be driven without one.
type overloadCluster struct {
	APIs       []string
	APIMetrics []string
	// Logs are the node logs searched for self-fences, by node.
	Logs map[string]string
	// PIDs are the current processes, by name (the bench's own under
	// runnerCPU, as PID 0).
	PIDs func() map[string]int
	// Restarts lists the supervisor's restarts so far, oldest first.
	Restarts func() []string
}

// clusterForOverload reads c's nodes, Redis and the bench itself.
func clusterForOverload(c *localcluster.Cluster, apis []string) overloadCluster {
	nodes := append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...)
	oc := overloadCluster{APIs: apis, Logs: map[string]string{}}
	for _, n := range localcluster.APINodes {
		oc.APIMetrics = append(oc.APIMetrics, c.MetricsURL(n))
	}
	for _, n := range nodes {
		oc.Logs[n] = c.LogPath(n)
	}
	oc.PIDs = func() map[string]int {
		m := map[string]int{runnerCPU: 0}
		for _, n := range nodes {
			if pid := c.PID(n); pid > 0 && c.Running(n) {
				m[n] = pid
			}
		}
		rp := c.RedisPIDs()
		for i, pid := range rp {
			name := "redis-server"
			if len(rp) > 1 {
				name = fmt.Sprintf("redis-server-%d", i)
			}
			m[name] = pid
		}
		return m
	}
	oc.Restarts = func() []string {
		var out []string
		for _, n := range nodes {
			for _, r := range c.Restarts(n) {
				out = append(out, r.String())
			}
		}
		return out
	}
	return oc
}

// overloadConfig is the phase as the flags set it.
type overloadConfig struct {
	Burst, Tail, Settle time.Duration
	Workers             int
	MaxOrders           int64
	// Generator is generatorOurs (runOverload) or generatorVegeta
	// (runVegeta); empty is ours.
	Generator string
}

// runOverloadPhase runs the phase against oc at multiples of peak: the
// timeline, then Settle for the orders to finish, then the status sweep,
// with the server's figures scraped around it all.
func (l *load) runOverloadPhase(ctx context.Context, cfg overloadConfig, peak float64, oc overloadCluster) (*overloadStats, error) {
	plan := overloadPlanFor(peak, cfg.Burst, cfg.Tail, cfg.Workers, cfg.MaxOrders)
	if err := plan.validate(); err != nil {
		return nil, err
	}
	if err := loopbackOnly(append(append([]string{}, oc.APIs...), oc.APIMetrics...)); err != nil {
		return nil, err
	}
	hc := overloadClient(overloadSweepWorkers)
	defer hc.CloseIdleConnections()
	posters, err := overloadPosters(oc.APIs, cfg.Workers)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range posters {
			p.close()
		}
	}()

	logOffsets := map[string]int64{}
	for n, p := range oc.Logs {
		logOffsets[n], _ = localcluster.LogSize(p)
	}
	restartsBefore := len(oc.Restarts())
	metricsBefore := scrapeAll(ctx, oc.APIMetrics)
	cpuBefore, _ := cpuSeconds(0)
	machineBefore, _ := machineTimes()
	rss := startRSS(oc.PIDs)

	for _, s := range plan.Segments {
		logf("overload %s: %.1f orders/s for %s", s.Name, s.Rate, s.Duration)
	}
	logf("overload: %d orders on the timeline from %s generator, at most %d in flight; POSTs only, statuses read %s after it ends", plan.total(), generatorName(cfg.Generator), plan.Workers, cfg.Settle)
	queues := startSockQueues(oc.APIs)
	var run overloadRun
	switch cfg.Generator {
	case generatorVegeta:
		run, err = runVegeta(ctx, plan, oc.APIs, func(int64) ([]byte, error) {
			_, body := l.startRequest(l.seq.Add(1))
			return json.Marshal(body)
		}, reportProgress)
		if err != nil {
			rss.finish()
			queues.finish()
			return nil, err
		}
	default:
		run = runOverload(ctx, plan, reportProgress, func(ctx context.Context, w, _ int) overloadAnswer {
			return l.overloadStart(ctx, posters[w], l.seq.Add(1))
		})
	}
	sockQueues := queues.finish()
	cpuAfter, _ := cpuSeconds(0)
	machineAfter, _ := machineTimes()
	if ctx.Err() != nil {
		rss.finish()
		return nil, ctx.Err()
	}
	tailEnd := run.Start.Add(plan.length())
	if wait := time.Until(tailEnd.Add(cfg.Settle)); wait > 0 {
		logf("overload: waiting %s for the acknowledged orders to finish", wait.Round(time.Second))
		select {
		case <-ctx.Done():
			rss.finish()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	var ids []string
	for _, r := range run.Results {
		if r.Outcome == outcomeAdmitted && r.OrderID != "" {
			ids = append(ids, r.OrderID)
		}
	}
	logf("overload: reading the status of %d acknowledged orders", len(ids))
	swept := sweepOrders(ctx, hc, oc.APIs, ids)
	metricsAfter := scrapeAll(ctx, oc.APIMetrics)
	figures := rss.finish()

	fences := 0
	for n, p := range oc.Logs {
		if k, err := localcluster.CountLines(p, logOffsets[n], selfFenceLine); err == nil {
			fences += k
		}
	}
	restarts := oc.Restarts()
	if restartsBefore <= len(restarts) {
		restarts = restarts[restartsBefore:]
	}
	in := overloadInput{
		Generator: generatorName(cfg.Generator), Plan: plan, Peak: peak, Run: run, Swept: swept, TailEnd: tailEnd, Settle: cfg.Settle,
		ShedServer: shedHistogramDelta(metricsBefore, metricsAfter), Unavailable: counterDeltaBy(metricsBefore, metricsAfter, metricUnavailable, labelReason),
		SelfFences: fences, Restarts: restarts, RSS: figures, SocketQueues: sockQueues,
		RunnerCPUSeconds: cpuAfter - cpuBefore, Steal: stealBetween(machineBefore, machineAfter),
	}
	return buildOverload(in), nil
}

// scrapeAll scrapes every url; one that fails is left out.
func scrapeAll(ctx context.Context, urls []string) map[string]scraped {
	out := map[string]scraped{}
	for _, u := range urls {
		if m, err := scrapeMetrics(ctx, u); err == nil {
			out[u] = m
		}
	}
	return out
}
