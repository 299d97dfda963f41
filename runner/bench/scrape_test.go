package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exposition renders the Redis metrics as a process serves them.
func exposition(events, readmodelRT, hmget, pipelines int) string {
	return fmt.Sprintf(`# HELP shoppingmall_redis_round_trips_total Redis round trips.
# TYPE shoppingmall_redis_round_trips_total counter
shoppingmall_redis_round_trips_total{store="events"} %d
shoppingmall_redis_round_trips_total{store="readmodel"} %d
# HELP shoppingmall_redis_commands_total Redis commands.
# TYPE shoppingmall_redis_commands_total counter
shoppingmall_redis_commands_total{command="evalsha",store="events"} %d
shoppingmall_redis_commands_total{command="hmget",store="readmodel"} %d
# HELP shoppingmall_redis_pipelines_total Redis pipelines.
# TYPE shoppingmall_redis_pipelines_total counter
shoppingmall_redis_pipelines_total{store="events"} %d
# HELP process_cpu_seconds_total CPU.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
`, events, readmodelRT, events, hmget, pipelines)
}

// The report's client-side figures are the deltas of what /metrics
// served before and after the load, per terminal order.
func TestRoundTripFiguresFromTwoScrapes(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/metrics", r.URL.Path)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body.Load().(string)))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	scrapeAs := func(s string) scraped {
		body.Store(s)
		m, err := scrapeMetrics(ctx, srv.URL)
		require.NoError(t, err)
		return m
	}
	// api-a: only read-model polls; workflow-a: events work.
	before := snap{Metrics: map[string]scraped{
		"api-a":      scrapeAs(exposition(0, 100, 100, 0)),
		"workflow-a": scrapeAs(exposition(500, 0, 0, 7)),
	}, CPU: map[string]float64{}}
	after := snap{Metrics: map[string]scraped{
		"api-a":      scrapeAs(exposition(0, 130, 130, 0)),
		"workflow-a": scrapeAs(exposition(580, 0, 0, 17)),
	}, CPU: map[string]float64{}}
	require.Equal(t, 1.5, after.Metrics["api-a"].sum("process_cpu_seconds_total", nil))

	var res loadResult
	for range 10 {
		res.Results = append(res.Results, orderResult{Path: pathSuccess, Status: "Confirmed"})
	}
	res.Polls = 30
	rep := buildReport(options{concurrency: 1, duration: time.Second}, res, before, after)
	cr := rep.ClientRoundTrips
	require.Equal(t, 11.0, cr.PerOrder, "(30 + 80) / 10")
	require.Equal(t, 8.0, cr.WorkflowPerOrder)
	require.Equal(t, 3.0, cr.APIPollPerOrder)
	require.Equal(t, 0.0, cr.APIStartPerOrder)
	require.Equal(t, 1.0, cr.APIPerPoll)
	require.Equal(t, map[string]float64{"events": 8, "readmodel": 3}, cr.ByStore)
	require.Equal(t, map[string]float64{"total": 8, "commands": 8, "evalsha": 8, "pipelines": 1}, cr.ByNode["workflow-a"])
	require.Equal(t, int64(0), int64(len(rep.Notes)))
	require.Nil(t, rep.ForkCPUPerOrderMs, "no process forked")

	// Redis reaped a rewrite child worth 0.3 s during the load: it is in
	// redis-server's CPU per order, and shown apart.
	before.CPU = map[string]float64{"redis-server": 1.0, "api-a": 1.0}
	before.ChildCPU = map[string]float64{"redis-server": 0.2, "api-a": 0}
	after.CPU = map[string]float64{"redis-server": 2.0, "api-a": 1.5}
	after.ChildCPU = map[string]float64{"redis-server": 0.5, "api-a": 0}
	rep = buildReport(options{concurrency: 1, duration: time.Second}, res, before, after)
	require.InDelta(t, 100.0, rep.CPUPerOrderMs["redis-server"], 1e-9)
	require.Equal(t, []string{"redis-server"}, sortedKeys(rep.ForkCPUPerOrderMs))
	require.InDelta(t, 30.0, rep.ForkCPUPerOrderMs["redis-server"], 1e-9)
}

func TestScrapeFailureIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := scrapeMetrics(context.Background(), srv.URL)
	require.ErrorContains(t, err, "status 404")
	_, err = scrapeMetrics(context.Background(), "")
	require.Error(t, err)
}

// CPU comes from the OS for any PID, this process's included.
func TestCPUSecondsFromTheOS(t *testing.T) {
	self, err := cpuSeconds(0)
	require.NoError(t, err)
	byPID, err := cpuSeconds(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, byPID, self)
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		now, err := cpuSeconds(0)
		require.NoError(t, err)
		if now > self {
			return
		}
		require.True(t, time.Now().Before(deadline), "cpu time did not grow (x=%d)", x)
	}
}

// A measured process's figure includes the children it reaped (Redis'
// AOF rewrites and snapshots are forked children), and the plain figure
// does not: a shell that runs a busy subshell and waits for it has spent
// almost nothing itself.
func TestSystemCPUSecondsCountsReapedChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", `(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done); exec sleep 60`)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	for {
		withChildren, children, err := systemCPUSeconds(pid)
		require.NoError(t, err)
		own, err := cpuSeconds(pid)
		require.NoError(t, err)
		if withChildren-own >= 0.05 {
			t.Logf("parent %.2f s, with its reaped child %.2f s", own, withChildren)
			require.Less(t, own, 0.05, "the shell itself only forked and waited")
			require.InDelta(t, withChildren-own, children, 0.02, "children is the reaped children's part")
			return
		}
		require.True(t, time.Now().Before(deadline), "no child CPU counted after 30 s (own %.2f s, with children %.2f s)", own, withChildren)
		time.Sleep(20 * time.Millisecond)
	}
}

// Every socket read and write a process makes counts, whichever process
// it is: a pipe's write and read move this process's figure by two.
func TestIOSyscallsFromTheOS(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	before, err := ioSyscalls(os.Getpid())
	require.NoError(t, err)
	_, err = w.Write([]byte("x"))
	require.NoError(t, err)
	_, err = r.Read(make([]byte, 1))
	require.NoError(t, err)
	after, err := ioSyscalls(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, after-before, uint64(2))
	_, err = ioSyscalls(-1)
	require.Error(t, err, "no such process")
}

func TestReportShowsSyscallsAndStealPerOrder(t *testing.T) {
	var res loadResult
	for range 10 {
		res.Results = append(res.Results, orderResult{Path: pathSuccess, Status: "Confirmed"})
	}
	before := snap{IO: map[string]uint64{"api-a": 100, "redis-server": 50}, Machine: machineCPU{Total: 1000, Steal: 10}}
	after := snap{IO: map[string]uint64{"api-a": 300, "redis-server": 100, "api-b": 7}, Machine: machineCPU{Total: 1200, Steal: 40}}
	rep := buildReport(options{concurrency: 1, duration: time.Second}, res, before, after)
	require.Equal(t, map[string]float64{"api-a": 20, "redis-server": 5}, rep.IOSyscallsPerOrder,
		"per order, only for processes read both times")
	require.InDelta(t, 25, ioTotal(rep), 1e-9)
	require.NotNil(t, rep.Steal)
	require.InDelta(t, 30, rep.Steal.Seconds, 1e-9)
	require.InDelta(t, 0.15, rep.Steal.Share, 1e-9)

	require.Nil(t, stealBetween(machineCPU{}, after.Machine), "an unread machine has no steal figure")
	live, err := machineTimes()
	require.NoError(t, err)
	require.Positive(t, live.Total)
}
