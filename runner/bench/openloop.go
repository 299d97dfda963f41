package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The open-loop phase offers orders at a fixed rate on a timeline fixed in
// advance (the i-th order is due at i/rate after the phase starts),
// whether or not earlier orders have finished, and takes every latency
// from the time the order was due. A closed loop cannot show queueing: a
// worker stuck behind a slow answer simply does not send, so the slow
// moments are sampled once instead of for every order that would have
// arrived meanwhile (coordinated omission). Here an order the generator
// could only send late (in-flight limit reached, generator descheduled)
// still counts from its due time, so a stall shows in every order due
// during it.

// openLoopConfig is one open-loop phase.
type openLoopConfig struct {
	// Rate is orders per second; Duration the length of the timeline.
	Rate     float64
	Duration time.Duration
	// MaxInFlight bounds the orders in flight (sockets and goroutines of
	// the generator); at the limit the next order waits for a slot and is
	// sent late, its latency still taken from its due time.
	MaxInFlight int
	// SendGrace is how long after the timeline's end a due order may
	// still be sent; orders not sent by then are missed.
	SendGrace time.Duration
}

// lateStart is the lag after which a start counts as late: beyond timer
// and scheduling jitter, the generator itself was behind.
const lateStart = 2 * time.Millisecond

// latencyMax is the largest latency the histograms hold (µs); a larger one
// is recorded as this value and counted in Clamped.
const latencyMax = int64(10 * time.Minute / time.Microsecond)

// newLatencyHistogram records microseconds from 1 µs to latencyMax with 3
// significant digits (HdrHistogram's bucket error is under 0.1%).
func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, latencyMax, 3)
}

// recordLatency records d (rounded to µs) and reports whether it had to
// be clamped to the histogram's range.
func recordLatency(h *hdrhistogram.Histogram, d time.Duration) (clamped bool) {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	if us > latencyMax {
		us, clamped = latencyMax, true
	}
	// In range by construction.
	_ = h.RecordValue(us)
	return clamped
}

// dueAt is the i-th order's place on the timeline.
func dueAt(i int64, rate float64) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / rate)
}

// scheduledCount is how many orders the timeline holds.
func scheduledCount(rate float64, d time.Duration) int64 {
	if rate <= 0 || d <= 0 {
		return 0
	}
	n := int64(0)
	for dueAt(n, rate) < d {
		n++
	}
	return n
}

// openLoopRun is what the scheduler saw.
type openLoopRun struct {
	Results []orderResult
	// Scheduled orders on the timeline; Sent of them; Missed never sent
	// (interrupted, or still no slot SendGrace after the timeline ended).
	Scheduled, Sent, Missed int64
	// Late counts starts sent more than lateStart after they were due;
	// MaxLag is the largest lag.
	Late   int64
	MaxLag time.Duration
	// MaxInFlight is the most orders in flight at once.
	MaxInFlight int64
	Elapsed     time.Duration
	// Steal is the machine's steal over the phase; nil when unread.
	Steal *steal
}

// runOpenLoop sends order i at start+dueAt(i) through do, each in its own
// goroutine (bounded by MaxInFlight), and returns once every sent order
// has finished. do must take the order's latencies from scheduled.
func runOpenLoop(ctx context.Context, cfg openLoopConfig, report progress,
	do func(ctx context.Context, i int64, phaseStart, scheduled time.Time) orderResult) openLoopRun {
	total := scheduledCount(cfg.Rate, cfg.Duration)
	run := openLoopRun{Scheduled: total}
	slots := make(chan struct{}, max(cfg.MaxInFlight, 1))
	var mu sync.Mutex
	var inFlight, peak, done, terminal, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	giveUp := time.NewTimer(cfg.Duration + cfg.SendGrace)
	defer giveUp.Stop()

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
				mu.Lock()
				sent := run.Sent
				mu.Unlock()
				logf("open-loop %5.1fs due=%d sent=%d terminal=%d in-flight=%d errors=%d",
					now.Sub(start).Seconds(), min(scheduledCount(cfg.Rate, now.Sub(start)), total), sent,
					terminal.Load(), inFlight.Load(), errs.Load())
			}
		}
	}()

dispatch:
	for i := int64(0); i < total; i++ {
		due := start.Add(dueAt(i, cfg.Rate))
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				run.Missed = total - i
				break dispatch
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			run.Missed = total - i
			break dispatch
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			run.Missed = total - i
			break dispatch
		case <-giveUp.C:
			run.Missed = total - i
			break dispatch
		}
		lag := time.Since(due)
		mu.Lock()
		run.Sent++
		if lag > lateStart {
			run.Late++
		}
		run.MaxLag = max(run.MaxLag, lag)
		mu.Unlock()
		if n := inFlight.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := do(ctx, i, start, due)
			inFlight.Add(-1)
			<-slots
			done.Add(1)
			if r.terminal() {
				terminal.Add(1)
			} else {
				errs.Add(1)
			}
			mu.Lock()
			run.Results = append(run.Results, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	run.Elapsed = time.Since(start)
	run.MaxInFlight = peak.Load()
	return run
}

// openLoop runs the phase against the cluster.
func (l *load) openLoop(ctx context.Context, cfg openLoopConfig, report progress) openLoopRun {
	before, _ := machineTimes()
	run := runOpenLoop(ctx, cfg, report, func(ctx context.Context, _ int64, phaseStart, scheduled time.Time) orderResult {
		return l.one(ctx, l.seq.Add(1), phaseStart, scheduled)
	})
	after, _ := machineTimes()
	run.Steal = stealBetween(before, after)
	return run
}

// hdrPct is a latency distribution in milliseconds, read from an
// HdrHistogram of microseconds.
type hdrPct struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
	N    int64   `json:"n"`
}

// hdrPercentiles reads the figures the report prints. Each percentile is
// the highest value equivalent to the recorded one at the histogram's
// precision, so it never understates.
func hdrPercentiles(h *hdrhistogram.Histogram) hdrPct {
	if h.TotalCount() == 0 {
		return hdrPct{}
	}
	usToMs := func(us int64) float64 { return float64(us) / 1000 }
	return hdrPct{
		P50:  usToMs(h.ValueAtQuantile(50)),
		P90:  usToMs(h.ValueAtQuantile(90)),
		P99:  usToMs(h.ValueAtQuantile(99)),
		P999: usToMs(h.ValueAtQuantile(99.9)),
		Max:  usToMs(h.Max()),
		Mean: h.Mean() / 1000,
		N:    h.TotalCount(),
	}
}

// Latency goals printed beside the open-loop figures; not asserted.
const (
	goalStartOrderP99Ms      = 25.0
	goalStartToTerminalP99Ms = 100.0
)

// openLoopStats is the open-loop phase in the report.
type openLoopStats struct {
	Method     string  `json:"method"`
	RatePerSec float64 `json:"ratePerSec"`
	RateSource string  `json:"rateSource"`
	// RateOverPeak is the rate over this run's closed-loop throughput.
	RateOverPeak float64 `json:"rateOverPeak"`
	DurationSec  float64 `json:"durationSec"`
	ElapsedSec   float64 `json:"elapsedSec"`
	MaxInFlight  int     `json:"maxInFlightLimit"`
	Counts       struct {
		Scheduled  int64  `json:"scheduled"`
		Sent       int64  `json:"sent"`
		Terminal   int    `json:"terminal"`
		Confirmed  int    `json:"confirmed"`
		Failed     int    `json:"failed"`
		Errors     int    `json:"errors"`
		Unexpected int    `json:"unexpected"`
		FirstError string `json:"firstError,omitempty"`
	} `json:"counts"`
	MissedStarts    int64   `json:"missedStarts"`
	LateStarts      int64   `json:"lateStarts"`
	LateThresholdMs float64 `json:"lateThresholdMs"`
	MaxStartLagMs   float64 `json:"maxStartLagMs"`
	PeakInFlight    int64   `json:"peakInFlight"`
	// Clamped counts latencies above the histograms' range.
	Clamped           int64  `json:"clamped,omitempty"`
	StartOrderMs      hdrPct `json:"startOrderMs"`
	StartToTerminalMs hdrPct `json:"startToTerminalMs"`
	Polls             int64  `json:"polls"`
	Waits             int64  `json:"waits"`
	// Steal is the machine's steal while the phase ran: the open loop's
	// latencies move with it more than anything else on a shared host.
	Steal *steal `json:"steal,omitempty"`
	// Tail is where the slowest orders spent their time (tail.go).
	Tail *tailStats `json:"tail,omitempty"`
	// Goals are printed beside the figures; the bench asserts none.
	Goals struct {
		StartOrderP99Ms       float64 `json:"startOrderP99Ms"`
		StartToTerminalP99Ms  float64 `json:"startToTerminalP99Ms"`
		StartOrderP99Met      bool    `json:"startOrderP99Met"`
		StartToTerminalP99Met bool    `json:"startToTerminalP99Met"`
	} `json:"goals"`
}

// buildOpenLoop records the phase's orders in two HdrHistograms (StartOrder
// and start→terminal, both from the due time) and reads them.
func buildOpenLoop(cfg openLoopConfig, rateSource string, peak float64, run openLoopRun) *openLoopStats {
	st := &openLoopStats{
		Method: "open loop: order i due at i/rate after the phase start, sent then whatever earlier orders are doing " +
			"(a goroutine each, at most maxInFlightLimit in flight); every latency is taken from the due time, so time an " +
			"order spent waiting to be sent counts (coordinated omission corrected); recorded in HdrHistograms " +
			"(1 µs to 10 min, 3 significant digits)",
		RatePerSec: cfg.Rate, RateSource: rateSource, DurationSec: cfg.Duration.Seconds(),
		ElapsedSec: run.Elapsed.Seconds(), MaxInFlight: cfg.MaxInFlight,
		MissedStarts: run.Missed, LateStarts: run.Late, LateThresholdMs: ms(lateStart),
		MaxStartLagMs: ms(run.MaxLag), PeakInFlight: run.MaxInFlight, Steal: run.Steal,
	}
	if peak > 0 {
		st.RateOverPeak = cfg.Rate / peak
	}
	st.Counts.Scheduled, st.Counts.Sent = run.Scheduled, run.Sent
	starts, e2e := newLatencyHistogram(), newLatencyHistogram()
	for _, r := range run.Results {
		st.Polls += int64(r.Polls)
		st.Waits += int64(r.Waits)
		if r.Err != "" {
			st.Counts.Errors++
			if st.Counts.FirstError == "" {
				st.Counts.FirstError = r.Err
			}
			continue
		}
		if recordLatency(starts, r.StartLat) {
			st.Clamped++
		}
		if !r.terminal() {
			continue
		}
		st.Counts.Terminal++
		if r.Status == "Confirmed" {
			st.Counts.Confirmed++
		} else {
			st.Counts.Failed++
		}
		if (r.Path == pathSuccess) != (r.Status == "Confirmed") {
			st.Counts.Unexpected++
		}
		if recordLatency(e2e, r.E2E) {
			st.Clamped++
		}
	}
	st.StartOrderMs = hdrPercentiles(starts)
	st.StartToTerminalMs = hdrPercentiles(e2e)
	g := &st.Goals
	g.StartOrderP99Ms, g.StartToTerminalP99Ms = goalStartOrderP99Ms, goalStartToTerminalP99Ms
	g.StartOrderP99Met = st.StartOrderMs.N > 0 && st.StartOrderMs.P99 < goalStartOrderP99Ms
	g.StartToTerminalP99Met = st.StartToTerminalMs.N > 0 && st.StartToTerminalMs.P99 < goalStartToTerminalP99Ms
	return st
}
