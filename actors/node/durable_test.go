package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func TestDurabilityRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    durabilityReport
		bad  int
	}{
		{"aof, noeviction, always", durabilityReport{aof: true, policy: "noeviction", appendFsync: "always"}, 0},
		{"aof, noeviction, everysec", durabilityReport{aof: true, policy: "noeviction", appendFsync: "everysec"}, 0},
		{"CONFIG refused: the INFO fields decide", durabilityReport{aof: true, policy: "noeviction"}, 0},
		{"appendfsync no", durabilityReport{aof: true, policy: "noeviction", appendFsync: "no"}, 1},
		{"no aof", durabilityReport{policy: "noeviction", appendFsync: "everysec"}, 1},
		{"eviction", durabilityReport{aof: true, policy: "allkeys-lru", appendFsync: "always"}, 1},
		{"nothing right", durabilityReport{policy: "volatile-ttl", appendFsync: "no"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Len(t, tc.r.unsafe(), tc.bad) })
	}
	require.Equal(t, "1", infoField("# Persistence\r\nloading:0\r\naof_enabled:1\r\n", "aof_enabled"))
	require.Equal(t, "", infoField("# Persistence\r\naof_enabled_x:1\r\n", "aof_enabled"))
}

func startPersistent(t *testing.T, fsync string) *redisserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	srv, err := redisserver.Start(ctx, redisserver.Config{Persist: true, AppendFsync: fsync})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	return srv
}

// A real server is judged by what it reports: the AOF with always or
// everysec and noeviction pass; no AOF, appendfsync no or an eviction
// policy is refused, naming the setting.
func TestCheckDurableOnRealServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(srv *redisserver.Server) *Stores {
		st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}

	volatile := open(redistest.Start(t))
	err := volatile.CheckDurable(ctx)
	require.ErrorIs(t, err, ErrUnsafeStore)
	require.ErrorContains(t, err, "append-only file is off")

	for _, fsync := range []string{"always", "everysec"} {
		srv := startPersistent(t, fsync)
		st := open(srv)
		require.NoError(t, st.CheckDurable(ctx), fsync)

		admin := srv.Client()
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
		err := st.CheckDurable(ctx)
		require.ErrorIs(t, err, ErrUnsafeStore, fsync)
		require.ErrorContains(t, err, "allkeys-lru")
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
		require.NoError(t, admin.ConfigSet(ctx, "appendfsync", "no").Err())
		err = st.CheckDurable(ctx)
		require.ErrorIs(t, err, ErrUnsafeStore, fsync)
		require.ErrorContains(t, err, "appendfsync is no")
		require.NoError(t, admin.Close())
	}
}

// With RequireDurable, WaitStores refuses an unsafe master at once: it
// does not wait for a configuration to change by itself.
func TestWaitStoresRefusesAnUnsafeStore(t *testing.T) {
	st, err := NewStores(RedisURLs{Default: redistest.Start(t).URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = WaitStores(ctx, st, WaitConfig{RequireDurable: true})
	require.ErrorIs(t, err, ErrUnsafeStore)
	require.NoError(t, ctx.Err(), "refused at once, not at the deadline")
	require.NoError(t, WaitStores(ctx, st, WaitConfig{}), "without the requirement the same store passes")

	safe, err := NewStores(RedisURLs{Default: startPersistent(t, "always").URL()}, StoreOptions{})
	require.NoError(t, err)
	defer safe.Close()
	require.NoError(t, WaitStores(ctx, safe, WaitConfig{RequireDurable: true}))
}

// A master that stops keeping acknowledged writes while the process runs
// (here CONFIG SET; in production a failover onto an unsafe replica)
// turns the readiness condition "durable" false, and true again once it
// is fixed.
func TestWatchDurableTurnsReadinessWithTheStore(t *testing.T) {
	srv := startPersistent(t, "everysec")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	ready := NewReadiness(st)
	watchCtx, stopWatch := context.WithCancel(ctx)
	w := WatchDurable(watchCtx, st, DurableWatchConfig{Interval: 20 * time.Millisecond})
	ready.WatchDurable(w)
	durable := func() error {
		for _, c := range ready.Check(ctx) {
			if c.Name == "durable" {
				return c.Err
			}
		}
		t.Fatal("no durable condition")
		return nil
	}
	require.NoError(t, durable())

	admin := srv.Client()
	defer admin.Close()
	require.NoError(t, admin.ConfigSet(ctx, "appendonly", "no").Err())
	require.Eventually(t, func() bool { return durable() != nil }, 10*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, durable(), ErrUnsafeStore)
	require.NoError(t, admin.ConfigSet(ctx, "appendonly", "yes").Err())
	require.Eventually(t, func() bool { return durable() == nil }, 10*time.Second, 10*time.Millisecond)

	stopWatch()
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not stop with its context")
	}
}
