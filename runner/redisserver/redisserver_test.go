package redisserver_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// processAlive reports whether pid still exists; signal 0 probes without
// delivering anything.
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server pid %d still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startT(t *testing.T, cfg redisserver.Config) *redisserver.Server {
	t.Helper()
	s, err := redisserver.Start(ctxT(t), cfg)
	must(t, err, "Start")
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func TestURLIsParseable(t *testing.T) {
	for _, port := range []int{0, freePort(t)} {
		s := startT(t, redisserver.Config{Port: port})
		opt, err := redis.ParseURL(s.URL())
		must(t, err, "ParseURL "+s.URL())
		if opt.Network != s.Network() || opt.Addr != s.Addr() || opt.DB != 0 {
			t.Fatalf("ParseURL(%s) = %s %s db%d, want %s %s db0", s.URL(), opt.Network, opt.Addr, opt.DB, s.Network(), s.Addr())
		}
		c := redis.NewClient(opt)
		must(t, c.Ping(ctxT(t)).Err(), "PING via URL")
		c.Close()
		t.Logf("port=%d url=%s", port, s.URL())
	}
}

func TestTCPBindsLoopback(t *testing.T) {
	port := freePort(t)
	s := startT(t, redisserver.Config{Port: port})
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)); s.Network() != "tcp" || s.Addr() != want {
		t.Fatalf("network=%q addr=%q, want tcp %s", s.Network(), s.Addr(), want)
	}
	c := s.Client()
	defer c.Close()
	must(t, c.Ping(ctxT(t)).Err(), "PING")
}

func TestStopTerminatesProcessAndRemovesTempDir(t *testing.T) {
	s, err := redisserver.Start(ctxT(t), redisserver.Config{})
	must(t, err, "Start")
	pid, dir := s.PID(), s.Dir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("dir: %v", err)
	}

	must(t, s.Stop(), "Stop")
	waitGone(t, pid)
	select {
	case <-s.Exited():
	default:
		t.Fatal("Exited not closed after Stop")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir %s still there after Stop: %v", dir, err)
	}
	must(t, s.Stop(), "second Stop")
}

func TestGivenDirIsKeptAndNotPersistedByDefault(t *testing.T) {
	dir := shortDir(t)
	s, err := redisserver.Start(ctxT(t), redisserver.Config{Dir: dir})
	must(t, err, "Start")
	c := s.Client()
	must(t, c.Set(ctxT(t), "k", "v", 0).Err(), "SET")
	c.Close()
	must(t, s.Stop(), "Stop")

	entries, err := os.ReadDir(dir)
	must(t, err, "ReadDir")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != "redis.log" {
		t.Fatalf("dir after non-persistent run holds %v, want only redis.log", names)
	}
}

func TestPersistSurvivesRestart(t *testing.T) {
	dir := shortDir(t)
	s, err := redisserver.Start(ctxT(t), redisserver.Config{Dir: dir, Persist: true})
	must(t, err, "Start")
	c := s.Client()
	must(t, c.Set(ctxT(t), "k", "kept", 0).Err(), "SET")
	c.Close()
	must(t, s.Stop(), "Stop")

	s2 := startT(t, redisserver.Config{Dir: dir, Persist: true})
	c2 := s2.Client()
	defer c2.Close()
	if got, err := c2.Get(ctxT(t), "k").Result(); err != nil || got != "kept" {
		t.Fatalf("after restart GET = %q, %v; want kept", got, err)
	}
}

func TestMissingBinaryNamesInstallScript(t *testing.T) {
	_, err := redisserver.Start(ctxT(t), redisserver.Config{Bin: "redis-server-does-not-exist"})
	if !errors.Is(err, redisserver.ErrNotInstalled) {
		t.Fatalf("err = %v, want ErrNotInstalled", err)
	}
	const msg = "redis-server not found: run scripts/install-redis.sh or apt-get install redis-server"
	if !strings.Contains(err.Error(), msg) {
		t.Fatalf("err %q does not say %q", err, msg)
	}
}

func TestServerThatExitsEarlyIsReported(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-redis")
	must(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'fatal: bad config' >&2\nexit 3\n"), 0o755), "write fake")

	start := time.Now()
	_, err := redisserver.Start(ctxT(t), redisserver.Config{Bin: bin})
	if err == nil || !strings.Contains(err.Error(), "process exited") || !strings.Contains(err.Error(), "fatal: bad config") {
		t.Fatalf("err = %v, want process exited with its output", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("early exit detected only after %s", d)
	}
}

func TestPortInUseFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	defer l.Close()
	_, err = redisserver.Start(ctxT(t), redisserver.Config{Port: l.Addr().(*net.TCPAddr).Port})
	if err == nil || !strings.Contains(err.Error(), "process exited") {
		t.Fatalf("err = %v, want process exited", err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// shortDir is a temp dir with a short path, so the unix socket fits.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdst")
	must(t, err, "MkdirTemp")
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestStartDoesNotMistakeAnotherServerForItsOwn(t *testing.T) {
	other := startT(t, redisserver.Config{Port: freePort(t)})
	port, _ := strconv.Atoi(other.Addr()[strings.LastIndex(other.Addr(), ":")+1:])
	_, err := redisserver.Start(ctxT(t), redisserver.Config{Port: port})
	if err == nil {
		t.Fatal("Start on a port served by another redis-server succeeded")
	}
	t.Log(err)
}
