package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killWait bounds the wait for a process to be reaped after SIGKILL.
const killWait = 10 * time.Second

// process is one child this package started. It is only ever signalled by
// its own PID, never by name or process group.
type process struct {
	name    string
	cmd     *exec.Cmd
	pidFile string
	exited  chan struct{} // closed once the child has been reaped
	waitErr error         // valid after exited is closed
}

// startProcess runs bin with args, stdout and stderr appended to logPath
// (created if needed), inside the cgroup v2 directory cgroup unless it is
// empty, and records its PID in pidFile.
func startProcess(name, bin string, args, env []string, logPath, pidFile, cgroup string) (*process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %s: log dir: %w", name, err)
	}
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %s: pid dir: %w", name, err)
	}
	// O_APPEND: a restarted node keeps its earlier incarnations' lines, and
	// stdout and stderr sharing one descriptor never overwrite each other.
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: open log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	closeCgroup, err := intoCgroup(cmd.SysProcAttr, cgroup)
	if err != nil {
		f.Close()
		return nil, err
	}
	err = cmd.Start()
	closeCgroup()
	// The child holds its own copy of the descriptor.
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("cluster: start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, pidFile: pidFile, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(p.pid())+"\n"), 0o644); err != nil {
		_ = p.kill()
		return nil, fmt.Errorf("cluster: %s: write pid file: %w", name, err)
	}
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace for the exit, then SIGKILLs.
func (p *process) stop(grace time.Duration) error {
	defer os.Remove(p.pidFile)
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cluster: SIGTERM %s pid %d: %w", p.name, p.pid(), err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	}
	if err := p.kill(); err != nil {
		return err
	}
	return fmt.Errorf("cluster: %s pid %d ignored SIGTERM for %v and was killed", p.name, p.pid(), grace)
}

// kill sends SIGKILL and waits (bounded) until the child is reaped.
func (p *process) kill() error {
	defer os.Remove(p.pidFile)
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cluster: SIGKILL %s pid %d: %w", p.name, p.pid(), err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("cluster: %s pid %d did not exit after SIGKILL", p.name, p.pid())
	}
}

// ChildEnv returns environ without SHOPPINGMALL_* variables: every process
// flag can also come from the environment, and a stray variable in the
// caller's shell must not change what the runner starts.
func ChildEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if strings.HasPrefix(kv, "SHOPPINGMALL_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Alive reports whether pid runs and, when startTime is non-zero, is still
// the process that had that start time. A zombie (exited, not yet reaped
// by a parent that is not us, e.g. a container's PID 1 that reaps nothing)
// does not run.
func Alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if zombie(pid) {
		return false
	}
	if startTime == 0 {
		return true
	}
	st, err := processStartTime(pid)
	if err != nil {
		return false
	}
	return st == startTime
}

// StopPID stops a process this package started in an earlier run, known
// only by its PID (and start time) from a state file: SIGTERM, then up to
// grace polling every 100 ms for it to go, then SIGKILL. A process that
// is already gone, or whose PID now belongs to another process, is left
// alone.
func StopPID(pid int, startTime uint64, grace time.Duration) error {
	if !Alive(pid, startTime) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("cluster: SIGTERM pid %d: %w", pid, err)
	}
	if waitGone(pid, startTime, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cluster: SIGKILL pid %d: %w", pid, err)
	}
	if waitGone(pid, startTime, killWait) {
		return nil
	}
	return fmt.Errorf("cluster: pid %d still runs after SIGKILL", pid)
}

func waitGone(pid int, startTime uint64, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		if !Alive(pid, startTime) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// zombie reports whether pid has exited but not been reaped yet (its
// parent is not us): it no longer runs, which is all a stop needs.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}
