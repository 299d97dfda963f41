package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

func numCPU() int { return runtime.NumCPU() }

type replayStats struct {
	Method  string  `json:"method"`
	Samples int     `json:"samples"`
	Events  float64 `json:"eventsPerStream"`
	Ms      pct     `json:"ms"`
}

// replayRead times reading back terminal orders' streams the way an
// activation's replay reads them (eventstore Load: the stream's entries,
// decoded). It is the Redis and decode part of a warm replay only; it
// does not open the fence and runs from this process, not a workflow
// member.
func replayRead(ctx context.Context, rdb redis.UniversalClient, res loadResult, n int) replayStats {
	st := replayStats{Method: "eventstore Load (XRANGE + decode) of terminal orders' streams from the runner, sequential; " +
		"read part of a replay only, fence not raised"}
	es, err := eventstore.NewRedis(eventstore.Config{Client: rdb})
	if err != nil {
		return replayStats{Method: st.Method + ": " + err.Error()}
	}
	var ds []time.Duration
	events := 0
	for _, r := range res.Results {
		if len(ds) >= n {
			break
		}
		if !r.terminal() || r.OrderID == "" {
			continue
		}
		t0 := time.Now()
		envs, err := es.Load(ctx, r.OrderID)
		if err != nil {
			continue
		}
		ds = append(ds, time.Since(t0))
		events += len(envs)
	}
	st.Samples = len(ds)
	if len(ds) > 0 {
		st.Events = float64(events) / float64(len(ds))
	}
	st.Ms = percentiles(ds)
	return st
}

func printReport(w io.Writer, r *report) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "=== ShoppingMall bench: %s ===\n", r.Target.Label)
	fmt.Fprintf(w, "run %s  concurrency %d  mix %d%% success / %d%% inventory failure / %d%% payment failure  poll %.0f ms  cpus %d (everything on this machine)\n",
		r.RunID, r.Config.Concurrency, r.Config.MixSuccessPct, r.Config.MixInventoryPct, r.Config.MixPaymentPct, r.Config.PollMs, r.Config.CPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	p := func(x pct) string {
		return fmt.Sprintf("p50 %.2f  p95 %.2f  p99 %.2f  max %.2f ms (n=%d)", x.P50, x.P95, x.P99, x.Max, x.N)
	}
	row("orders terminal", "%d in %.1f s (confirmed %d, failed %d; errors %d; unexpected outcome %d)",
		r.Orders.Terminal, r.Throughput.ElapsedSec, r.Orders.Confirmed, r.Orders.Failed, r.Orders.Errors, r.Orders.Unexpected)
	row("throughput", "%.1f orders/s reaching a terminal status", r.Throughput.OrdersPerSec)
	row("StartOrder (POST /orders)", "%s", p(r.StartOrderMs))
	row("start -> terminal", "%s", p(r.StartToTerminalMs))
	for _, path := range []string{pathSuccess, pathInventory, pathPayment} {
		if x, ok := r.ByPathE2EMs[path]; ok {
			row("  "+path, "%s", p(x))
		}
	}
	row("GET mode", "%s", r.GetMode)
	row("GET polls", "%.2f per order (%d)", r.Polls.PerOrder, r.Polls.Total)
	row("GET waits (waitFor=terminal)", "%.2f per order (%d)", r.Waits.PerOrder, r.Waits.Total)
	cr := r.ClientRoundTrips
	if len(cr.ByNode) == 0 {
		row("Redis round trips/order", "n/a: no process served /metrics (see the notes)")
	} else {
		row("Redis round trips/order", "%.2f client-side total = workflow %.2f + API StartOrder %.2f + API GET reads %.2f (%.2f per GET)",
			cr.PerOrder, cr.WorkflowPerOrder, cr.APIStartPerOrder, cr.APIPollPerOrder, cr.APIPerPoll)
	}
	for _, n := range sortedKeys(cr.ByNode) {
		row("  "+n, "%s", fmtCounts(cr.ByNode[n]))
	}
	if len(cr.ByStore) > 0 {
		row("  by store", "%s", fmtCounts(cr.ByStore))
	}
	row("Redis commands/order", "%.2f server-side (commandstats, incl. inside scripts); Redis time %.0f us/order",
		r.RedisCommands.PerOrder, r.RedisCommands.UsecPerOrder)
	row("  by name", "%s", fmtCounts(r.RedisCommands.ByName))
	if bg := r.Background; bg != nil {
		row("  apart", "WAIT %.2f, background %.2f per order; for the orders %.2f", r.RedisCommands.WaitPerOrder,
			r.RedisCommands.BackgroundPerOrder, r.RedisCommands.ForOrdersPerOrder)
		row("background (at rest)", "%s", formatBackground(bg))
	}
	var cpu []string
	total := 0.0
	for _, n := range sortedKeys(r.CPUPerOrderMs) {
		if n == runnerCPU {
			continue
		}
		cpu = append(cpu, fmt.Sprintf("%s %.3f", n, r.CPUPerOrderMs[n]))
		total += r.CPUPerOrderMs[n]
	}
	row("CPU ms/order", "%s; total %.3f (load generator itself %.3f)", strings.Join(cpu, ", "), total, r.CPUPerOrderMs[runnerCPU])
	if len(r.ForkCPUPerOrderMs) > 0 {
		var parts []string
		for _, n := range sortedKeys(r.ForkCPUPerOrderMs) {
			parts = append(parts, fmt.Sprintf("%s %.3f", n, r.ForkCPUPerOrderMs[n]))
		}
		row("  of it, forked children", "%s (Redis' AOF rewrites and snapshots, counted when reaped)", strings.Join(parts, ", "))
	}
	if len(r.IOSyscallsPerOrder) > 0 {
		var parts []string
		for _, n := range sortedKeys(r.IOSyscallsPerOrder) {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, r.IOSyscallsPerOrder[n]))
		}
		row("I/O syscalls/order", "%s; total %.1f (read and write family, /proc/<pid>/io)", strings.Join(parts, ", "), ioTotal(r))
	}
	if r.Steal != nil {
		row("CPU steal", "%.1f s, %.1f%% of the machine's CPU time during the load (taken by the hypervisor; CPU and latency figures are noisier the higher it is)",
			r.Steal.Seconds, 100*r.Steal.Share)
	}
	row("cold activation (proxy)", "%s = StartOrder latency (every order is a fresh activation)", p(r.Activation.Ms))
	row("replay read", "%s, %.1f events/stream (eventstore Load from the runner)", p(r.Replay.Ms), r.Replay.Events)
	if u := r.RedisPerOrder; u != nil {
		row("Redis per terminal order", "%.2f keys, %.0f bytes (retention off; MEMORY USAGE of every key naming the order, over its %d orders)", u.KeysPerOrder, u.BytesPerOrder, u.Orders)
	}
	if r.Ceiling.Orders > 0 {
		row("ceiling (Redis alone)", "%.1f orders/s for the same mix at concurrency %d (%.2f round trips, %.2f commands per order)",
			r.Ceiling.OrdersPerSec, r.Ceiling.Concurrency, r.Ceiling.RoundTripsPerOrder, r.Ceiling.CommandsPerOrder)
		row("measured / ceiling", "%.3f", r.Ceiling.MeasuredOverCeiling)
		if len(r.Ceiling.Substituted) > 0 {
			row("  substituted by GET", "%s", strings.Join(r.Ceiling.Substituted, ", "))
		}
	}
	if ol := r.OpenLoop; ol != nil {
		row("open loop", "%.1f orders/s (%s) for %.0f s: %d due, %d sent, %d terminal (confirmed %d, failed %d; errors %d; unexpected %d)",
			ol.RatePerSec, ol.RateSource, ol.DurationSec, ol.Counts.Scheduled, ol.Counts.Sent, ol.Counts.Terminal,
			ol.Counts.Confirmed, ol.Counts.Failed, ol.Counts.Errors, ol.Counts.Unexpected)
		row("  starts", "%d missed, %d late (> %.0f ms after due), max lag %.2f ms; peak in flight %d (limit %d)",
			ol.MissedStarts, ol.LateStarts, ol.LateThresholdMs, ol.MaxStartLagMs, ol.PeakInFlight, ol.MaxInFlight)
		row("  StartOrder (from due)", "%s  %s", hp(ol.StartOrderMs), goal(ol.StartOrderMs, ol.Goals.StartOrderP99Ms))
		row("  start -> terminal (from due)", "%s  %s", hp(ol.StartToTerminalMs), goal(ol.StartToTerminalMs, ol.Goals.StartToTerminalP99Ms))
		row("  GETs", "%d waits, %d polls", ol.Waits, ol.Polls)
		if ol.Steal != nil {
			row("  CPU steal", "%.1f s, %.1f%% of the machine's CPU time during the open loop", ol.Steal.Seconds, 100*ol.Steal.Share)
		}
		if ol.Counts.FirstError != "" {
			row("  first error", "%s", ol.Counts.FirstError)
		}
		if t := ol.Tail; t != nil && t.Orders > 0 {
			row("  slowest 1 %", "%d orders from %.2f ms; in %d of %d windows of %.0f ms (phase from %s), %.0f%% of them in the busiest 3; %.0f%% of their time before the 201",
				t.Orders, t.ThresholdMs, t.Windows, t.PhaseWindows, t.WindowMs, t.StartedAt.UTC().Format("15:04:05.000"), 100*t.InTop3, 100*t.StartShare)
			var ws []string
			for _, b := range t.Busiest {
				w := fmt.Sprintf("%.2f s: %d of %d due (max %.1f ms", b.AtSec, b.Slow, b.Due, b.MaxE2EMs)
				if b.CPUWaitMs != nil && b.IOWaitMs != nil {
					w += fmt.Sprintf("; waits for a core %.0f ms, for I/O %.0f ms", *b.CPUWaitMs, *b.IOWaitMs)
				}
				ws = append(ws, w+")")
			}
			row("  busiest windows", "%s", strings.Join(ws, "; "))
			if t.MedianCPUWaitMs != nil && t.MedianIOWaitMs != nil {
				row("  median window", "waits for a core %.0f ms, for I/O %.0f ms of its %.0f ms (/proc/pressure, some)", *t.MedianCPUWaitMs, *t.MedianIOWaitMs, t.WindowMs)
			}
			var evs []string
			for _, e := range t.Redis {
				evs = append(evs, fmt.Sprintf("%s%s: %d s, max %d ms, at %v", e.Node, e.Event, e.Seconds, e.MaxMs, e.AtSec))
			}
			switch {
			case t.RedisErr != "":
				row("  Redis latency monitor", "unread: %s", t.RedisErr)
			case len(evs) == 0:
				row("  Redis latency monitor", "nothing at or above %d ms", t.RedisThresholdMs)
			default:
				row("  Redis latency monitor", "%s", strings.Join(evs, "; "))
			}
			if len(t.RunQueue) > 0 {
				row("  on a core / waiting, ms/s", "%s", formatRunQueue(t.RunQueue))
			}
			for _, st := range t.Stages {
				row("  slowest 1 % by "+st.By, "%s", formatStages(st))
			}
		}
	}
	for _, g := range r.Goals {
		row("goal", "%s: %s [%s]", g.Goal, goalFigure(g), g.Verdict)
	}
	tw.Flush()
	printOverload(w, r.Overload)
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	fmt.Fprintln(w)
}

func hp(x hdrPct) string {
	return fmt.Sprintf("p50 %.2f  p99 %.2f  p99.9 %.2f  max %.2f ms (n=%d)", x.P50, x.P99, x.P999, x.Max, x.N)
}

// goal prints a p99 beside its goal; the bench asserts none.
func goal(x hdrPct, goalMs float64) string {
	verdict := "met"
	switch {
	case x.N == 0:
		verdict = "no data"
	case x.P99 >= goalMs:
		verdict = "NOT met"
	}
	return fmt.Sprintf("[goal p99 < %.0f ms: %s]", goalMs, verdict)
}

func fmtCounts(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func createFile(path string) (*os.File, error) { return os.Create(path) }
