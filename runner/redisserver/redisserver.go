// Package redisserver starts and stops a private redis-server process, by
// PID, for tests and local runners. Tests start theirs with
// redisserver/redistest, which keeps package testing out of the runners'
// binaries.
//
// It owns only the child process it starts and the temporary directory it
// creates; it never touches a system-wide Redis and never stops a process
// by name. It must not import any package of this module but the leaf
// cluster/redisurl, whose URL forms it writes.
package redisserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotInstalled: the redis-server binary could not be found.
var ErrNotInstalled = errors.New("redis-server not found: run scripts/install-redis.sh or apt-get install redis-server")

const (
	defaultBin = "redis-server"
	// startTimeout bounds Start when the caller's context has no deadline:
	// a healthy redis-server answers PING within milliseconds.
	startTimeout = 15 * time.Second
	stopTimeout  = 10 * time.Second
	pollInterval = 10 * time.Millisecond
	pingTimeout  = time.Second
	socketName   = "redis.sock"
	// maxSocketPath is below the smallest sun_path limit of the common
	// Unix systems (104 on BSD/macOS, 108 on Linux).
	maxSocketPath = 100
)

// Config describes the server to start. The zero value is a non-persistent
// server on a unix socket in a fresh temporary directory.
type Config struct {
	// Bin is the redis-server executable; default "redis-server" looked up
	// in PATH.
	Bin string
	// Dir is the server's working directory; default a fresh temporary
	// directory that Stop removes. A given Dir is never removed.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 serves on a unix socket in Dir
	// instead, which avoids port collisions between parallel test runs.
	Port int
	// Persist keeps data across restarts in the same Dir (RDB snapshots
	// plus an append-only file). false writes nothing to disk.
	Persist bool
	// AppendFsync is the append-only file's fsync policy with Persist:
	// "always", "everysec" or "no"; empty is Redis' default, everysec.
	AppendFsync string
	// LogFile is the server's log; default Dir/redis.log.
	LogFile string
	// ClusterBusPort, when not 0, starts the server in Redis Cluster mode
	// (its node table in Dir/nodes.conf) with this port for the cluster
	// bus; it needs a TCP Port. The server answers PING at once but serves
	// no slot until it is given some: StartCluster forms a cluster.
	ClusterBusPort int
	// ClusterNodeTimeout is cluster-node-timeout with ClusterBusPort: how
	// long a node must not answer before the others think it failed and
	// its replica, if any, takes over; default 5 s.
	ClusterNodeTimeout time.Duration
	// ReplicaOf, when set ("host:port"), starts the server as a replica
	// of that primary; it needs a TCP Port, since Sentinel announces
	// replicas by address.
	ReplicaOf string
	// Sentinel, when set, starts a Redis Sentinel instead of a data
	// server (redis-server in sentinel mode, as Debian's redis-sentinel
	// runs it), on a TCP Port. Persist and AppendFsync do not apply.
	Sentinel *Sentinel
	// Nice, when negative, runs the server's main thread at that nice
	// value, ahead of the machine's ordinary processes, while what it
	// forks (an AOF rewrite) starts at 0 again (SCHED_RESET_ON_FORK). On
	// cores it shares with the processes it serves, the one thread that
	// runs every command otherwise waits its turn behind theirs
	// (docs/performance.md). It needs CAP_SYS_NICE; without it the
	// server runs at the ordinary priority and PriorityErr says why.
	Nice int
}

// Sentinel is a Redis Sentinel's watch of one primary. The timeouts are
// short, as the local HA topologies want: a failover takes seconds.
type Sentinel struct {
	// MasterName is the name clients ask the sentinels for.
	MasterName string
	// Master is the primary's "host:port".
	Master string
	// Quorum is how many sentinels must agree the primary is down;
	// default 1.
	Quorum int
	// DownAfter is how long the primary must not answer before it is
	// thought down; default 1 s.
	DownAfter time.Duration
	// FailoverTimeout bounds one failover attempt; default 5 s.
	FailoverTimeout time.Duration
}

// conf is the sentinel's configuration file, which the sentinel rewrites
// as it learns the topology.
func (c Sentinel) conf(port int, dir string) (string, error) {
	host, mport, err := net.SplitHostPort(c.Master)
	if err != nil {
		return "", fmt.Errorf("redisserver: sentinel master %q: %w", c.Master, err)
	}
	if c.MasterName == "" {
		return "", errors.New("redisserver: sentinel needs a master name")
	}
	q := max(c.Quorum, 1)
	down := c.DownAfter
	if down <= 0 {
		down = time.Second
	}
	fo := c.FailoverTimeout
	if fo <= 0 {
		fo = 5 * time.Second
	}
	return fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\nsentinel parallel-syncs %s 1\n",
		port, dir, c.MasterName, host, mport, q, c.MasterName, down.Milliseconds(), c.MasterName, fo.Milliseconds(), c.MasterName), nil
}

// Server is a running redis-server child process.
type Server struct {
	cmd     *exec.Cmd
	network string
	addr    string
	dir     string
	ownsDir bool
	logFile string

	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error

	// priorityErr is why Config.Nice could not be applied.
	priorityErr error
}

// PriorityErr is why the server runs at the ordinary priority although
// Config.Nice asked for another; nil when it was applied or not asked.
func (s *Server) PriorityErr() error { return s.priorityErr }

// Start launches redis-server and waits, bounded by ctx (or 15s when ctx has
// no deadline), until it answers PING. A server that exits or never answers
// is killed and reported with the tail of its log.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin := cfg.Bin
	if bin == "" {
		bin = defaultBin
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w (%s: %v)", ErrNotInstalled, bin, err)
	}

	s := &Server{exited: make(chan struct{})}
	s.dir = cfg.Dir
	if s.dir == "" {
		// A short directory name keeps the unix socket path under the
		// sun_path limit.
		s.dir, err = os.MkdirTemp("", "rds")
		if err != nil {
			return nil, fmt.Errorf("redisserver: create dir: %w", err)
		}
		s.ownsDir = true
	} else if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("redisserver: create dir: %w", err)
	}
	if s.dir, err = filepath.Abs(s.dir); err != nil {
		return nil, errors.Join(fmt.Errorf("redisserver: dir: %w", err), s.removeDir())
	}
	s.logFile = cfg.LogFile
	if s.logFile == "" {
		s.logFile = filepath.Join(s.dir, "redis.log")
	}

	args := []string{"--daemonize", "no", "--dir", s.dir, "--logfile", s.logFile}
	if (cfg.Sentinel != nil || cfg.ReplicaOf != "") && cfg.Port == 0 {
		return nil, errors.Join(errors.New("redisserver: a sentinel or a replica needs a TCP port"), s.removeDir())
	}
	if cfg.Sentinel != nil {
		conf, err := cfg.Sentinel.conf(cfg.Port, s.dir)
		if err != nil {
			return nil, errors.Join(err, s.removeDir())
		}
		path := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, errors.Join(fmt.Errorf("redisserver: sentinel config: %w", err), s.removeDir())
		}
		// The configuration file comes first, then sentinel mode.
		args = append([]string{path, "--sentinel"}, args...)
	}
	if cfg.Port == 0 {
		s.network = "unix"
		s.addr = filepath.Join(s.dir, socketName)
		if len(s.addr) > maxSocketPath {
			return nil, errors.Join(fmt.Errorf("redisserver: unix socket path %q is too long (max %d bytes): use a shorter Dir", s.addr, maxSocketPath), s.removeDir())
		}
		args = append(args, "--port", "0", "--unixsocket", s.addr, "--unixsocketperm", "700")
	} else {
		s.network = "tcp"
		s.addr = "127.0.0.1:" + strconv.Itoa(cfg.Port)
		args = append(args, "--port", strconv.Itoa(cfg.Port), "--bind", "127.0.0.1")
	}
	if cfg.ClusterBusPort != 0 {
		if cfg.Port == 0 {
			return nil, errors.Join(errors.New("redisserver: cluster mode needs a TCP port"), s.removeDir())
		}
		timeout := int64(clusterNodeTimeoutMs)
		if cfg.ClusterNodeTimeout > 0 {
			timeout = cfg.ClusterNodeTimeout.Milliseconds()
		}
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(cfg.ClusterBusPort), "--cluster-node-timeout", strconv.FormatInt(timeout, 10),
			// A replica whose master has just died takes over at once,
			// however long its link was down: the local topologies fail
			// over in seconds, and WAIT decides what a replica holds.
			"--cluster-replica-validity-factor", "0")
	}
	if cfg.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(cfg.ReplicaOf)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("redisserver: replicaof %q: %w", cfg.ReplicaOf, err), s.removeDir())
		}
		args = append(args, "--replicaof", host, port)
	}
	switch cfg.AppendFsync {
	case "", "always", "everysec", "no":
	default:
		return nil, errors.Join(fmt.Errorf("redisserver: appendfsync %q is not always, everysec or no", cfg.AppendFsync), s.removeDir())
	}
	if cfg.Sentinel == nil {
		// Small hashes stay listpacks with values up to 256 bytes (the
		// default is 64): an order's read-model record and an archived
		// order's sealed record hold an encoded state of 100-200 bytes,
		// which would otherwise turn each into a hash table of about
		// three times the memory (docs/archive.md).
		args = append(args, "--hash-max-listpack-value", "256")
	}
	if cfg.Sentinel != nil {
		// A sentinel keeps no data.
	} else if cfg.Persist {
		// The AOF is the persistence: no RDB snapshots beside it. Redis'
		// default save points fork and serialize the whole dataset about
		// once a minute under load, which the AOF (its rewrites write an
		// RDB preamble) already holds; on shared cores that child takes a
		// core from everything else for seconds (docs/performance.md).
		args = append(args, "--appendonly", "yes", "--save", "")
		if cfg.AppendFsync != "" {
			args = append(args, "--appendfsync", cfg.AppendFsync)
		}
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}

	var stderr bytes.Buffer
	s.cmd = exec.Command(path, args...)
	s.cmd.Dir = s.dir
	s.cmd.Stdout = &stderr
	s.cmd.Stderr = &stderr
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("redisserver: start %s: %w", path, err), s.removeDir())
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if cfg.Nice < 0 {
		// After Start the child has exec'd: the pid is the server's main
		// thread. Threads it starts later inherit its setting, reset to
		// 0 by the same flag; its background threads mostly sleep.
		if err := favor(s.cmd.Process.Pid, cfg.Nice); err != nil {
			s.priorityErr = fmt.Errorf("redisserver: nice %d with reset-on-fork: %w", cfg.Nice, err)
		}
	}

	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("redisserver: %s did not become ready: %w%s", path, err, s.diagnostics(stderr.String()))
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	// A ping in flight must not outlive a process that already exited.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("process exited (%v)", s.waitErr)
		default:
		}
		lastErr := s.ping(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("process exited (%v)", s.waitErr)
		case <-ctx.Done():
			select {
			case <-s.exited: // the watcher cancelled ctx because of this
				return fmt.Errorf("process exited (%v)", s.waitErr)
			default:
			}
			return fmt.Errorf("%w (last ping: %v)", ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

// ping asks the server at addr for its process id, speaking the protocol
// directly rather than through a go-redis client: the client logs every
// failed dial, and a server still starting is expected to refuse a few.
// Comparing the process id makes sure the answer comes from our child and
// not from another server already listening on the port.
func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, s.network, s.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	head, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	head = strings.TrimSpace(head)
	// A server still loading its data answers -LOADING.
	if !strings.HasPrefix(head, "$") {
		return fmt.Errorf("INFO answered %q", head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 {
		return fmt.Errorf("INFO answered %q", head)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(rd, body); err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(s.PID())
	for _, line := range strings.Split(string(body), "\r\n") {
		if strings.HasPrefix(line, "process_id:") {
			if line != want {
				return fmt.Errorf("%s answers as %s, not pid %d", s.addr, line, s.PID())
			}
			return nil
		}
	}
	return fmt.Errorf("INFO server has no process_id")
}

// diagnostics returns the process output and the log tail, for start errors.
func (s *Server) diagnostics(output string) string {
	var b strings.Builder
	if out := strings.TrimSpace(output); out != "" {
		b.WriteString("\noutput:\n" + tail(out, 2000))
	}
	if log, err := os.ReadFile(s.logFile); err == nil && len(log) > 0 {
		b.WriteString("\nlog " + s.logFile + ":\n" + tail(strings.TrimSpace(string(log)), 2000))
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Network is "unix" or "tcp", as go-redis Options.Network expects.
func (s *Server) Network() string { return s.network }

// Addr is the socket path or 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.dir }

// URL is the server's address in the form redis.ParseURL accepts.
func (s *Server) URL() string {
	if s.network == "unix" {
		return "unix://" + s.addr + "?db=0"
	}
	return "redis://" + s.addr + "/0"
}

// Client returns a new client for this server; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Network: s.network, Addr: s.addr, ContextTimeoutEnabled: true})
}

// Stop sends SIGTERM to the server's PID, waits (bounded) for it to exit,
// then sends SIGKILL, and removes the directory Start created. It is safe to
// call more than once; later calls return the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	var errs []error
	select {
	case <-s.exited:
	default:
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("redisserver: SIGTERM pid %d: %w", s.PID(), err))
		}
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
				errs = append(errs, fmt.Errorf("redisserver: SIGKILL pid %d: %w", s.PID(), err))
			}
			select {
			case <-s.exited:
			case <-time.After(stopTimeout):
				errs = append(errs, fmt.Errorf("redisserver: pid %d did not exit after SIGKILL", s.PID()))
			}
		}
	}
	if err := s.removeDir(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Server) removeDir() error {
	if !s.ownsDir {
		return nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("redisserver: remove %s: %w", s.dir, err)
	}
	return nil
}

// Exited is closed once the server process has exited for any reason.
func (s *Server) Exited() <-chan struct{} { return s.exited }
