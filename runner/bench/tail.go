package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Where the open loop's slowest orders spent their time. A p99 alone
// cannot tell a queue (the slow orders spread over the whole phase, each
// behind a few others) from a stall (they bunch into a few moments: an
// AOF fsync, a fork, a collection, a burst of passivations). The tail
// report says which: it takes the slowest 1 % by start → terminal, counts
// the windows of tailWindow they fall in, splits each one's time into
// before and after its 201, and lines them up with what Redis' latency
// monitor recorded meanwhile. Every order of the phase goes to
// openloop-orders.csv for a closer look.

// tailWindow is the width of the windows the slowest orders are counted
// in: a stall of a few hundred milliseconds shows as one or two.
const tailWindow = 250 * time.Millisecond

// tailShare is the slowest share of orders the report looks at.
const tailShare = 0.01

// redisLatencyThresholdMs is the latency monitor's threshold while the
// open loop runs: Redis records every event (a command, an AOF write or
// fsync, a fork) that blocked its main thread at least this long.
const redisLatencyThresholdMs = 5

// tailStats is the open loop's tail in the report.
type tailStats struct {
	Method string `json:"method"`
	// StartedAt is the phase's start on the wall clock, to line the
	// windows up with the processes' logs.
	StartedAt time.Time `json:"startedAt"`
	// Orders is how many orders the slowest 1 % holds; ThresholdMs the
	// smallest start → terminal among them.
	Orders      int     `json:"orders"`
	ThresholdMs float64 `json:"thresholdMs"`
	// Windows is how many windows of WindowMs hold them, of
	// PhaseWindows; InTop3 the share of them in the three windows that
	// hold the most. Spread over many windows: a queue; a few: a stall.
	WindowMs     float64 `json:"windowMs"`
	Windows      int     `json:"windows"`
	PhaseWindows int     `json:"phaseWindows"`
	InTop3       float64 `json:"inTop3Windows"`
	// StartShare is the share of their start → terminal spent before
	// the 201 (the POST, with its lag), summed over them.
	StartShare float64 `json:"startShare"`
	// ByAPI and ByPath count them by API and by the order's path.
	ByAPI  map[string]int `json:"byApi"`
	ByPath map[string]int `json:"byPath"`
	// Busiest are the windows holding the most, at most five.
	Busiest []tailWindowStats `json:"busiest"`
	// MedianCPUWaitMs and MedianIOWaitMs are the pressure stall times of
	// the phase's median window, to read the busiest windows' against.
	MedianCPUWaitMs *float64 `json:"medianCpuWaitMs,omitempty"`
	MedianIOWaitMs  *float64 `json:"medianIoWaitMs,omitempty"`
	// Redis is what Redis' latency monitor recorded during the phase
	// (threshold RedisThresholdMs), by event; nil when unread.
	RedisThresholdMs int                 `json:"redisThresholdMs"`
	Redis            []redisLatencyEvent `json:"redis,omitempty"`
	RedisErr         string              `json:"redisError,omitempty"`
	// Stages split the slowest orders' time into legs inside the system,
	// by StartOrder and by start → terminal (stages.go).
	Stages []stageStats `json:"stages,omitempty"`
	// RunQueue is each process's time on a core and waiting for one
	// over the phase, per second (runqueue.go).
	RunQueue []runQueueStats `json:"runQueue,omitempty"`
}

// tailWindowStats is one window of the phase.
type tailWindowStats struct {
	AtSec    float64 `json:"atSec"` // its start, from the phase's start
	Slow     int     `json:"slow"`
	Due      int     `json:"due"`
	MaxE2EMs float64 `json:"maxStartToTerminalMs"`
	// CPUWaitMs and IOWaitMs are the machine's pressure stall time in
	// the window (/proc/pressure, "some": time in which at least one
	// task waited for a core, or for I/O); nil where unread.
	CPUWaitMs *float64 `json:"cpuWaitMs,omitempty"`
	IOWaitMs  *float64 `json:"ioWaitMs,omitempty"`
}

// redisLatencyEvent is one event of Redis' latency monitor during the
// phase: how many seconds recorded it, the worst, and when (seconds from
// the phase's start; the monitor keeps one sample per second).
type redisLatencyEvent struct {
	Event   string    `json:"event"`
	Seconds int       `json:"seconds"`
	MaxMs   int64     `json:"maxMs"`
	AtSec   []float64 `json:"atSec"`
	Node    string    `json:"node,omitempty"`
}

// buildTail reads the slowest orders of a finished open loop. phase is the
// phase's length; results with an error count as slowest of all.
func buildTail(results []orderResult, phaseStart time.Time, phase time.Duration, psi []psiSample) *tailStats {
	ts := &tailStats{
		Method: fmt.Sprintf("the slowest %.0f %% of the open loop's orders by start → terminal (from due; an order that "+
			"failed counts as slowest): the %.0f ms windows of the phase their due times fall in, the share of their time "+
			"spent before the 201, and the events Redis' latency monitor recorded (threshold %d ms)",
			100*tailShare, float64(tailWindow.Milliseconds()), redisLatencyThresholdMs),
		StartedAt: phaseStart, WindowMs: float64(tailWindow.Milliseconds()), RedisThresholdMs: redisLatencyThresholdMs,
		ByAPI: map[string]int{}, ByPath: map[string]int{},
	}
	if len(results) == 0 {
		return ts
	}
	rs := slices.Clone(results)
	e2e := func(r orderResult) time.Duration {
		if !r.terminal() {
			return time.Duration(1<<63 - 1)
		}
		return r.E2E
	}
	slices.SortFunc(rs, func(a, b orderResult) int { return -cmp.Compare(e2e(a), e2e(b)) })
	n := max(1, int(float64(len(rs))*tailShare))
	slow := rs[:n]
	ts.Orders = n
	ts.ThresholdMs = ms(slow[n-1].E2E)
	ts.PhaseWindows = int((phase + tailWindow - 1) / tailWindow)

	windows := map[int]*tailWindowStats{}
	window := func(d time.Duration) *tailWindowStats {
		k := int(d / tailWindow)
		w := windows[k]
		if w == nil {
			w = &tailWindowStats{AtSec: (time.Duration(k) * tailWindow).Seconds()}
			windows[k] = w
		}
		return w
	}
	for _, r := range results {
		window(r.Start).Due++
	}
	var before, total time.Duration
	for _, r := range slow {
		w := window(r.Start)
		w.Slow++
		w.MaxE2EMs = max(w.MaxE2EMs, ms(r.E2E))
		ts.ByAPI[strconv.Itoa(r.API)]++
		ts.ByPath[r.Path]++
		if r.terminal() {
			before += min(r.StartLat, r.E2E)
			total += r.E2E
		}
	}
	if total > 0 {
		ts.StartShare = float64(before) / float64(total)
	}
	var ws []tailWindowStats
	for _, w := range windows {
		if w.Slow > 0 {
			ws = append(ws, *w)
		}
	}
	slices.SortFunc(ws, func(a, b tailWindowStats) int {
		if a.Slow != b.Slow {
			return b.Slow - a.Slow
		}
		return cmp.Compare(a.AtSec, b.AtSec)
	})
	ts.Windows = len(ws)
	top := 0
	for _, w := range ws[:min(3, len(ws))] {
		top += w.Slow
	}
	ts.InTop3 = float64(top) / float64(n)
	ts.Busiest = ws[:min(5, len(ws))]
	cpu, io := psiWindows(psi, phaseStart, ts.PhaseWindows)
	for i := range ts.Busiest {
		k := int(ts.Busiest[i].AtSec * float64(time.Second) / float64(tailWindow))
		ts.Busiest[i].CPUWaitMs, ts.Busiest[i].IOWaitMs = at(cpu, k), at(io, k)
	}
	ts.MedianCPUWaitMs, ts.MedianIOWaitMs = median(cpu), median(io)
	return ts
}

// psiSample is the machine's pressure stall totals at one moment
// (/proc/pressure/cpu and io, "some" line, microseconds).
type psiSample struct {
	At      time.Time
	CPU, IO int64
}

// readPSI reads the two totals; ok is false where the kernel has no PSI.
func readPSI() (psiSample, bool) {
	s := psiSample{At: time.Now()}
	some := func(file string) (int64, bool) {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, false
		}
		for _, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			}
		}
		return 0, false
	}
	var okC, okI bool
	s.CPU, okC = some("/proc/pressure/cpu")
	s.IO, okI = some("/proc/pressure/io")
	return s, okC && okI
}

// samplePSI reads the pressure totals every quarter of a tail window
// until stop is closed, and returns the samples.
func samplePSI(stop <-chan struct{}) <-chan []psiSample {
	out := make(chan []psiSample, 1)
	go func() {
		var ss []psiSample
		t := time.NewTicker(tailWindow / 4)
		defer t.Stop()
		for {
			if s, ok := readPSI(); ok {
				ss = append(ss, s)
			}
			select {
			case <-stop:
				out <- ss
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// psiWindows turns the samples into each window's stall time (ms), from
// the last sample at or before the window's start to the last at or
// before its end; nil without samples.
func psiWindows(ss []psiSample, phaseStart time.Time, windows int) (cpu, io []float64) {
	if len(ss) < 2 {
		return nil, nil
	}
	last := func(t time.Time) psiSample {
		i, _ := slices.BinarySearchFunc(ss, t, func(s psiSample, t time.Time) int { return s.At.Compare(t) })
		return ss[max(0, min(i, len(ss)-1))]
	}
	for k := range windows {
		from := last(phaseStart.Add(time.Duration(k) * tailWindow))
		to := last(phaseStart.Add(time.Duration(k+1) * tailWindow))
		cpu = append(cpu, float64(to.CPU-from.CPU)/1000)
		io = append(io, float64(to.IO-from.IO)/1000)
	}
	return cpu, io
}

func at(xs []float64, k int) *float64 {
	if k < 0 || k >= len(xs) {
		return nil
	}
	return &xs[k]
}

func median(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Sorted(slices.Values(xs))
	return &s[len(s)/2]
}

// redisNodes calls fn on every Redis the client writes to: each master of
// a Redis Cluster (named by its address), else the client itself (one
// server, or the Sentinel's primary; node "").
func redisNodes(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, node string, c redis.UniversalClient) error) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return fn(ctx, "", rdb)
	}
	return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return fn(ctx, c.Options().Addr, c)
	})
}

// startRedisLatency turns Redis' latency monitor on with a clean history
// for the phase about to start.
func startRedisLatency(ctx context.Context, rdb redis.UniversalClient) error {
	return redisNodes(ctx, rdb, func(ctx context.Context, _ string, c redis.UniversalClient) error {
		if err := c.ConfigSet(ctx, "latency-monitor-threshold", strconv.Itoa(redisLatencyThresholdMs)).Err(); err != nil {
			return err
		}
		return c.Do(ctx, "LATENCY", "RESET").Err()
	})
}

// readRedisLatency reads the latency monitor's history since
// startRedisLatency (the samples at or after phaseStart) and turns the
// monitor off again.
func readRedisLatency(ctx context.Context, rdb redis.UniversalClient, phaseStart time.Time) ([]redisLatencyEvent, error) {
	var mu sync.Mutex
	var out []redisLatencyEvent
	err := redisNodes(ctx, rdb, func(ctx context.Context, node string, c redis.UniversalClient) error {
		defer c.ConfigSet(context.WithoutCancel(ctx), "latency-monitor-threshold", "0")
		latest, err := c.Do(ctx, "LATENCY", "LATEST").Slice()
		if err != nil {
			return err
		}
		for _, l := range latest {
			row, ok := l.([]any)
			if !ok || len(row) == 0 {
				continue
			}
			name, _ := row[0].(string)
			hist, err := c.Do(ctx, "LATENCY", "HISTORY", name).Slice()
			if err != nil {
				return err
			}
			ev := redisLatencyEvent{Event: name, Node: node}
			for _, h := range hist {
				s, ok := h.([]any)
				if !ok || len(s) < 2 {
					continue
				}
				at, _ := s[0].(int64)
				lat, _ := s[1].(int64)
				off := time.Unix(at, 0).Sub(phaseStart.Truncate(time.Second)).Seconds()
				if off < 0 {
					continue
				}
				ev.Seconds++
				ev.MaxMs = max(ev.MaxMs, lat)
				ev.AtSec = append(ev.AtSec, off)
			}
			if ev.Seconds > 0 {
				mu.Lock()
				out = append(out, ev)
				mu.Unlock()
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b redisLatencyEvent) int { return int(b.MaxMs - a.MaxMs) })
	return out, err
}

// writeOrdersCSV writes every order of a phase, one row each: when it was
// due (ms from the phase's start), its start lag, StartOrder and start →
// terminal latencies (ms from due), API, path, status and error.
func writeOrdersCSV(path string, results []orderResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rs := slices.Clone(results)
	slices.SortFunc(rs, func(a, b orderResult) int { return cmp.Compare(a.Start, b.Start) })
	w := csv.NewWriter(f)
	_ = w.Write([]string{"due_ms", "lag_ms", "start_order_ms", "start_to_terminal_ms", "api", "path", "status", "order_id", "error"})
	f3 := func(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 3, 64) }
	for _, r := range rs {
		_ = w.Write([]string{f3(r.Start), f3(r.StartLag), f3(r.StartLat), f3(r.E2E), strconv.Itoa(r.API), r.Path, r.Status, r.OrderID, r.Err})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}
