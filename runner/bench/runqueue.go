package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// How long each process waited for a core. On a machine whose cores every
// process shares, a request is slow less for the work it needs than for
// the turns it waits: Redis' main thread, which every order passes through
// about seven times, queues behind the other processes' threads whenever
// more of them are runnable than there are cores. The kernel counts both
// per thread (/proc/<pid>/task/<tid>/schedstat: time on a core, time
// runnable on a run queue), so the open loop reads them before and after
// and reports each process's, per second of the phase.

// schedTimes is a process's time on a core and time waiting for one,
// summed over its threads, and the same for its main thread alone.
type schedTimes struct {
	Run, Wait         time.Duration
	MainRun, MainWait time.Duration
}

// readSchedTimes sums /proc/<pid>/task/*/schedstat. A thread that ended
// between the listing and the read is skipped: its time is lost to both
// readings alike only when it ended before the first.
func readSchedTimes(pid int) (schedTimes, error) {
	var st schedTimes
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return st, fmt.Errorf("schedstat of %d: %v", pid, cmp.Or(err, os.ErrNotExist))
	}
	main := fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, pid)
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		run, wait, ok := parseSchedstat(string(b))
		if !ok {
			continue
		}
		st.Run += run
		st.Wait += wait
		if t == main {
			st.MainRun, st.MainWait = run, wait
		}
	}
	return st, nil
}

// parseSchedstat reads "<ns on a core> <ns runnable, waiting> <slices>".
func parseSchedstat(s string) (run, wait time.Duration, ok bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	w, err2 := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(r), time.Duration(w), err1 == nil && err2 == nil
}

// runQueueStats is one process's share of a phase: milliseconds per
// second on a core and waiting for one.
type runQueueStats struct {
	Process      string  `json:"process"`
	RunMsPerSec  float64 `json:"runMsPerSec"`
	WaitMsPerSec float64 `json:"waitMsPerSec"`
}

// runQueueSampler reads every named process's schedstat at the start of a
// phase; done reads them again and returns each one's share, with Redis'
// main thread apart ("redis-server main thread": the thread that runs
// every command) and the bench itself ("bench", the load generator).
type runQueueSampler struct {
	pids   map[string][]int
	before map[string]schedTimes
	at     time.Time
}

// runQueuePIDs names the processes a phase reads: the nodes, every
// redis-server (summed) and the bench itself.
func runQueuePIDs(procs map[string]proc, redisPIDs []int) map[string][]int {
	out := map[string][]int{"bench": {os.Getpid()}, redisServer: redisPIDs}
	for name, p := range procs {
		out[name] = []int{p.PID}
	}
	return out
}

func startRunQueue(pids map[string][]int) *runQueueSampler {
	s := &runQueueSampler{pids: pids, at: time.Now()}
	s.before = s.read()
	return s
}

func (s *runQueueSampler) read() map[string]schedTimes {
	out := map[string]schedTimes{}
	for name, pids := range s.pids {
		var sum schedTimes
		ok := false
		for _, pid := range pids {
			st, err := readSchedTimes(pid)
			if err != nil {
				continue
			}
			ok = true
			sum.Run += st.Run
			sum.Wait += st.Wait
			sum.MainRun += st.MainRun
			sum.MainWait += st.MainWait
		}
		if ok {
			out[name] = sum
		}
	}
	return out
}

func (s *runQueueSampler) done() []runQueueStats {
	after := s.read()
	secs := time.Since(s.at).Seconds()
	if secs <= 0 {
		return nil
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / secs }
	var out []runQueueStats
	for name, a := range after {
		b, ok := s.before[name]
		if !ok {
			continue
		}
		out = append(out, runQueueStats{Process: name, RunMsPerSec: per(a.Run - b.Run), WaitMsPerSec: per(a.Wait - b.Wait)})
		if name == redisServer {
			out = append(out, runQueueStats{Process: redisServer + " main thread",
				RunMsPerSec: per(a.MainRun - b.MainRun), WaitMsPerSec: per(a.MainWait - b.MainWait)})
		}
	}
	slices.SortFunc(out, func(x, y runQueueStats) int { return cmp.Compare(x.Process, y.Process) })
	return out
}

// redisServer names every redis-server of the run, summed.
const redisServer = "redis-server"

// formatRunQueue is the report's line: each process's run and wait.
func formatRunQueue(rq []runQueueStats) string {
	var parts []string
	for _, r := range rq {
		parts = append(parts, fmt.Sprintf("%s %.0f/%.0f", r.Process, r.RunMsPerSec, r.WaitMsPerSec))
	}
	return strings.Join(parts, ", ")
}
