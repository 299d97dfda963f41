//go:build linux

package node

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWriteStatsRoundTripsAndCPU(t *testing.T) {
	rt := &RoundTrips{}
	rt.name("get").Add(3)
	rt.total.Add(3)
	path := filepath.Join(t.TempDir(), "stats.json")
	require.NoError(t, WriteStats(path, "workflow-a", rt, true))
	st, err := ReadStats(path)
	require.NoError(t, err)
	require.Equal(t, "workflow-a", st.Node)
	require.Equal(t, os.Getpid(), st.PID)
	require.True(t, st.Final)
	require.Equal(t, int64(3), st.RedisRoundTrips["get"])
	require.Equal(t, int64(3), st.RedisRoundTrips[RoundTripsTotal])
	require.GreaterOrEqual(t, st.CPUSeconds, 0.0)
	require.NotZero(t, st.WrittenAtUnixNano)
}

func TestCPUSecondsGrowsWithWork(t *testing.T) {
	before, err := CPUSeconds(0)
	require.NoError(t, err)
	self, err := CPUSeconds(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, self, before)
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := 0; i < 1e6; i++ {
			x += i
		}
		now, err := CPUSeconds(0)
		require.NoError(t, err)
		if now > before {
			break
		}
		require.True(t, time.Now().Before(deadline), "cpu time did not grow (x=%d)", x)
	}
}

func TestDumpStatsOnSIGUSR1(t *testing.T) {
	rt := &RoundTrips{}
	path := filepath.Join(t.TempDir(), "stats.json")
	stop := DumpStatsOnSIGUSR1(path, "api-a", rt, func(err error) { t.Error(err) })
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := ReadStats(path)
		if err == nil {
			require.Equal(t, "api-a", st.Node)
			require.False(t, st.Final)
			return
		}
		require.True(t, time.Now().Before(deadline), "no dump after SIGUSR1: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartStatsWritesFinalDumpPerNode(t *testing.T) {
	var none *Stats = StartStats("", "api-a", nil)
	require.Nil(t, none)
	require.Nil(t, none.Hook())
	none.Close()

	dir := t.TempDir()
	s := StartStats(filepath.Join(dir, StatsNodePlaceholder+".json"), "workflow-b", nil)
	require.NotNil(t, s.Hook())
	s.Close()
	st, err := ReadStats(filepath.Join(dir, "workflow-b.json"))
	require.NoError(t, err)
	require.True(t, st.Final)
	require.Equal(t, "workflow-b", st.Node)
}
