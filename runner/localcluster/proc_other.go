//go:build unix && !linux

package localcluster

import (
	"fmt"
	"syscall"
)

// sysProcAttr: only Linux can tie a child's lifetime to its parent's;
// elsewhere a process group of its own still keeps Ctrl-C for the runner.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func DetachedProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// processStartTime is unknown without /proc; 0 makes identity checks rely
// on the PID alone.
func processStartTime(int) (uint64, error) { return 0, nil }

func intoCgroup(_ *syscall.SysProcAttr, dir string) (func(), error) {
	if dir != "" {
		return nil, fmt.Errorf("cluster: cgroups need Linux (cgroup %s)", dir)
	}
	return func() {}, nil
}
