package node

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// TestWritesWaitForTheReplica: with one replica required, every store's
// writes (scripts, plain commands, pipelines) are acknowledged only once
// the replica holds them. A stopped replica turns each write into a 503
// STORE_UNAVAILABLE in doubt within the WAIT timeout, and reads still
// answer; once it runs again, writes are acknowledged again.
func TestWritesWaitForTheReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := startHA(ctx, t, false)
	primary, replica := h.primary, h.replica
	rc := replica.Client()
	defer rc.Close()

	var shortfalls atomic.Int64
	st, err := OpenStores(ctx, RedisURLs{Default: primary.URL()}, StoreOptions{
		Replication: redisurl.Replication{Replicas: 1, Timeout: 300 * time.Millisecond, Shortfalls: func() { shortfalls.Add(1) }},
		// The per-store clients, as the processes run them.
		StoreHook: func(string) redis.Hook { return nopHook{} },
	})
	require.NoError(t, err)
	defer st.Close()
	idem := st.Commerce.Idempotency()
	reserve := reserver(ctx, st)
	require.NoError(t, reserve("k-1"), "a script")
	require.Zero(t, shortfalls.Load())
	require.NoError(t, st.Commerce.ApplySeed(ctx, commerce.DemoSeed()), "a pipeline of writes")
	m, err := rc.HGetAll(ctx, "sm:cs:idem:order:{ord-k-1}").Result()
	require.NoError(t, err)
	require.Equal(t, "ord-k-1", m["orderId"], "acknowledged means on the replica")

	require.NoError(t, syscall.Kill(replica.PID(), syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(replica.PID(), syscall.SIGCONT)
		}
	}()
	began := time.Now()
	err = reserve("k-2")
	took := time.Since(began)
	require.ErrorContains(t, err, "0 of 1 replicas", "the shortfall, named")
	require.EqualValues(t, 1, shortfalls.Load(), "the shortfall, counted (the replicas-short alert's metric)")
	require.ErrorIs(t, err, commerce.ErrUnavailable, "in doubt, as a timeout")
	require.Equal(t, errkind.StoreUnavailable, errkind.Of(err))
	require.Less(t, took, 2*time.Second, "bounded by the WAIT timeout")
	t.Logf("FIGURE a write with its replica stopped: %s in doubt after %s", "503 STORE_UNAVAILABLE", took.Round(time.Millisecond))
	got, err := idem.Get(ctx, "k-2", "ord-k-2")
	require.NoError(t, err, "reads answer, and may show a write a failover could still lose")
	require.Equal(t, "ord-k-2", got.OrderID)

	require.NoError(t, syscall.Kill(replica.PID(), syscall.SIGCONT))
	stopped = false
	var n int
	require.Eventually(t, func() bool {
		n++
		return reserve("k-3-"+strconv.Itoa(n)) == nil
	}, 20*time.Second, 50*time.Millisecond, "writes are acknowledged again once the replica runs")
}

type nopHook struct{}

func (nopHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (nopHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (nopHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
