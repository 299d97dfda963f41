package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProcessStats is what a process writes to its stats file (the -stats-file
// flag of both mains), read by the benchmark runner. Counters are totals
// since the process started; a reader takes two dumps and subtracts.
type ProcessStats struct {
	Node string `json:"node"`
	PID  int    `json:"pid"`
	// RedisRoundTrips is RoundTrips.Snapshot of every store client.
	RedisRoundTrips map[string]int64 `json:"redisRoundTrips"`
	// CPUSeconds is user + system time of this process so far.
	CPUSeconds float64 `json:"cpuSeconds"`
	// WrittenAtUnixNano lets a reader that asked for a dump tell it from
	// an older one.
	WrittenAtUnixNano int64 `json:"writtenAtUnixNano"`
	// Final is set on the dump written at exit.
	Final bool `json:"final"`
}

// StatsNodePlaceholder in a stats file path stands for the node name, so
// one setting (an environment variable shared by every process a runner
// starts) gives each process its own file.
const StatsNodePlaceholder = "{node}"

// StatsPath expands StatsNodePlaceholder in pattern.
func StatsPath(pattern, nodeName string) string {
	return strings.ReplaceAll(pattern, StatsNodePlaceholder, nodeName)
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUSeconds returns utime+stime of a process from /proc/<pid>/stat
// (pid 0 = this process). Linux only; elsewhere it fails.
func CPUSeconds(pid int) (float64, error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: unexpected format", p)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state is field 3, so utime (14) and stime (15) are at
	// indexes 11 and 12.
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: only %d fields", p, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: utime %q stime %q", p, f[11], f[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// WriteStats writes this process's stats to path atomically (temp file and
// rename), so a reader never sees half a file.
func WriteStats(path, nodeName string, rt *RoundTrips, final bool) error {
	cpu, err := CPUSeconds(0)
	if err != nil {
		cpu = -1
	}
	st := ProcessStats{
		Node: nodeName, PID: os.Getpid(), RedisRoundTrips: rt.Snapshot(),
		CPUSeconds: cpu, WrittenAtUnixNano: time.Now().UnixNano(), Final: final,
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".stats-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReadStats reads a stats file written by WriteStats.
func ReadStats(path string) (ProcessStats, error) {
	var st ProcessStats
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("stats file %s: %w", path, err)
	}
	return st, nil
}

// Stats is a process's stats file: its round-trip hook, a dump on
// SIGUSR1 and a final dump at Close. A nil *Stats (no file asked for) is
// valid and does nothing.
type Stats struct {
	path, node string
	rt         *RoundTrips
	stop       func()
	log        *slog.Logger
}

// StartStats returns nil when pattern is empty; otherwise it starts
// listening for SIGUSR1. pattern may hold StatsNodePlaceholder.
func StartStats(pattern, nodeName string, log *slog.Logger) *Stats {
	if pattern == "" {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Stats{path: StatsPath(pattern, nodeName), node: nodeName, rt: &RoundTrips{}, log: log}
	s.stop = DumpStatsOnSIGUSR1(s.path, nodeName, s.rt, func(err error) {
		log.Warn("stats dump failed", slog.String("path", s.path), slog.Any("error", err))
	})
	return s
}

// Hook is the hook for StoreOptions.Hook; nil when there is no file.
func (s *Stats) Hook() redis.Hook {
	if s == nil {
		return nil
	}
	return s.rt
}

// Close stops the SIGUSR1 dumps and writes the final dump.
func (s *Stats) Close() {
	if s == nil {
		return
	}
	s.stop()
	if err := WriteStats(s.path, s.node, s.rt, true); err != nil {
		s.log.Warn("stats file not written", slog.String("path", s.path), slog.Any("error", err))
	}
}
