package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// haRedis is a primary and its replica, in sync, and optionally a
// sentinel that watches them as "mall" and sees the replica; every
// process is stopped by its PID at the test's end.
type haRedis struct {
	ports                      []int
	primary, replica, sentinel *redisserver.Server
}

func startHA(ctx context.Context, t *testing.T, withSentinel bool) haRedis {
	t.Helper()
	ports, err := redisserver.FreePorts(3)
	require.NoError(t, err)
	h := haRedis{ports: ports}
	h.primary = startRedis(ctx, t, redisserver.Config{Port: ports[0]})
	h.replica = startRedis(ctx, t, redisserver.Config{Port: ports[1], ReplicaOf: h.primary.Addr()})
	rc := h.replica.Client()
	defer rc.Close()
	require.Eventually(t, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up") && h.primary.Acknowledged(ctx, 1) == nil
	}, 20*time.Second, 50*time.Millisecond, "the replica is in sync, and the primary counts it")
	if !withSentinel {
		return h
	}
	h.sentinel = startRedis(ctx, t, redisserver.Config{Port: ports[2], Sentinel: &redisserver.Sentinel{
		MasterName: "mall", Master: h.primary.Addr(), DownAfter: time.Second, FailoverTimeout: 5 * time.Second,
	}})
	sc := h.sentinel.Client()
	defer sc.Close()
	require.Eventually(t, func() bool {
		n, err := sc.Do(ctx, "SENTINEL", "REPLICAS", "mall").Slice()
		return err == nil && len(n) == 1
	}, 20*time.Second, 50*time.Millisecond, "the sentinel sees the replica")
	return h
}

// sentinelURL names the primary through the sentinel.
func (h haRedis) sentinelURL() string {
	return "redis+sentinel://" + h.sentinel.Addr() + "/0?master_name=mall"
}

func startRedis(ctx context.Context, t *testing.T, cfg redisserver.Config) *redisserver.Server {
	t.Helper()
	s, err := redisserver.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	t.Logf("redis pid=%d addr=%s sentinel=%v replica-of=%q", s.PID(), s.Addr(), cfg.Sentinel != nil, cfg.ReplicaOf)
	return s
}

// reserver reserves an idempotency key for "ord-<key>": one write script.
func reserver(ctx context.Context, st *Stores) func(key string) error {
	idem := st.Commerce.Idempotency()
	return func(key string) error {
		_, _, err := idem.Reserve(ctx, key, commerce.Mapping{OrderID: "ord-" + key, Fingerprint: "fp"})
		return err
	}
}

// TestStoresFollowASentinelFailover: the stores reach a primary through
// a redis+sentinel URL, the primary is SIGKILLed, the sentinel promotes
// the replica, and the same Stores write there without being reopened;
// what the replica held before the kill is still there.
func TestStoresFollowASentinelFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := startHA(ctx, t, true)
	primary, replica, sentinel := h.primary, h.replica, h.sentinel
	sc := sentinel.Client()
	defer sc.Close()

	st, err := OpenStores(ctx, RedisURLs{Default: h.sentinelURL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	idem := st.Commerce.Idempotency()
	reserve := reserver(ctx, st)
	require.NoError(t, reserve("before"))
	rc := replica.Client()
	require.Eventually(t, func() bool {
		id, err := rc.HGet(ctx, "sm:cs:idem:order:{ord-before}", "orderId").Result()
		return err == nil && id == "ord-before"
	}, 10*time.Second, 20*time.Millisecond, "the replica holds the write before the kill")
	rc.Close()

	killed := time.Now()
	require.NoError(t, syscall.Kill(primary.PID(), syscall.SIGKILL))
	var writes int
	require.Eventually(t, func() bool {
		writes++
		return reserve("after-"+strconv.Itoa(writes)) == nil
	}, 45*time.Second, 100*time.Millisecond, "a write succeeds on the promoted replica")
	t.Logf("FIGURE sentinel failover: writes resumed %s after SIGKILL of the primary (down-after 1s), %d attempts", time.Since(killed).Round(10*time.Millisecond), writes)

	addr, err := sc.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mall").StringSlice()
	require.NoError(t, err)
	require.Equal(t, replica.Addr(), fmt.Sprintf("%s:%s", addr[0], addr[1]), "the replica was promoted")
	m, err := idem.Get(ctx, "before", "ord-before")
	require.NoError(t, err, "the write the replica held survived the failover")
	require.Equal(t, "ord-before", m.OrderID)
}

// TestALaggingReplicaLosesNothingAcknowledged is the durability issue's
// lagging replica, with writes waiting for one replica: the replica is
// stopped (writes now answer 503, in doubt), the primary is SIGKILLed,
// the replica runs again and the sentinel promotes it. Every write that
// was acknowledged is on the new primary; once the old primary's port
// serves again, the sentinel makes it the new primary's replica and
// writes are acknowledged again.
func TestALaggingReplicaLosesNothingAcknowledged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	h := startHA(ctx, t, true)
	primary, replica := h.primary, h.replica
	sc := h.sentinel.Client()
	defer sc.Close()

	st, err := OpenStores(ctx, RedisURLs{Default: h.sentinelURL()},
		StoreOptions{Replication: redisurl.Replication{Replicas: 1, Timeout: 300 * time.Millisecond}})
	require.NoError(t, err)
	defer st.Close()
	idem := st.Commerce.Idempotency()
	reserve := reserver(ctx, st)
	var acked []string
	for i := range 50 {
		k := "acked-" + strconv.Itoa(i)
		require.NoError(t, reserve(k))
		acked = append(acked, k)
	}

	require.NoError(t, syscall.Kill(replica.PID(), syscall.SIGSTOP))
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(replica.PID(), syscall.SIGCONT)
		}
	}()
	inDoubt := 0
	for i := range 5 {
		if err := reserve("doubt-" + strconv.Itoa(i)); err != nil {
			require.ErrorIs(t, err, commerce.ErrUnavailable, "a write its replica does not hold is not acknowledged")
			inDoubt++
		}
	}
	require.Equal(t, 5, inDoubt, "no write is acknowledged while the replica is stopped")
	require.NoError(t, syscall.Kill(primary.PID(), syscall.SIGKILL))
	<-primary.Exited()
	require.NoError(t, syscall.Kill(replica.PID(), syscall.SIGCONT))
	resumed = true
	killed := time.Now()

	require.Eventually(t, func() bool {
		addr, err := sc.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mall").StringSlice()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == replica.Addr()
	}, 45*time.Second, 100*time.Millisecond, "the sentinel promotes the replica")
	t.Logf("FIGURE lagging replica: promoted %s after the primary's SIGKILL", time.Since(killed).Round(10*time.Millisecond))
	for _, k := range acked {
		m, err := idem.Get(ctx, k, "ord-"+k)
		require.NoError(t, err, "acknowledged %s survives the failover", k)
		require.Equal(t, "ord-"+k, m.OrderID)
	}

	// With no replica left every write is in doubt, as configured; the
	// old primary's port serving again gives the new primary its replica.
	require.Error(t, reserve("no-replica"), "one replica is required, and none runs")
	startRedis(ctx, t, redisserver.Config{Port: h.ports[0]})
	var n int
	require.Eventually(t, func() bool {
		n++
		return reserve("after-"+strconv.Itoa(n)) == nil
	}, 60*time.Second, 200*time.Millisecond, "writes are acknowledged once the sentinel made the old primary a replica")
	t.Logf("FIGURE lagging replica: %d acknowledged writes before the fault, 0 lost; %d writes refused as in doubt; acknowledged again %s after the kill",
		len(acked), inDoubt, time.Since(killed).Round(10*time.Millisecond))
}
