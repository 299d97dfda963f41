package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The orders' own commands are the load's less WAIT and the cluster at
// rest, whose rate the idle window measures; the goal judges them and
// says "no data" without a window.
func TestCommandsPerOrderLeaveWaitAndBackgroundApart(t *testing.T) {
	at := time.Unix(1000, 0)
	idle := snap{At: at, Cmdstats: map[string]cmdStat{"hset": {Calls: 100}, "wait": {Calls: 10}, "info": {Calls: 5}},
		CPU: map[string]float64{"api-a": 1, "redis-server": 2, runnerCPU: 9}}
	rest := snap{At: at.Add(10 * time.Second), Cmdstats: map[string]cmdStat{"hset": {Calls: 150}, "wait": {Calls: 20}, "info": {Calls: 50}},
		CPU: map[string]float64{"api-a": 1.1, "redis-server": 2.5, runnerCPU: 10}}
	bg := measureBackground(idle, rest)
	require.InDelta(t, 6.0, bg.RedisCommandsPerSec, 1e-9, "hset 5/s and wait 1/s; INFO is no order command")
	require.InDelta(t, 1.0, bg.WaitPerSec, 1e-9)
	require.InDelta(t, 10.0, bg.CPUMsPerSec["api-a"], 1e-9)
	require.InDelta(t, 50.0, bg.CPUMsPerSec["redis-server"], 1e-9)
	require.NotContains(t, bg.CPUMsPerSec, runnerCPU, "the load generator is not the cluster")

	// 10 orders in 1 s: 400 commands, 20 of them WAIT.
	before := snap{Cmdstats: map[string]cmdStat{"evalsha": {Calls: 0}, "wait": {Calls: 0}}}
	after := snap{Cmdstats: map[string]cmdStat{"evalsha": {Calls: 380}, "wait": {Calls: 20}}}
	var res loadResult
	for range 10 {
		res.Results = append(res.Results, orderResult{Path: pathSuccess, Status: "Confirmed"})
	}
	rep := buildReport(options{concurrency: 1, duration: time.Second}, res, before, after)
	require.InDelta(t, 40.0, rep.RedisCommands.PerOrder, 1e-9)
	require.InDelta(t, 2.0, rep.RedisCommands.WaitPerOrder, 1e-9)
	require.Len(t, rep.Goals, 1)
	require.Contains(t, rep.Goals[0].Verdict, "no data", "without an idle window the background is not apart")

	rep.Throughput.OrdersPerSec = 10
	rep.setBackground(bg)
	// Background: 5 commands/s without WAIT, over 10 orders/s.
	require.InDelta(t, 0.5, rep.RedisCommands.BackgroundPerOrder, 1e-9)
	require.InDelta(t, 37.5, rep.RedisCommands.ForOrdersPerOrder, 1e-9)
	require.Equal(t, "not met", rep.Goals[0].Verdict)
	require.InDelta(t, 37.5, rep.Goals[0].Figure, 1e-9)

	rep.RedisCommands.PerOrder = 30
	rep.setBackground(bg)
	require.Equal(t, "met", rep.Goals[0].Verdict)

	var out bytes.Buffer
	printReport(&out, rep)
	require.Contains(t, out.String(), "for the orders 27.50")
	require.Contains(t, out.String(), "Redis commands per order <= 35")
}

// The Redis CPU goal is the working tree's redis-server CPU per order
// over the baseline's.
func TestRedisCPUGoalAgainstTheBaseline(t *testing.T) {
	base := &report{CPUPerOrderMs: map[string]float64{"redis-server": 0.5}}
	cur := &report{CPUPerOrderMs: map[string]float64{"redis-server": 0.2}}
	g := compare(base, cur).Goals
	require.Len(t, g, 1)
	require.InDelta(t, 0.4, g[0].Figure, 1e-9)
	require.Equal(t, "met", g[0].Verdict)
	cur.CPUPerOrderMs["redis-server"] = 0.3
	require.Equal(t, "not met", compare(base, cur).Goals[0].Verdict)
	require.Equal(t, "no data", compare(&report{}, cur).Goals[0].Verdict)
}
