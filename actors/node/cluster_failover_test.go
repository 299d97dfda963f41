package node

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// startReplicatedCluster is a 3-master Redis Cluster with one replica
// each, every node stopped by its PID at the test's end. The node
// timeout is short, as the local HA topologies set it: a master that
// stops answering is replaced within a few seconds.
func startReplicatedCluster(ctx context.Context, t *testing.T) *redisserver.Cluster {
	t.Helper()
	c, err := redisserver.StartCluster(ctx, redisserver.ClusterConfig{Replicas: 1, NodeTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	for i, m := range c.Nodes() {
		t.Logf("redis master %d pid=%d addr=%s replica pid=%d addr=%s", i, m.PID(), m.Addr(), c.Replicas(i)[0].PID(), c.Replicas(i)[0].Addr())
	}
	return c
}

// keysOn sorts n idempotency keys by the master that serves them.
func keysOn(ctx context.Context, t *testing.T, c *redisserver.Cluster, prefix string, n int) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	for i := range n {
		k := prefix + strconv.Itoa(i)
		m, err := c.Owner(ctx, redisserver.Slot("ord-"+k)) // the mapping sits in its order's slot
		require.NoError(t, err)
		out[m] = append(out[m], k)
	}
	return out
}

// onReplica reads an idempotency mapping from a replica itself
// (READONLY), not through its master.
func onReplica(ctx context.Context, s *redisserver.Server, key string) (string, error) {
	rc := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
		return cn.ReadOnly(ctx).Err()
	}})
	defer rc.Close()
	return rc.HGet(ctx, "sm:cs:idem:order:{ord-"+key+"}", "orderId").Result()
}

// TestClusterWritesWaitForTheirMastersReplica: on a Redis Cluster with a
// replica per master and -redis-wait-replicas 1, a write is acknowledged
// only once its own master's replica holds it. A stopped replica makes
// the writes to its master's slots answer 503 STORE_UNAVAILABLE, in
// doubt, while the other masters' writes are still acknowledged. Then
// that master is SIGKILLed and its replica takes its slots: every write
// acknowledged before is there, writes there stay refused while the new
// master has no replica, and once the old master runs again (as its
// replica) the same Stores' writes are acknowledged again.
func TestClusterWritesWaitForTheirMastersReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := startReplicatedCluster(ctx, t)
	st, err := OpenStores(ctx, RedisURLs{Default: c.URL()}, StoreOptions{
		Replication: redisurl.Replication{Replicas: 1, Timeout: 300 * time.Millisecond},
		// Per-store cluster clients, as the processes run them.
		StoreHook: func(string) redis.Hook { return nopHook{} },
	})
	require.NoError(t, err)
	defer st.Close()
	idem := st.Commerce.Idempotency()
	reserve := reserver(ctx, st)

	acked := keysOn(ctx, t, c, "acked-", 60)
	for m, keys := range acked {
		for _, k := range keys {
			require.NoError(t, reserve(k))
			got, err := onReplica(ctx, c.Replicas(m)[0], k)
			require.NoError(t, err, "acknowledged means on the master's own replica")
			require.Equal(t, "ord-"+k, got)
		}
	}
	require.NoError(t, st.Commerce.ApplySeed(ctx, commerce.DemoSeed()), "a cluster pipeline of writes, over every master")

	victim := 0
	replica := c.Replicas(victim)[0]
	require.NoError(t, syscall.Kill(replica.PID(), syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(replica.PID(), syscall.SIGCONT)
		}
	}()
	doubt := keysOn(ctx, t, c, "doubt-", 30)
	require.NotEmpty(t, doubt[victim])
	began := time.Now()
	err = reserve(doubt[victim][0])
	took := time.Since(began)
	require.ErrorContains(t, err, "0 of 1 replicas", "the shortfall on the stopped replica's master, named")
	require.Equal(t, errkind.StoreUnavailable, errkind.Of(err), "in doubt: 503 STORE_UNAVAILABLE")
	require.Less(t, took, 2*time.Second, "bounded by the WAIT timeout")
	for m, keys := range doubt {
		if m != victim {
			require.NoError(t, reserve(keys[0]), "master %d's replica runs: its writes are acknowledged", m)
		}
	}
	t.Logf("FIGURE a cluster write with its master's replica stopped: 503 STORE_UNAVAILABLE after %s; the other masters' writes acknowledged", took.Round(time.Millisecond))
	require.NoError(t, syscall.Kill(replica.PID(), syscall.SIGCONT))
	stopped = false

	after := keysOn(ctx, t, c, "after-", 3000)[victim]
	killed := time.Now()
	require.NoError(t, syscall.Kill(c.Nodes()[victim].PID(), syscall.SIGKILL))
	rc := replica.Client()
	defer rc.Close()
	require.Eventually(t, func() bool {
		role, err := rc.Do(ctx, "ROLE").Slice()
		return err == nil && role[0] == "master"
	}, 60*time.Second, 50*time.Millisecond, "the replica takes the killed master's slots")
	promoted := time.Since(killed)
	require.Eventually(t, func() bool {
		_, err := idem.Get(ctx, acked[victim][0], "ord-"+acked[victim][0])
		return err == nil
	}, 15*time.Second, 50*time.Millisecond, "the stores' slot map follows the promotion (reloaded every second)")
	for _, keys := range acked {
		for _, k := range keys {
			m, err := idem.Get(ctx, k, "ord-"+k)
			require.NoError(t, err, "acknowledged %s survived the failover", k)
			require.Equal(t, "ord-"+k, m.OrderID)
		}
	}
	err = reserve(after[0])
	require.ErrorContains(t, err, "0 of 1 replicas", "the new master has no replica yet: in doubt, never acknowledged unreplicated")

	require.NoError(t, c.RestartNode(ctx, victim))
	var tries int
	require.Eventually(t, func() bool {
		tries++
		return reserve(after[1+tries%(len(after)-1)]) == nil
	}, 60*time.Second, 100*time.Millisecond, "the old master replicates the new one and writes are acknowledged again")
	t.Logf("FIGURE redis cluster failover: replica promoted %s after its master's SIGKILL (node timeout 2s), every one of %d acknowledged writes there; writes acknowledged again %s after the kill, once the old master ran again as its replica",
		promoted.Round(10*time.Millisecond), len(acked[0])+len(acked[1])+len(acked[2]), time.Since(killed).Round(10*time.Millisecond))
	role, err := c.Nodes()[victim].Client().Do(ctx, "ROLE").Slice()
	require.NoError(t, err)
	require.Equal(t, "slave", role[0], "the old master came back as the new one's replica")
}
