package redisserver

import "syscall"

// sysProcAttr asks the kernel to terminate the server when the process that
// started it dies, so a crashed test binary or runner leaves no orphan.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
