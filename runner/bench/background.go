package main

import (
	"fmt"
	"strings"
)

// Issue 58's figures: what Redis does for the orders themselves, apart
// from what it does for replication acknowledgements and for a cluster
// at rest, and the goal on it.
const (
	// goalCommandsPerOrder is the most Redis commands an order of the
	// bench mix may cost, WAIT and background apart.
	goalCommandsPerOrder = 35.0
	// goalRedisCPUOverBaseline is the most redis-server CPU per order
	// may be, as a share of the baseline commit's (BENCH_BASELINE).
	goalRedisCPUOverBaseline = 0.5
)

// waitCommands acknowledge replication (-redis-wait-replicas): their
// count follows the replication setting, not the order's work.
var waitCommands = map[string]bool{"wait": true, "waitaof": true}

// background is the cluster at rest, over an idle window before the
// load with no order in flight and every grain passivated: the Redis
// commands that membership heartbeats and polling, the level gate and
// the reconciler send, and each process's CPU, per second.
type background struct {
	WindowSec float64 `json:"windowSec"`
	// RedisCommandsPerSec counts every order-path command name
	// (notOrderCommands left out, as in the load's figures), WAIT
	// included; WaitPerSec is the WAIT part of it.
	RedisCommandsPerSec float64            `json:"redisCommandsPerSec"`
	WaitPerSec          float64            `json:"waitPerSec"`
	ByName              map[string]float64 `json:"byName"`
	// CPUMsPerSec is each process's CPU time per second of the window,
	// by the load's process names ("redis-server" summed over masters).
	CPUMsPerSec map[string]float64 `json:"cpuMsPerSec"`
}

// measureBackground is the background between two snapshots.
func measureBackground(a, b snap) *background {
	sec := b.At.Sub(a.At).Seconds()
	if sec <= 0 {
		return nil
	}
	bg := &background{WindowSec: sec, ByName: map[string]float64{}, CPUMsPerSec: map[string]float64{}}
	for name, x := range b.Cmdstats {
		d := x.Calls - a.Cmdstats[name].Calls
		if d <= 0 || notOrderCommands[name] {
			continue
		}
		rate := float64(d) / sec
		bg.ByName[name] = rate
		bg.RedisCommandsPerSec += rate
		if waitCommands[name] {
			bg.WaitPerSec += rate
		}
	}
	for name, x := range b.CPU {
		if y, ok := a.CPU[name]; ok && name != runnerCPU {
			bg.CPUMsPerSec[name] = (x - y) * 1000 / sec
		}
	}
	return bg
}

// setBackground counts bg apart from the load's commands: its rate, WAIT
// left out (the load's WAIT is apart already), over the load's length,
// per order.
func (r *report) setBackground(bg *background) {
	r.Background = bg
	if bg != nil && r.Throughput.OrdersPerSec > 0 {
		r.RedisCommands.BackgroundPerOrder = (bg.RedisCommandsPerSec - bg.WaitPerSec) / r.Throughput.OrdersPerSec
	}
	r.RedisCommands.ForOrdersPerOrder = max(0, r.RedisCommands.PerOrder-r.RedisCommands.WaitPerOrder-r.RedisCommands.BackgroundPerOrder)
	r.Goals = reportGoals(r)
}

// reportGoals judges one run's figures.
func reportGoals(r *report) []peerGoal {
	g := peerGoal{Goal: fmt.Sprintf("Redis commands per order <= %.0f (INFO commandstats, WAIT and background apart)", goalCommandsPerOrder),
		Figure: r.RedisCommands.ForOrdersPerOrder, Unit: "commands/order"}
	switch {
	case r.RedisCommands.PerOrder == 0:
		g.Verdict = "no data"
	case r.Background == nil:
		g.Verdict = "no data: no idle window (-idle-window 0), so background is not apart"
	default:
		g.Met = g.Figure <= goalCommandsPerOrder
	}
	return []peerGoal{verdict(g)}
}

// compareGoals judges the working tree against the baseline.
func compareGoals(base, cur *report) []peerGoal {
	g := peerGoal{Goal: fmt.Sprintf("redis-server CPU per order <= %.1fx the baseline's", goalRedisCPUOverBaseline), Unit: "x baseline"}
	b, okB := base.CPUPerOrderMs["redis-server"]
	c, okC := cur.CPUPerOrderMs["redis-server"]
	if !okB || !okC || b <= 0 {
		g.Verdict = "no data"
	} else {
		g.Figure = c / b
		g.Met = g.Figure <= goalRedisCPUOverBaseline
	}
	return []peerGoal{verdict(g)}
}

// verdict fills in a goal's verdict from Met, unless it has one.
func verdict(g peerGoal) peerGoal {
	if g.Verdict == "" {
		g.Verdict = map[bool]string{true: "met", false: "not met"}[g.Met]
	}
	return g
}

// formatBackground is the background's line of the report.
func formatBackground(bg *background) string {
	var cpu []string
	for _, n := range sortedKeys(bg.CPUMsPerSec) {
		cpu = append(cpu, fmt.Sprintf("%s %.2f", n, bg.CPUMsPerSec[n]))
	}
	return fmt.Sprintf("%.1f Redis commands/s (of them WAIT %.1f); CPU ms/s %s (idle window of %.0f s)",
		bg.RedisCommandsPerSec, bg.WaitPerSec, strings.Join(cpu, ", "), bg.WindowSec)
}
