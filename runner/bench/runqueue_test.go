package main

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSchedstat(t *testing.T) {
	run, wait, ok := parseSchedstat("1080936 447308 2\n")
	require.True(t, ok)
	require.Equal(t, 1080936*time.Nanosecond, run)
	require.Equal(t, 447308*time.Nanosecond, wait)
	_, _, ok = parseSchedstat("12")
	require.False(t, ok)
}

// More busy processes than cores: each one's share shows time on a core
// and time waiting for one, and a sleeping process shows neither.
func TestRunQueueSeesProcessesWaitingForACore(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no schedstat on this kernel")
	}
	spin := func() *exec.Cmd {
		c := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(t, c.Start())
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	pids := map[string][]int{}
	for i := range runtime.NumCPU() + 1 {
		pids["spin"+strconv.Itoa(i)] = []int{spin().Process.Pid}
	}
	sleeper := exec.Command("sleep", "30")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pids["sleeper"] = []int{sleeper.Process.Pid}
	// Its start (exec, the loader) is not what the sampler is for.
	require.Eventually(t, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/stat")
		return err == nil && strings.Contains(string(b), ") S ")
	}, 10*time.Second, 10*time.Millisecond, "sleep(1) asleep")
	pids[redisServer] = []int{spin().Process.Pid}

	s := startRunQueue(pids)
	deadline := time.Now().Add(10 * time.Second)
	var rq []runQueueStats
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		rq = s.done()
		var wait float64
		for _, r := range rq {
			if r.Process != "sleeper" {
				wait += r.WaitMsPerSec
			}
		}
		if wait > 100 {
			break
		}
	}
	byName := map[string]runQueueStats{}
	for _, r := range rq {
		byName[r.Process] = r
	}
	require.Len(t, byName, len(pids)+1, "every process, and Redis' main thread apart: %+v", rq)
	var run, wait float64
	for name, r := range byName {
		if name != "sleeper" {
			run += r.RunMsPerSec
			wait += r.WaitMsPerSec
		}
	}
	require.Greater(t, run, 500.0, "%d cores kept busy: %+v", runtime.NumCPU(), rq)
	require.Greater(t, wait, 100.0, "one spinner more than cores must wait: %+v", rq)
	require.Less(t, byName["sleeper"].RunMsPerSec, 5.0)
	require.Equal(t, byName[redisServer].RunMsPerSec, byName[redisServer+" main thread"].RunMsPerSec, "a one-thread process")
	require.Contains(t, formatRunQueue(rq), "redis-server main thread")
}
