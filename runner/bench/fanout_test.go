package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One run's figures: the processes' CPU and system calls over the load,
// less the cluster at rest's rate over the load's length, per ended
// order; the load generator is not the cluster; roles are summed.
func TestFanoutFiguresTakeTheClusterAtRestOut(t *testing.T) {
	at := time.Unix(1000, 0)
	idle := snap{At: at,
		CPU:      map[string]float64{"api-a": 1, "api-b": 1, "workflow-a": 2, "redis-server": 3, runnerCPU: 0},
		IO:       map[string]uint64{"api-a": 100, "api-b": 100, "workflow-a": 100, "redis-server": 100},
		Cmdstats: map[string]cmdStat{"hget": {Calls: 0}, "info": {Calls: 0}}}
	// 10 s at rest: each process 10 ms/s of CPU and 10 calls/s; Redis 2
	// commands/s (INFO is no order command).
	before := snap{At: at.Add(10 * time.Second),
		CPU:      map[string]float64{"api-a": 1.1, "api-b": 1.1, "workflow-a": 2.1, "redis-server": 3.1, runnerCPU: 5},
		IO:       map[string]uint64{"api-a": 200, "api-b": 200, "workflow-a": 200, "redis-server": 200},
		Cmdstats: map[string]cmdStat{"hget": {Calls: 20}, "info": {Calls: 7}}}
	// 2 s of load, 100 orders ended, 1 error.
	after := snap{At: at.Add(12 * time.Second),
		CPU:      map[string]float64{"api-a": 1.22, "api-b": 1.32, "workflow-a": 2.62, "redis-server": 3.42, runnerCPU: 50},
		IO:       map[string]uint64{"api-a": 1220, "api-b": 1220, "workflow-a": 2220, "redis-server": 3220},
		Cmdstats: map[string]cmdStat{"hget": {Calls: 4024}, "info": {Calls: 9}}}
	var res []orderResult
	for range 100 {
		res = append(res, orderResult{Status: "Confirmed"})
	}
	res = append(res, orderResult{Err: "boom"})

	r := fanoutFigures(2, 1, idle, before, after, res)
	require.Equal(t, 100, r.Orders)
	require.Equal(t, 1, r.Errors)
	require.Equal(t, "boom", r.FirstError)
	// Raw: 120+220+520+320 ms over 100 orders; at rest 4 × 10 ms/s × 2 s.
	require.InDelta(t, 11.8, r.CPUMsPerOrderRaw, 1e-6)
	require.InDelta(t, 11.0, r.CPUMsPerOrder, 1e-6)
	require.InDelta(t, 10.0, r.IdleCPUMsPerSec["api-a"], 1e-6)
	require.NotContains(t, r.IdleCPUMsPerSec, runnerCPU, "the load generator is not the cluster")
	require.InDelta(t, (100+200)/100.0, r.ByRole["apis"], 1e-6)
	require.InDelta(t, 5.0, r.ByRole["workflows"], 1e-6)
	require.InDelta(t, 3.0, r.ByRole["redis-server"], 1e-6)
	// Calls: 1020+1020+2020+3020 raw; at rest 4 × 10/s × 2 s.
	require.InDelta(t, 70.8, r.SyscallsPerOrderRaw, 1e-6)
	require.InDelta(t, 70.0, r.SyscallsPerOrder, 1e-6)
	require.InDelta(t, 20.0, r.SyscallsByRole["apis"], 1e-6)
	// Commands: 4004 over the load, 2/s × 2 s of them the cluster at rest.
	require.InDelta(t, 2.0, r.IdleRedisCmdsPerSec, 1e-6)
	require.InDelta(t, 40.0, r.RedisCommandsPerOrder, 1e-6)
}

// The goals compare the last API count's figures with the first's.
func TestFanoutGoalsCompareTheLastAPICountWithTheFirst(t *testing.T) {
	rep := &fanoutReport{Runs: []*fanoutRun{
		{APIs: 2, Orders: 10, CPUMsPerOrder: 2.0, SyscallsPerOrder: 100},
		{APIs: 6, Orders: 10, CPUMsPerOrder: 2.1, SyscallsPerOrder: 130},
	}}
	rep.judge()
	require.Len(t, rep.Goals, 2)
	require.InDelta(t, 1.05, rep.CPURatio, 1e-9)
	require.Equal(t, "met", rep.Goals[0].Verdict)
	require.Contains(t, rep.Goals[0].Goal, "with 6 APIs <= 1.1x that with 2")
	require.InDelta(t, 1.3, rep.SyscallsRatio, 1e-9)
	require.Equal(t, "not met", rep.Goals[1].Verdict)

	rep.Runs[1].Orders = 0
	rep.judge()
	require.Equal(t, "no data", rep.Goals[0].Verdict)

	var out bytes.Buffer
	printFanout(&out, rep)
	require.Contains(t, out.String(), "fan-out phase")
}

func TestFanoutAPICounts(t *testing.T) {
	got, err := parseAPICounts("2, 6")
	require.NoError(t, err)
	require.Equal(t, []int{2, 6}, got)
	for _, bad := range []string{"2", "6,2", "0,2", "2,x", "2,27"} {
		_, err := parseAPICounts(bad)
		require.Error(t, err, bad)
	}
	_, err = parseOptions([]string{"-fanout-apis", "6"})
	require.Error(t, err)
	_, err = parseOptions([]string{"-fanout-apis", "6", "-fanout-rate", "0"})
	require.NoError(t, err, "a skipped phase's counts are not read")
	_, err = parseOptions([]string{"-fanout-apis", "2,6", "-fanout-load-apis", "3"})
	require.Error(t, err, "the load goes through at most the first count's APIs")
	_, err = parseOptions([]string{"-fanout-apis", "2,6", "-fanout-load-apis", "2"})
	require.NoError(t, err)
}
