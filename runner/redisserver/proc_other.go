//go:build !linux

package redisserver

import "syscall"

// sysProcAttr: only Linux can tie the child's lifetime to the parent's;
// elsewhere Stop is the only way the server ends.
func sysProcAttr() *syscall.SysProcAttr { return nil }
