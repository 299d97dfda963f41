package localcluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts each child in its own process group, so a Ctrl-C meant
// for the runner reaches only the runner (which then stops the children
// by PID, gracefully), and asks the kernel to send SIGTERM to the child if
// the process that started it dies, so a crashed runner leaves no orphan.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// DetachedProcAttr starts a process in a session of its own that outlives
// its parent: the cluster supervisor of clusterctl.
func DetachedProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true}
}

// processStartTime returns the kernel's start time of pid (field 22 of
// /proc/<pid>/stat, in clock ticks since boot). Together with the PID it
// names one process: a PID reused by an unrelated process has another
// start time, so a stale state file never makes us signal a stranger.
func processStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cluster: process %d: %w", pid, err)
	}
	s := string(b)
	// The command name (field 2) is parenthesised and may hold spaces or
	// parentheses itself; the fields after it start after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("cluster: process %d: unreadable stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("cluster: process %d: short stat", pid)
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cluster: process %d: start time: %w", pid, err)
	}
	return v, nil
}

// intoCgroup makes the child start inside the cgroup v2 directory dir
// (clone3's CLONE_INTO_CGROUP), so that every socket it opens belongs to
// that cgroup from its first instruction: moving a running process would
// leave the sockets it already opened behind. The returned func closes
// the directory once the child started.
func intoCgroup(a *syscall.SysProcAttr, dir string) (func(), error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: cgroup %s: %w", dir, err)
	}
	a.UseCgroupFD, a.CgroupFD = true, int(f.Fd())
	return func() { _ = f.Close() }, nil
}
