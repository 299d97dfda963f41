package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The fan-out phase (issue 58, point 3): whether an order costs more the
// more APIs the cluster has. A cost that grows with the number of
// processes grows with success: today every API receives every order's
// terminal notice, and membership traffic grows with the members. So the
// same open-loop rate is offered to one cluster per API count (two
// workflow members each), and the CPU time and read/write system calls
// of every process of the cluster (the load generator left out) are
// divided by the orders that ended. The cluster at rest is measured
// first, over an idle window, and its rate over the load's length is
// taken out: what the processes do with no order in flight is reported
// apart, per process.

// goalFanoutRatio is the most an order may cost with the last API count
// over what it costs with the first (2 and 6 by default), in CPU and in
// system calls, the cluster at rest apart.
const goalFanoutRatio = 1.1

// fanoutReport is the phase's result, written to bench-fanout.json.
type fanoutReport struct {
	Rate        float64      `json:"rate"`
	DurationSec float64      `json:"durationSec"`
	Runs        []*fanoutRun `json:"runs"`
	// Ratios are the last run's figures over the first's.
	CPURatio      float64    `json:"cpuPerOrderRatio"`
	SyscallsRatio float64    `json:"syscallsPerOrderRatio"`
	Goals         []peerGoal `json:"goals"`
}

// fanoutRun is one API count's cluster under the phase's load.
type fanoutRun struct {
	APIs int `json:"apis"`
	// LoadAPIs is how many of them the open loop went through.
	LoadAPIs   int    `json:"loadApis"`
	Workflows  int    `json:"workflows"`
	Orders     int    `json:"orders"`
	Errors     int    `json:"errors"`
	FirstError string `json:"firstError,omitempty"`
	// CPUMsPerOrder and SyscallsPerOrder are the cluster's processes'
	// CPU time and read/write system calls per ended order, the cluster
	// at rest taken out; the Raw figures keep it in.
	CPUMsPerOrder       float64 `json:"cpuMsPerOrder"`
	CPUMsPerOrderRaw    float64 `json:"cpuMsPerOrderRaw"`
	SyscallsPerOrder    float64 `json:"syscallsPerOrder"`
	SyscallsPerOrderRaw float64 `json:"syscallsPerOrderRaw"`
	// ByRole splits CPUMsPerOrder into the APIs (summed), the workflow
	// members (summed) and redis-server; SyscallsByRole the same.
	ByRole         map[string]float64 `json:"cpuMsPerOrderByRole"`
	SyscallsByRole map[string]float64 `json:"syscallsPerOrderByRole"`
	// RedisCommandsPerOrder is INFO commandstats over the orders, the
	// cluster at rest apart.
	RedisCommandsPerOrder float64 `json:"redisCommandsPerOrder"`
	// Idle is the cluster at rest: CPU ms and system calls per second,
	// per process, and Redis commands per second.
	IdleCPUMsPerSec     map[string]float64 `json:"idleCpuMsPerSec"`
	IdleSyscallsPerSec  map[string]float64 `json:"idleSyscallsPerSec"`
	IdleRedisCmdsPerSec float64            `json:"idleRedisCommandsPerSec"`
	// StartP99Ms and E2EP99Ms are the open loop's tails, for context.
	StartP99Ms float64 `json:"startOrderP99Ms"`
	E2EP99Ms   float64 `json:"startToTerminalP99Ms"`
	Steal      *steal  `json:"steal,omitempty"`
}

// parseAPICounts reads -fanout-apis: at least two counts, each from 1 to
// localcluster.MaxNodesPerRole, in increasing order.
func parseAPICounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > localcluster.MaxNodesPerRole {
			return nil, fmt.Errorf("-fanout-apis %q: each count from 1 to %d", s, localcluster.MaxNodesPerRole)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-fanout-apis %q: counts in increasing order", s)
		}
		out = append(out, n)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("-fanout-apis %q: at least two counts", s)
	}
	return out, nil
}

// measureFanout runs the phase with t's binaries: one cluster per API
// count, one after the other, each killed before the next starts.
func measureFanout(ctx context.Context, o options, t target) (*fanoutReport, error) {
	counts, err := parseAPICounts(o.fanoutAPIs)
	if err != nil {
		return nil, err
	}
	rep := &fanoutReport{Rate: o.fanoutRate, DurationSec: o.fanoutDuration.Seconds()}
	for _, n := range counts {
		r, err := fanoutOnce(ctx, o, t, n)
		if err != nil {
			return nil, fmt.Errorf("%d APIs: %w", n, err)
		}
		rep.Runs = append(rep.Runs, r)
	}
	rep.judge()
	printFanout(os.Stdout, rep)
	if err := jsonfile.Write(filepath.Join(t.Dir, "bench-fanout.json"), rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// judge sets the ratios and the goals from the first and the last run.
func (r *fanoutReport) judge() {
	if len(r.Runs) < 2 {
		return
	}
	first, last := r.Runs[0], r.Runs[len(r.Runs)-1]
	goal := func(what string, a, b float64) (float64, peerGoal) {
		g := peerGoal{Goal: fmt.Sprintf("%s per order with %d APIs <= %.1fx that with %d (the cluster at rest apart)", what, last.APIs, goalFanoutRatio, first.APIs),
			Unit: "x"}
		if a <= 0 || b <= 0 || first.Orders == 0 || last.Orders == 0 {
			g.Verdict = "no data"
			return 0, verdict(g)
		}
		g.Figure = b / a
		g.Met = g.Figure <= goalFanoutRatio
		return g.Figure, verdict(g)
	}
	var cpu, sys peerGoal
	r.CPURatio, cpu = goal("CPU time", first.CPUMsPerOrder, last.CPUMsPerOrder)
	r.SyscallsRatio, sys = goal("read/write system calls", first.SyscallsPerOrder, last.SyscallsPerOrder)
	r.Goals = []peerGoal{cpu, sys}
}

// fanoutOnce measures one API count on a cluster of its own.
func fanoutOnce(ctx context.Context, o options, t target, apis int) (*fanoutRun, error) {
	dir := filepath.Join(t.Dir, fmt.Sprintf("fanout-%dapis", apis))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf("=== fan-out phase: %d APIs, %.1f orders/s for %s ===", apis, o.fanoutRate, o.fanoutDuration)
	m, err := startMeasured(ctx, o, t, dir, "f", func(cfg *localcluster.Config) { cfg.APIs = apis })
	if err != nil {
		return nil, err
	}
	defer m.close()
	c, rdb, gen := m.c, m.rdb, m.gen
	if o.warmup > 0 {
		// Every API warmed: the orders go round the APIs in turn.
		w := gen.run(ctx, "warmup", 0, max(o.warmup, 32*apis), quiet)
		if w.errors() == len(w.Results) {
			return nil, fmt.Errorf("warm-up: every order failed, first error: %s", w.firstError())
		}
	}
	procs := map[string]proc{}
	for _, n := range append(c.APIs(), c.Workflows()...) {
		procs[n] = proc{PID: c.PID(n), MetricsURL: c.MetricsURL(n)}
	}
	if err := settlePassivations(ctx, workflowMetrics(c), o.idleTimeout, passivationSettle, "fan-out idle window"); err != nil {
		return nil, err
	}
	idle, err := snapshot(ctx, rdb, procs, c.RedisPIDs()...)
	if err != nil {
		return nil, err
	}
	window := o.idleWindow
	if window <= 0 {
		window = 10 * time.Second
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	before, err := snapshot(ctx, rdb, procs, c.RedisPIDs()...)
	if err != nil {
		return nil, err
	}
	if n := o.fanoutLoadAPIs; n > 0 && n < len(m.apis) {
		gen.cfg.APIs = m.apis[:n]
	}
	cfg := openLoopConfig{Rate: o.fanoutRate, Duration: o.fanoutDuration, MaxInFlight: o.openLoopMaxInFlight, SendGrace: o.pollTimeout}
	ol := gen.openLoop(ctx, cfg, reportProgress)
	after, err := snapshot(ctx, rdb, procs, c.RedisPIDs()...)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r := fanoutFigures(apis, len(c.Workflows()), idle, before, after, ol.Results)
	r.Steal = ol.Steal
	r.LoadAPIs = len(gen.cfg.APIs)
	st := buildOpenLoop(cfg, "-fanout-rate", 0, ol)
	r.StartP99Ms, r.E2EP99Ms = st.StartOrderMs.P99, st.StartToTerminalMs.P99
	if r.Orders == 0 {
		return nil, fmt.Errorf("no order ended, first error: %s", r.FirstError)
	}
	return r, nil
}

// fanoutFigures computes one run's figures from the snapshots that open
// the idle window (idle), end it and open the load (before), and end the
// load (after).
func fanoutFigures(apis, workflows int, idle, before, after snap, results []orderResult) *fanoutRun {
	r := &fanoutRun{APIs: apis, Workflows: workflows, ByRole: map[string]float64{}, SyscallsByRole: map[string]float64{},
		IdleSyscallsPerSec: map[string]float64{}}
	for _, o := range results {
		switch {
		case o.terminal():
			r.Orders++
		default:
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = o.Err
			}
		}
	}
	idleSec, loadSec := before.At.Sub(idle.At).Seconds(), after.At.Sub(before.At).Seconds()
	if r.Orders == 0 || idleSec <= 0 || loadSec <= 0 {
		return r
	}
	per := float64(r.Orders)
	// The cluster at rest: its CPU and commands per second, as the main
	// phase's idle window reads them; its system calls below.
	bg := measureBackground(idle, before)
	r.IdleCPUMsPerSec, r.IdleRedisCmdsPerSec = bg.CPUMsPerSec, bg.RedisCommandsPerSec
	var cpu, cpuRaw, sys, sysRaw float64
	for name, restMs := range bg.CPUMsPerSec {
		x, ok := after.CPU[name]
		if !ok {
			continue
		}
		raw := (x - before.CPU[name]) * 1000
		net := raw - restMs*loadSec
		cpuRaw += raw
		cpu += net
		r.ByRole[fanoutRole(name)] += net / per
	}
	for name, x := range after.IO {
		b, okB := before.IO[name]
		a, okA := idle.IO[name]
		if !okB || !okA {
			continue
		}
		rest := float64(b-a) / idleSec
		r.IdleSyscallsPerSec[name] = rest
		raw := float64(x - b)
		net := raw - rest*loadSec
		sysRaw += raw
		sys += net
		r.SyscallsByRole[fanoutRole(name)] += net / per
	}
	r.CPUMsPerOrder, r.CPUMsPerOrderRaw = cpu/per, cpuRaw/per
	r.SyscallsPerOrder, r.SyscallsPerOrderRaw = sys/per, sysRaw/per
	var cmds float64
	for name, x := range after.Cmdstats {
		if d := x.Calls - before.Cmdstats[name].Calls; d > 0 && !notOrderCommands[name] {
			cmds += float64(d)
		}
	}
	cmds -= bg.RedisCommandsPerSec * loadSec
	r.RedisCommandsPerOrder = max(0, cmds) / per
	return r
}

// fanoutRole is a process's role in the fan-out figures.
func fanoutRole(name string) string {
	switch {
	case name == "redis-server":
		return "redis-server"
	case strings.HasPrefix(name, "api-"):
		return "apis"
	case strings.HasPrefix(name, "workflow-"):
		return "workflows"
	}
	return name
}

func printFanout(w io.Writer, r *fanoutReport) {
	fmt.Fprintf(w, "\n=== fan-out phase: %.1f orders/s for %.0f s, per API count ===\n", r.Rate, r.DurationSec)
	fmt.Fprintf(w, "%-9s %7s %10s %10s %10s %10s %12s %12s %10s %10s\n", "APIs/load", "orders", "CPU ms/o", "(raw)", "syscalls/o", "(raw)", "APIs ms/o", "wf ms/o", "redis ms/o", "cmds/o")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "%-9s %7d %10.3f %10.3f %10.1f %10.1f %12.3f %12.3f %10.3f %10.2f\n", fmt.Sprintf("%d/%d", x.APIs, x.LoadAPIs), x.Orders,
			x.CPUMsPerOrder, x.CPUMsPerOrderRaw, x.SyscallsPerOrder, x.SyscallsPerOrderRaw,
			x.ByRole["apis"], x.ByRole["workflows"], x.ByRole["redis-server"], x.RedisCommandsPerOrder)
	}
	for _, x := range r.Runs {
		var idle []string
		for _, n := range sortedKeys(x.IdleCPUMsPerSec) {
			idle = append(idle, fmt.Sprintf("%s %.1f", n, x.IdleCPUMsPerSec[n]))
		}
		fmt.Fprintf(w, "at rest, %d APIs: CPU ms/s %s; Redis %.1f commands/s\n", x.APIs, strings.Join(idle, ", "), x.IdleRedisCmdsPerSec)
	}
	for _, g := range r.Goals {
		fmt.Fprintf(w, "  goal  %s: %.3f%s, %s\n", g.Goal, g.Figure, g.Unit, g.Verdict)
	}
}
