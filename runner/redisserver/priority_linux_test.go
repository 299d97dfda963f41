package redisserver_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// niceOf reads a task's nice value (field 19 of /proc/<pid>/stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	must(t, err, "stat")
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.Atoi(fields[16])
	must(t, err, "nice field")
	return n
}

// A favored server's main thread runs at the nice asked for, and the
// child it forks for an AOF rewrite at 0: the rewrite is no more urgent
// than the processes the server shares the cores with.
func TestAFavoredServerForksItsRewriteAtTheOrdinaryPriority(t *testing.T) {
	s := startT(t, redisserver.Config{Dir: shortDir(t), Persist: true, Nice: -10})
	if err := s.PriorityErr(); err != nil {
		t.Skipf("cannot raise a priority here: %v", err)
	}
	if got := niceOf(t, s.PID()); got != -10 {
		t.Fatalf("main thread nice = %d, want -10", got)
	}
	attr, err := unix.SchedGetAttr(s.PID(), 0)
	must(t, err, "sched_getattr")
	if attr.Flags&unix.SCHED_FLAG_RESET_ON_FORK == 0 {
		t.Fatalf("main thread flags %#x, want reset-on-fork", attr.Flags)
	}

	ctx := ctxT(t)
	c := s.Client()
	defer c.Close()
	for i := range 20 {
		must(t, c.Set(ctx, "k"+strconv.Itoa(i), "v", 0).Err(), "SET")
	}
	// Slow the child down (a test knob: 50 ms per key) so it can be seen.
	must(t, c.ConfigSet(ctx, "rdb-key-save-delay", "50000").Err(), "CONFIG SET")
	must(t, c.Do(ctx, "BGREWRITEAOF").Err(), "BGREWRITEAOF")
	children := "/proc/" + strconv.Itoa(s.PID()) + "/task/" + strconv.Itoa(s.PID()) + "/children"
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no rewrite child seen")
		}
		if b, err := os.ReadFile(children); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				child, _ = strconv.Atoi(f[0])
				continue
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := niceOf(t, child); got != 0 {
		t.Fatalf("rewrite child %d nice = %d, want 0", child, got)
	}
	must(t, c.ConfigSet(ctx, "rdb-key-save-delay", "0").Err(), "CONFIG SET")
}

// Without Nice the server runs as its starter does.
func TestAServerIsNotFavoredUnlessAsked(t *testing.T) {
	s := startT(t, redisserver.Config{})
	if err := s.PriorityErr(); err != nil {
		t.Fatalf("PriorityErr = %v without Nice", err)
	}
	if got, want := niceOf(t, s.PID()), niceOf(t, os.Getpid()); got != want {
		t.Fatalf("nice = %d, want the starter's %d", got, want)
	}
}
