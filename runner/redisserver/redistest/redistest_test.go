package redistest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStartServesUnixSocket(t *testing.T) {
	s := redistest.Start(t)
	require.Equal(t, "unix", s.Network())
	require.True(t, strings.HasSuffix(s.Addr(), "redis.sock"), "addr %q", s.Addr())
	require.True(t, processAlive(s.PID()), "pid %d not running", s.PID())

	c := s.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
	// The reported PID is the process serving this socket.
	info, err := c.Info(ctx, "server").Result()
	require.NoError(t, err)
	require.Contains(t, info, "process_id:"+strconv.Itoa(s.PID())+"\r\n")
}

// The server belongs to the test that started it: it is stopped, by its
// PID, when that test ends.
func TestStartStopsTheServerWhenTheTestEnds(t *testing.T) {
	var pid int
	t.Run("owner", func(t *testing.T) {
		pid = redistest.Start(t).PID()
		require.True(t, processAlive(pid))
	})
	require.False(t, processAlive(pid), "redis-server pid %d outlived its test", pid)
}

func TestStartLogsPID(t *testing.T) {
	rec := &recordingTB{TB: t}
	s := redistest.Start(rec)
	want := "redis-server pid=" + strconv.Itoa(s.PID()) + " addr=" + s.Addr()
	require.Contains(t, strings.Join(rec.logs, "\n"), want)
}

type recordingTB struct {
	testing.TB
	logs []string
}

func (r *recordingTB) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
	r.TB.Logf(format, args...)
}
