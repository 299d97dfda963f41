//go:build !linux

package redisserver

import (
	"errors"
	"syscall"
)

// sysProcAttr: only Linux can tie the child's lifetime to the parent's;
// elsewhere Stop is the only way the server ends.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// favor: only Linux resets a raised priority in the children it forks.
func favor(int, int) error { return errors.ErrUnsupported }
