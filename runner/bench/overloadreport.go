package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// The overload phase's goals (issue 26, point 7; the shed p99 is point
// 1's). Printed and written with met / not met; the bench asserts none.
const (
	goalGoodputOverPeak = 0.8
	goalShedP99Ms       = 10.0
	// goalShedClientP99Ms is issue 49's point 3: a refusal is only worth
	// sending fast if it reaches the client fast.
	goalShedClientP99Ms = 1000.0
)

// overloadInput is everything the phase's figures are computed from.
type overloadInput struct {
	// Generator names the load generator (generatorOurs, generatorVegeta).
	Generator string
	Plan      overloadPlan
	Peak      float64
	Run       overloadRun
	Swept     map[string]sweptOrder
	// TailEnd is the end of the timeline; Settle how long after it the
	// statuses were read.
	TailEnd time.Time
	Settle  time.Duration
	// ShedServer is the APIs' shed histogram over the phase; nil when
	// they do not expose it.
	ShedServer  *histDelta
	Unavailable map[string]float64
	SelfFences  int
	Restarts    []string
	RSS         map[string]rssFigure
	// SocketQueues is where requests and answers waited in the kernel
	// over the timeline; nil when /proc/net/tcp could not be read.
	SocketQueues *sockQueueStats
	// RunnerCPUSeconds is the bench's own CPU while the timeline ran.
	RunnerCPUSeconds float64
	Steal            *steal
}

type overloadSegmentStats struct {
	Name       string  `json:"name"`
	RatePerSec float64 `json:"ratePerSec"`
	// RateOverPeak is the rate over the closed-loop peak.
	RateOverPeak float64 `json:"rateOverPeak"`
	DurationSec  float64 `json:"durationSec"`
	Scheduled    int64   `json:"scheduled"`
	Sent         int64   `json:"sent"`
	// NotSent found no idle worker at their due time: the generator's
	// own limit, not an answer of the cluster.
	NotSent  int64 `json:"notSent"`
	Admitted int   `json:"admitted"`
	Shed     int   `json:"shed"`
	Refused  int   `json:"refused"`
	Errors   int   `json:"errors"`
}

// overloadStats is the overload phase in the report.
type overloadStats struct {
	Method string `json:"method"`
	// Generator is the load generator: ours, or vegeta's attacker.
	Generator string `json:"generator"`
	// PeakPerSec is the closed-loop throughput the rates are multiples of.
	PeakPerSec float64                `json:"peakPerSec"`
	Segments   []overloadSegmentStats `json:"segments"`
	// Workers is the generator's pool; PeakInFlight the most POSTs it
	// had in flight at once.
	Workers       int     `json:"workers"`
	PeakInFlight  int64   `json:"peakInFlight"`
	MaxStartLagMs float64 `json:"maxStartLagMs"`
	Missed        int64   `json:"missed,omitempty"`
	ElapsedSec    float64 `json:"elapsedSec"`
	SettleSec     float64 `json:"settleSec"`
	// Answers counts every answer by status and reason (or code).
	Answers map[string]int `json:"answers"`
	// AdmittedStartOrderMs is the admitted POSTs' latency from their due
	// time (the burst's and the tail's).
	AdmittedStartOrderMs hdrPct `json:"admittedStartOrderMs"`
	Shed                 struct {
		Count int `json:"count"`
		// ClientMs is sent → answer as the generator saw it.
		ClientMs hdrPct `json:"clientMs"`
		// WithoutRetryAfter: shed answers without a Retry-After of 1–3 s.
		WithoutRetryAfter int `json:"withoutRetryAfter1to3s"`
		// Server is the APIs' own histogram; Available false when they
		// expose none.
		Server struct {
			Available bool    `json:"available"`
			Source    string  `json:"source"`
			Count     float64 `json:"count"`
			P50Ms     float64 `json:"p50Ms"`
			P99Ms     float64 `json:"p99Ms"`
		} `json:"server"`
	} `json:"shed"`
	// ServerUnavailable is the APIs' 503/504 answers by reason over the
	// phase (their shoppingmall_unavailable_total).
	ServerUnavailable map[string]float64 `json:"serverUnavailableByReason,omitempty"`
	Goodput           struct {
		// TerminalByTailEnd: admitted in the burst, terminal, and whose
		// terminal event is no later than the end of the tail.
		TerminalByTailEnd int `json:"terminalByTailEnd"`
		// TerminalUnknownTime: terminal, but without an event time.
		TerminalUnknownTime int     `json:"terminalUnknownTime,omitempty"`
		PerSec              float64 `json:"perSec"`
		OverPeak            float64 `json:"overPeak"`
	} `json:"goodput"`
	Stranded struct {
		Acknowledged int `json:"acknowledged"`
		// NotTerminal: acknowledged and not terminal settleSec after the
		// phase, unreadable ones included.
		NotTerminal int `json:"notTerminal"`
		Unreadable  int `json:"unreadable"`
		// ByStatus: the not-terminal ones by status ("unreadable" for
		// those whose GET failed).
		ByStatus map[string]int `json:"byStatus,omitempty"`
		Examples []string       `json:"examples,omitempty"`
	} `json:"stranded"`
	SelfFences int      `json:"selfFences"`
	Restarts   []string `json:"restarts"`
	// RSS by process: the nodes, redis-server and the bench itself.
	RSS map[string]rssFigure `json:"rss"`
	// SocketQueues: where requests and answers waited in the kernel.
	SocketQueues *sockQueueStats `json:"socketQueues,omitempty"`
	// RunnerCPUShare is the bench's CPU over the timeline, in cores:
	// how close the client came to being the bottleneck.
	RunnerCPUSeconds float64    `json:"runnerCpuSeconds"`
	RunnerCPUShare   float64    `json:"runnerCpuCores"`
	Steal            *steal     `json:"steal,omitempty"`
	Goals            []peerGoal `json:"goals"`
	Notes            []string   `json:"notes,omitempty"`
}

const overloadMethod = "overload: an open loop at 3x the closed-loop peak for the burst, then 0.5x for the tail, on a timeline fixed in advance; " +
	"POST /orders only, by a fixed pool of workers (ours: an order whose due time finds none idle is not sent, counted apart; vegeta: it is sent late, its lag counted from its due time); " +
	"admitted = 201/200, shed = 503 with reason OVERLOADED; settleSec after the tail, every admitted order's GET /orders/{id} is read: " +
	"goodput counts burst orders that are terminal with a last-event time no later than the tail's end, over the burst's length and the peak; " +
	"stranded counts admitted orders not terminal then; self-fences from the nodes' logs, restarts from the supervisor, RSS from /proc/<pid>/status"

// buildOverload computes the figures and the goals.
func buildOverload(in overloadInput) *overloadStats {
	st := &overloadStats{Method: overloadMethod, Generator: generatorName(in.Generator), PeakPerSec: in.Peak, Workers: in.Plan.Workers,
		PeakInFlight: in.Run.PeakInFlight, MaxStartLagMs: ms(in.Run.MaxLag), Missed: in.Run.Missed,
		ElapsedSec: in.Run.Elapsed.Seconds(), SettleSec: in.Settle.Seconds(), Answers: map[string]int{},
		ServerUnavailable: in.Unavailable, SelfFences: in.SelfFences, Restarts: append([]string{}, in.Restarts...),
		RSS: in.RSS, SocketQueues: in.SocketQueues, RunnerCPUSeconds: in.RunnerCPUSeconds, Steal: in.Steal}
	if in.Run.Elapsed > 0 {
		st.RunnerCPUShare = in.RunnerCPUSeconds / in.Run.Elapsed.Seconds()
	}
	for i, s := range in.Plan.Segments {
		seg := overloadSegmentStats{Name: s.Name, RatePerSec: s.Rate, DurationSec: s.Duration.Seconds()}
		if in.Peak > 0 {
			seg.RateOverPeak = s.Rate / in.Peak
		}
		if i < len(in.Run.Scheduled) {
			seg.Scheduled, seg.Sent, seg.NotSent = in.Run.Scheduled[i], in.Run.Sent[i], in.Run.NotSent[i]
		}
		st.Segments = append(st.Segments, seg)
	}
	admitted, shedClient := newLatencyHistogram(), newLatencyHistogram()
	tailEndMs := in.TailEnd.UnixMilli()
	st.Stranded.ByStatus = map[string]int{}
	for _, r := range in.Run.Results {
		st.Answers[r.Key]++
		var seg *overloadSegmentStats
		if r.Segment >= 0 && r.Segment < len(st.Segments) {
			seg = &st.Segments[r.Segment]
		}
		count := func(f func(*overloadSegmentStats)) {
			if seg != nil {
				f(seg)
			}
		}
		switch r.Outcome {
		case outcomeShed:
			count(func(s *overloadSegmentStats) { s.Shed++ })
			st.Shed.Count++
			recordLatency(shedClient, r.FromSent)
			if !r.RetryAfterOK {
				st.Shed.WithoutRetryAfter++
			}
			continue
		case outcomeRefused:
			count(func(s *overloadSegmentStats) { s.Refused++ })
			continue
		case outcomeError:
			count(func(s *overloadSegmentStats) { s.Errors++ })
			continue
		}
		count(func(s *overloadSegmentStats) { s.Admitted++ })
		recordLatency(admitted, r.FromDue)
		st.Stranded.Acknowledged++
		sw, ok := in.Swept[r.OrderID]
		if r.OrderID == "" || !ok {
			sw = sweptOrder{Err: "not read"}
		}
		if !sw.terminal() {
			st.Stranded.NotTerminal++
			status := sw.Status
			if sw.Err != "" {
				st.Stranded.Unreadable++
				status = "unreadable"
			}
			st.Stranded.ByStatus[status]++
			if len(st.Stranded.Examples) < 10 {
				st.Stranded.Examples = append(st.Stranded.Examples, strings.TrimSpace(r.OrderID+" "+status+" "+sw.Err))
			}
			continue
		}
		if r.Segment != 0 {
			continue
		}
		switch {
		case sw.UpdatedAtUnixMs <= 0:
			st.Goodput.TerminalUnknownTime++
		case sw.UpdatedAtUnixMs <= tailEndMs:
			st.Goodput.TerminalByTailEnd++
		}
	}
	if len(st.Stranded.ByStatus) == 0 {
		st.Stranded.ByStatus = nil
	}
	st.AdmittedStartOrderMs = hdrPercentiles(admitted)
	st.Shed.ClientMs = hdrPercentiles(shedClient)
	if len(in.Plan.Segments) > 0 && in.Plan.Segments[0].Duration > 0 {
		st.Goodput.PerSec = float64(st.Goodput.TerminalByTailEnd) / in.Plan.Segments[0].Duration.Seconds()
		if in.Peak > 0 {
			st.Goodput.OverPeak = st.Goodput.PerSec / in.Peak
		}
	}
	srv := &st.Shed.Server
	srv.Source = "the APIs' " + metricShedSeconds + " histogram over the phase (bucket interpolation, as histogram_quantile)"
	if in.ShedServer != nil {
		srv.Available, srv.Count = true, in.ShedServer.Count
		srv.P50Ms = 1000 * in.ShedServer.quantile(0.50)
		srv.P99Ms = 1000 * in.ShedServer.quantile(0.99)
	} else {
		st.Notes = append(st.Notes, "shed server-side p99 unavailable: the APIs expose no "+metricShedSeconds)
	}
	if st.Goodput.TerminalUnknownTime > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("%d terminal orders had no event time and are left out of the goodput", st.Goodput.TerminalUnknownTime))
	}
	if n := notSent(st); n > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("%d orders were not sent: no idle worker of %d at their due time (-overload-max-inflight)", n, st.Workers))
	}
	st.Goals = overloadGoals(st)
	return st
}

func notSent(st *overloadStats) int64 {
	n := int64(0)
	for _, s := range st.Segments {
		n += s.NotSent
	}
	return n
}

// overloadGoals judges the figures.
func overloadGoals(st *overloadStats) []peerGoal {
	v := func(g peerGoal) peerGoal {
		if g.Verdict == "" {
			g.Verdict = map[bool]string{true: "met", false: "not met"}[g.Met]
		}
		return g
	}
	goals := []peerGoal{
		v(peerGoal{Goal: fmt.Sprintf("goodput >= %.1fx the closed-loop peak", goalGoodputOverPeak),
			Figure: st.Goodput.OverPeak, Unit: "x peak", Met: st.PeakPerSec > 0 && st.Goodput.OverPeak >= goalGoodputOverPeak}),
		v(peerGoal{Goal: fmt.Sprintf("stranded = 0 (acknowledged, not terminal %.0f s after the phase)", st.SettleSec),
			Figure: float64(st.Stranded.NotTerminal), Unit: "orders", Met: st.Stranded.NotTerminal == 0}),
		v(peerGoal{Goal: "self-fences = 0", Figure: float64(st.SelfFences), Unit: "self-fences", Met: st.SelfFences == 0}),
		v(peerGoal{Goal: "process restarts = 0", Figure: float64(len(st.Restarts)), Unit: "restarts", Met: len(st.Restarts) == 0}),
	}
	shed := peerGoal{Goal: fmt.Sprintf("shed server-side p99 < %.0f ms", goalShedP99Ms), Unit: "ms"}
	switch {
	case !st.Shed.Server.Available:
		shed.Verdict = "no data (histogram unavailable)"
	case st.Shed.Server.Count == 0:
		shed.Verdict = "no data (nothing shed)"
	default:
		shed.Figure, shed.Met = st.Shed.Server.P99Ms, st.Shed.Server.P99Ms < goalShedP99Ms
	}
	client := peerGoal{Goal: fmt.Sprintf("shed client-side p99 < %.0f ms", goalShedClientP99Ms), Unit: "ms"}
	if st.Shed.ClientMs.N == 0 {
		client.Verdict = "no data (nothing shed)"
	} else {
		client.Figure, client.Met = st.Shed.ClientMs.P99, st.Shed.ClientMs.P99 < goalShedClientP99Ms
	}
	return append(goals, v(shed), v(client))
}

// generatorName is the generator's name for the report (empty is ours).
func generatorName(g string) string {
	if g == "" {
		return generatorOurs
	}
	return g
}

func printOverload(w io.Writer, st *overloadStats) {
	if st == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	row("overload", "%s generator; peak %.1f orders/s; %d workers (peak in flight %d), max start lag %.2f ms; statuses read %.0f s after the phase",
		st.Generator, st.PeakPerSec, st.Workers, st.PeakInFlight, st.MaxStartLagMs, st.SettleSec)
	for _, s := range st.Segments {
		row("  "+s.Name, "%.1f orders/s (%.1fx peak) for %.0f s: %d due, %d sent, %d not sent; admitted %d, shed %d, refused %d, errors %d",
			s.RatePerSec, s.RateOverPeak, s.DurationSec, s.Scheduled, s.Sent, s.NotSent, s.Admitted, s.Shed, s.Refused, s.Errors)
	}
	var answers []string
	for _, k := range sortedKeys(st.Answers) {
		answers = append(answers, fmt.Sprintf("%s %d", k, st.Answers[k]))
	}
	row("  answers", "%s", strings.Join(answers, ", "))
	row("  admitted StartOrder (from due)", "%s", hp(st.AdmittedStartOrderMs))
	srv := "server-side p99 unavailable (no " + metricShedSeconds + ")"
	if st.Shed.Server.Available {
		srv = fmt.Sprintf("server-side %.0f shed, p50 %.2f p99 %.2f ms", st.Shed.Server.Count, st.Shed.Server.P50Ms, st.Shed.Server.P99Ms)
	}
	row("  shed (503 OVERLOADED)", "%d; %s; client-side p99 %.2f ms; %d without Retry-After 1-3 s", st.Shed.Count, srv, st.Shed.ClientMs.P99, st.Shed.WithoutRetryAfter)
	if len(st.ServerUnavailable) > 0 {
		var parts []string
		for _, k := range sortedKeys(st.ServerUnavailable) {
			if st.ServerUnavailable[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, st.ServerUnavailable[k]))
			}
		}
		if len(parts) > 0 {
			row("  API 503/504 by reason", "%s", strings.Join(parts, ", "))
		}
	}
	row("  goodput", "%d burst orders terminal by the tail's end = %.1f /s = %.2fx peak", st.Goodput.TerminalByTailEnd, st.Goodput.PerSec, st.Goodput.OverPeak)
	row("  stranded", "%d of %d acknowledged not terminal %.0f s after the phase (%d unreadable)%s",
		st.Stranded.NotTerminal, st.Stranded.Acknowledged, st.SettleSec, st.Stranded.Unreadable, byStatus(st.Stranded.ByStatus))
	row("  self-fences, restarts", "%d, %d", st.SelfFences, len(st.Restarts))
	for _, r := range st.Restarts {
		row("    restart", "%s", r)
	}
	var rss []string
	for _, n := range sortedKeys(st.RSS) {
		rss = append(rss, fmt.Sprintf("%s %.0f (hwm %.0f)", n, st.RSS[n].PeakSampledMiB, st.RSS[n].HWMMiB))
	}
	row("  highest RSS MiB", "%s", strings.Join(rss, ", "))
	if q := st.SocketQueues; q != nil {
		f := func(x sockQueueFigure) string {
			return fmt.Sprintf("peak %d mean %.1f (>0 in %.0f%% of samples)", x.Peak, x.Mean, 100*x.SampleShare)
		}
		row("  API sockets", "accept queue %s; unread requests %s; unread answers %s; connections peak %d",
			f(q.AcceptQueue), f(q.ServerUnread), f(q.ClientUnread), q.Conns.Peak)
		var parts []string
		for _, k := range sortedKeys(q.TCP) {
			parts = append(parts, fmt.Sprintf("%s %d", k, q.TCP[k]))
		}
		if len(parts) > 0 {
			row("  TCP counters (machine)", "%s", strings.Join(parts, ", "))
		}
	}
	row("  load generator CPU", "%.1f s = %.2f cores over the timeline", st.RunnerCPUSeconds, st.RunnerCPUShare)
	if st.Steal != nil {
		row("  CPU steal", "%.1f s, %.1f%% of the machine's CPU time", st.Steal.Seconds, 100*st.Steal.Share)
	}
	for _, g := range st.Goals {
		row("  goal", "%s: %s [%s]", g.Goal, goalFigure(g), g.Verdict)
	}
	tw.Flush()
	for _, n := range st.Notes {
		fmt.Fprintln(w, "note (overload):", n)
	}
}

func goalFigure(g peerGoal) string {
	if strings.HasPrefix(g.Verdict, "no data") {
		return "n/a"
	}
	return fmt.Sprintf("%s %s", strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", g.Figure), "0"), "."), g.Unit)
}

func byStatus(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return ": " + strings.Join(parts, ", ")
}

// histDelta is a histogram's growth over an interval, summed over series
// and processes: cumulative counts by upper bound (seconds).
type histDelta struct {
	Bounds     []float64
	Cumulative []float64
	Count      float64
}

// shedHistogramDelta is metricShedSeconds from before to after, over
// every API; nil when no API exposes it. A process whose count went down
// restarted, and its after alone is its growth.
func shedHistogramDelta(before, after map[string]scraped) *histDelta {
	byBound := map[float64]float64{}
	count := 0.0
	found := false
	for node, a := range after {
		fam := a[metricShedSeconds]
		if fam == nil {
			continue
		}
		found = true
		aB, aN := histSum(a)
		bB, bN := map[float64]float64{}, 0.0
		if b, ok := before[node]; ok && b[metricShedSeconds] != nil {
			bB, bN = histSum(b)
		}
		if aN < bN {
			bB, bN = map[float64]float64{}, 0
		}
		count += aN - bN
		for ub, c := range aB {
			byBound[ub] += c - bB[ub]
		}
	}
	if !found {
		return nil
	}
	h := &histDelta{Count: count}
	for ub := range byBound {
		h.Bounds = append(h.Bounds, ub)
	}
	sort.Float64s(h.Bounds)
	for _, ub := range h.Bounds {
		h.Cumulative = append(h.Cumulative, byBound[ub])
	}
	return h
}

// histSum adds metricShedSeconds' series of one scrape.
func histSum(s scraped) (map[float64]float64, float64) {
	out := map[float64]float64{}
	n := 0.0
	for _, m := range s[metricShedSeconds].GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		n += float64(h.GetSampleCount())
		for _, b := range h.GetBucket() {
			if math.IsInf(b.GetUpperBound(), +1) {
				continue
			}
			out[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	return out, n
}

// quantile is Prometheus' histogram_quantile: the bucket holding rank
// q·count, interpolated linearly within it (from 0 for the first); a rank
// beyond the last finite bound is that bound.
func (h *histDelta) quantile(q float64) float64 {
	if h == nil || h.Count <= 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for i, ub := range h.Bounds {
		c := h.Cumulative[i]
		if c >= rank {
			if c == below {
				return ub
			}
			return lower + (ub-lower)*(rank-below)/(c-below)
		}
		lower, below = ub, c
	}
	return h.Bounds[len(h.Bounds)-1]
}

// counterDeltaBy is a counter's growth by label over every process; a
// process whose series went down restarted, and its after is its growth.
func counterDeltaBy(before, after map[string]scraped, name, label string) map[string]float64 {
	out := map[string]float64{}
	for node, a := range after {
		var b map[string]float64
		if s, ok := before[node]; ok {
			b = s.by(name, label)
		}
		for k, v := range a.by(name, label) {
			d := v - b[k]
			if d < 0 {
				d = v
			}
			out[k] += d
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
