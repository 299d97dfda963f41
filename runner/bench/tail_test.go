package main

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// tailPhase is 1,000 orders due every 10 ms, each 5 ms to its 201 and
// 10 ms to its terminal status, except those slow returns true for.
func tailPhase(slow func(i int) bool) []orderResult {
	rs := make([]orderResult, 1000)
	for i := range rs {
		rs[i] = orderResult{Start: time.Duration(i) * 10 * time.Millisecond, StartLat: 5 * time.Millisecond,
			E2E: 10 * time.Millisecond, Status: "Confirmed", Path: "success", API: i % 2}
		if slow(i) {
			rs[i].StartLat, rs[i].E2E = 150*time.Millisecond, 200*time.Millisecond
		}
	}
	return rs
}

// A stall: the ten slowest orders were due within one window, and most
// of their time went before the 201.
func TestTailFindsAStall(t *testing.T) {
	ts := buildTail(tailPhase(func(i int) bool { return i >= 500 && i < 510 }), time.Time{}, 10*time.Second, nil)
	require.Equal(t, 10, ts.Orders)
	require.InDelta(t, 200, ts.ThresholdMs, 0.001)
	require.Equal(t, 40, ts.PhaseWindows)
	require.Equal(t, 1, ts.Windows, "ten orders due 5.00–5.09 s share a 250 ms window")
	require.InDelta(t, 1, ts.InTop3, 1e-9)
	require.InDelta(t, 0.75, ts.StartShare, 1e-9)
	require.Equal(t, tailWindowStats{AtSec: 5, Slow: 10, Due: 25, MaxE2EMs: 200}, ts.Busiest[0])
	require.Equal(t, map[string]int{"0": 5, "1": 5}, ts.ByAPI)
}

// A queue: the slowest orders spread over the phase, one per window.
func TestTailFindsASpreadTail(t *testing.T) {
	ts := buildTail(tailPhase(func(i int) bool { return i%100 == 0 }), time.Time{}, 10*time.Second, nil)
	require.Equal(t, 10, ts.Orders)
	require.Equal(t, 10, ts.Windows)
	require.InDelta(t, 0.3, ts.InTop3, 1e-9)
	require.Len(t, ts.Busiest, 5)
}

// An order that failed is among the slowest whatever its latency.
func TestTailCountsAFailureAsSlowest(t *testing.T) {
	rs := tailPhase(func(int) bool { return false })
	for i := range rs {
		rs[i].E2E += time.Duration(i) * time.Microsecond // the last are the slowest
	}
	rs[7].Err, rs[7].Status = "503 STORE_UNAVAILABLE", ""
	ts := buildTail(rs, time.Time{}, 10*time.Second, nil)
	require.Equal(t, 2, ts.Windows)
	require.Equal(t, tailWindowStats{AtSec: 9.75, Slow: 9, Due: 25, MaxE2EMs: 10.999}, ts.Busiest[0])
	require.Equal(t, 0.0, ts.Busiest[1].AtSec, "order 7 was due at 70 ms")
	require.Equal(t, 1, ts.Busiest[1].Slow)
}

// Redis' latency monitor, against a real server: a command that blocks
// the main thread for 30 ms is recorded, during the phase only.
func TestRedisLatencyMonitorRecordsABlockedMainThread(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	block := func() { require.NoError(t, rdb.Eval(ctx, blockFor30ms, nil).Err()) }
	block() // before the phase: not recorded
	require.NoError(t, startRedisLatency(ctx, rdb))
	phaseStart := time.Now()
	block()
	all, err := readRedisLatency(ctx, rdb, phaseStart)
	require.NoError(t, err)
	// A loaded machine may take the main thread off its core during a
	// fast command too ("fast-command"): only the slow command's event
	// is this test's.
	evs := slices.DeleteFunc(slices.Clone(all), func(e redisLatencyEvent) bool { return e.Event == "fast-command" })
	require.Len(t, evs, 1, "%+v", all)
	require.Equal(t, "command", evs[0].Event)
	require.GreaterOrEqual(t, evs[0].MaxMs, int64(30))
	require.Equal(t, 1, evs[0].Seconds)
	threshold, err := rdb.ConfigGet(ctx, "latency-monitor-threshold").Result()
	require.NoError(t, err)
	require.Equal(t, "0", threshold["latency-monitor-threshold"], "the monitor is off again")
}

// blockFor30ms keeps Redis' main thread busy for 30 ms (DEBUG SLEEP is
// off on Debian's server).
const blockFor30ms = `local t = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) >= 30000 then return 1 end
end`

func TestOrdersCSVHoldsEveryOrderByDueTime(t *testing.T) {
	rs := tailPhase(func(i int) bool { return i == 3 })
	rs[0], rs[1] = rs[1], rs[0]
	path := filepath.Join(t.TempDir(), "orders.csv")
	require.NoError(t, writeOrdersCSV(path, rs))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1001)
	require.Equal(t, "due_ms", rows[0][0])
	require.Equal(t, []string{"0.000", "0.000", "5.000", "10.000", "0", "success", "Confirmed", "", ""}, rows[1])
	require.Equal(t, "200.000", rows[4][3])
}

// Each window's pressure stall time is the difference of the totals read
// at its bounds, and the busiest windows carry theirs.
func TestTailReadsEachWindowsPressure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var ss []psiSample
	for i := range 41 { // a sample every 250 ms; window 20 waited 200 ms for a core
		cpu := int64(i) * 10_000
		if i > 20 {
			cpu += 190_000
		}
		ss = append(ss, psiSample{At: t0.Add(time.Duration(i) * tailWindow), CPU: cpu, IO: int64(i) * 1_000})
	}
	ts := buildTail(tailPhase(func(i int) bool { return i >= 500 && i < 510 }), t0, 10*time.Second, ss)
	require.NotNil(t, ts.Busiest[0].CPUWaitMs)
	require.InDelta(t, 200, *ts.Busiest[0].CPUWaitMs, 1e-9, "window 20 (5.00 s)")
	require.InDelta(t, 1, *ts.Busiest[0].IOWaitMs, 1e-9)
	require.InDelta(t, 10, *ts.MedianCPUWaitMs, 1e-9)
	_, ok := readPSI()
	if _, err := os.Stat("/proc/pressure/cpu"); err == nil {
		require.True(t, ok, "this kernel has PSI")
	}
}
