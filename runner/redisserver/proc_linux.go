package redisserver

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr asks the kernel to terminate the server when the process that
// started it dies, so a crashed test binary or runner leaves no orphan.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// favor sets thread pid's nice value with SCHED_FLAG_RESET_ON_FORK: a
// negative nice is reset to 0 in every task it creates afterwards.
func favor(pid, nice int) error {
	return unix.SchedSetAttr(pid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL, Flags: unix.SCHED_FLAG_RESET_ON_FORK, Nice: int32(nice)}, 0)
}
