// Package pgserver runs a private PostgreSQL server, for the archive's
// tests and for local runs (make cluster-up ARCHIVE=1): a data folder of
// its own, a free port on 127.0.0.1, stopped by PID.
//
// PostgreSQL refuses to run as root, so when this process is root the
// server (and initdb) run as an unprivileged user ("postgres", which
// Debian's package creates, else "nobody"), in folders that user owns.
// The server runs in a process group of its own, and forks a backend per
// connection; a stall or a kill has to reach them all (Pause, Kill).
//
// It owns starting and stopping servers; it must not import any package of
// this module but runner/redisserver (for its port reservation).
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// ErrNotInstalled: no PostgreSQL server binaries were found
// (scripts/install-postgres.sh installs Debian's).
var ErrNotInstalled = errors.New("pgserver: PostgreSQL is not installed (run scripts/install-postgres.sh)")

// DefaultDatabase is the database Start creates when Config names none.
const DefaultDatabase = "shoppingmall"

// role is the superuser initdb creates; clients connect as it, trusted on
// loopback only.
const role = "shoppingmall"

// Config describes a server.
type Config struct {
	// Dir is the server's folder (data and socket); "" makes a temporary
	// one, removed by Stop. A Dir that already holds a data folder is
	// started as it is (a restart keeps its data).
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 reserves a free one.
	Port int
	// Database is created at the first start; "" is DefaultDatabase.
	Database string
	// Durable keeps PostgreSQL's fsync; without it (tests) it is off: a
	// test's server never outlives a machine crash, and its writes need
	// not either.
	Durable bool
	// Log receives the server's output; nil discards it.
	Log io.Writer
}

// Server is a running server. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	bin     string
	dir     string
	tempDir bool
	port    int
	cred    *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// BinDir finds the folder of initdb and postgres: Debian keeps them in
// /usr/lib/postgresql/<version>/bin, off the PATH (the newest version
// wins); otherwise the folder of a postgres on the PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "postgres")) && isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises the data folder when it has none, starts the server
// and returns once it accepts connections and the database exists.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if cfg.Database == "" {
		cfg.Database = DefaultDatabase
	}
	s := &Server{cfg: cfg, bin: bin, dir: cfg.Dir, port: cfg.Port}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "pg"); err != nil {
			return nil, err
		}
		s.tempDir = true
	}
	if s.port == 0 {
		ports, err := redisserver.FreePorts(1)
		if err != nil {
			s.cleanup()
			return nil, err
		}
		s.port = ports[0]
	}
	if err := s.prepare(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	if err := s.launch(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	if err := s.createDatabase(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// prepare makes the folders, owned by the user the server runs as, and
// runs initdb unless the data folder exists.
func (s *Server) prepare(ctx context.Context) error {
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			return err
		}
		s.cred = cred
		// The user must reach its folders through this one, which
		// MkdirTemp made root's alone, and through every folder above it.
		if err := os.MkdirAll(s.dir, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(s.dir, 0o711); err != nil {
			return err
		}
		if err := reachable(s.dir); err != nil {
			return err
		}
	}
	for _, d := range []string{s.dataDir(), s.socketDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if s.cred != nil {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat(filepath.Join(s.dataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "initdb"), "-D", s.dataDir(), "-U", role,
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// reachable refuses a folder that the unprivileged user cannot reach
// because a folder above it lets only its owner through (a test's
// t.TempDir, mode 0700): the server would fail later with less to go on.
func reachable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgserver: the server's user cannot reach %s: %s is mode %04o (it needs o+x)", abs, p, st.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// unprivileged is the user a root process runs the server as.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgserver: running as root, and neither user postgres nor nobody exists to run the server as")
}

func (s *Server) dataDir() string   { return filepath.Join(s.dir, "data") }
func (s *Server) socketDir() string { return filepath.Join(s.dir, "sock") }

// launch starts postgres and waits until it accepts connections.
func (s *Server) launch(ctx context.Context) error {
	args := []string{"-D", s.dataDir(), "-p", strconv.Itoa(s.port), "-h", "127.0.0.1", "-k", s.socketDir(),
		"-c", "max_connections=100", "-c", "logging_collector=off"}
	if !s.cfg.Durable {
		// A commit still reaches the kernel before it is acknowledged
		// (synchronous_commit stays on), so a SIGKILLed server loses
		// nothing it acknowledged; only a machine crash would.
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Dir = s.dir
	// A group of its own: Pause and Kill reach the backends too. The
	// kernel ends the server with the process that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	if s.cfg.Log != nil {
		cmd.Stdout, cmd.Stderr = s.cfg.Log, s.cfg.Log
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	for {
		c, err := pgx.Connect(ctx, s.urlOf("postgres"))
		if err == nil {
			_ = c.Close(ctx)
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("pgserver: postgres pid=%d exited before it accepted connections: %w", cmd.Process.Pid, err)
		case <-ctx.Done():
			s.kill()
			return fmt.Errorf("pgserver: postgres pid=%d did not accept connections: %w", cmd.Process.Pid, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) createDatabase(ctx context.Context) error {
	c, err := pgx.Connect(ctx, s.urlOf("postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	var exists bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", s.cfg.Database).Scan(&exists); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.cfg.Database}.Sanitize()); err != nil {
		return fmt.Errorf("pgserver: create database %s: %w", s.cfg.Database, err)
	}
	return nil
}

// URL is the server's database as a PostgreSQL URL.
func (s *Server) URL() string { return s.urlOf(s.cfg.Database) }

func (s *Server) urlOf(db string) string {
	return "postgres://" + role + "@" + s.Addr() + "/" + db + "?sslmode=disable"
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir is the server's folder.
func (s *Server) Dir() string { return s.dir }

// PID is the postmaster's pid, 0 once stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// signalGroup sends sig to the postmaster and every process under it.
// Its process group alone does not reach them: each backend makes itself
// a group (and session) leader of its own, so that the postmaster can
// signal what the backend starts; so the processes are found by their
// parents in /proc, all before any is signalled.
func (s *Server) signalGroup(sig syscall.Signal) error {
	pid := s.PID()
	if pid == 0 {
		return errors.New("pgserver: not running")
	}
	pids := append([]int{pid}, descendants(pid)...)
	_ = syscall.Kill(-pid, sig)
	var first error
	for _, p := range pids {
		if err := syscall.Kill(p, sig); err != nil && !errors.Is(err, syscall.ESRCH) && first == nil {
			first = err
		}
	}
	return first
}

// descendants lists the processes under pid, parents before children.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state, ppid.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// Pause stops the server and every backend (SIGSTOP): an open
// connection's calls hang until Resume.
func (s *Server) Pause() error { return s.signalGroup(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signalGroup(syscall.SIGCONT) }

// Kill ends the server and every backend at once (SIGKILL), so that no
// orphaned backend holds the port or the shared memory, and waits for the
// postmaster; the data folder stays for Restart.
func (s *Server) Kill() error {
	pid := s.PID()
	if pid == 0 {
		return errors.New("pgserver: not running")
	}
	children := descendants(pid)
	if err := s.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	s.wait(10 * time.Second)
	waitExited(children, 10*time.Second)
	return nil
}

func (s *Server) kill() { _ = s.Kill() }

// waitExited waits up to d for every pid to have exited (gone, or a
// zombie, which holds no memory any more). A postmaster's backends
// outlive it by a moment after a SIGKILL, and a postmaster started on
// the folder while one still holds the old shared memory refuses to run.
func waitExited(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, p := range pids {
		for time.Now().Before(deadline) {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if err != nil {
				break
			}
			st := string(b)
			if i := strings.LastIndexByte(st, ')'); i >= 0 && strings.HasPrefix(st[i+1:], " Z") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Restart starts the server again on its folder and port, after Kill or
// Stop kept them (a temporary folder is kept until the last Stop).
func (s *Server) Restart(ctx context.Context) error {
	if s.PID() != 0 {
		return errors.New("pgserver: restart of a running server")
	}
	return s.launch(ctx)
}

// wait waits up to d for the postmaster to exit and forgets it.
func (s *Server) wait(d time.Duration) bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
	case <-time.After(d):
		return false
	}
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	return true
}

// Stop shuts the server down fast (SIGINT: open transactions are rolled
// back), SIGKILLs the group if it does not exit within 30 s, and removes
// a temporary folder.
func (s *Server) Stop() error {
	var err error
	if s.PID() != 0 {
		// A paused server must run to shut down.
		_ = s.signalGroup(syscall.SIGCONT)
		if err = s.signalGroup(syscall.SIGINT); err == nil && !s.wait(30*time.Second) {
			s.kill()
			err = errors.New("pgserver: postgres did not stop within 30s on SIGINT; killed")
		}
	}
	s.cleanup()
	return err
}

func (s *Server) cleanup() {
	if s.tempDir {
		_ = os.RemoveAll(s.dir)
	}
}
