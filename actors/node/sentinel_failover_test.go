package node

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// TestStoresFollowASentinelFailover: the stores reach a primary through
// a redis+sentinel URL, the primary is SIGKILLed, the sentinel promotes
// the replica, and the same Stores write there without being reopened;
// what the replica acknowledged before the kill (WAIT 1) is still there.
func TestStoresFollowASentinelFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ports, err := redisserver.FreePorts(3)
	require.NoError(t, err)
	start := func(cfg redisserver.Config) *redisserver.Server {
		t.Helper()
		s, err := redisserver.Start(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		t.Logf("redis pid=%d addr=%s sentinel=%v", s.PID(), s.Addr(), cfg.Sentinel != nil)
		return s
	}
	primary := start(redisserver.Config{Port: ports[0]})
	replica := start(redisserver.Config{Port: ports[1], ReplicaOf: primary.Addr()})
	sentinel := start(redisserver.Config{Port: ports[2], Sentinel: &redisserver.Sentinel{
		MasterName: "mall", Master: primary.Addr(), DownAfter: time.Second, FailoverTimeout: 5 * time.Second,
	}})

	sc := sentinel.Client()
	defer sc.Close()
	require.Eventually(t, func() bool {
		n, err := sc.Do(ctx, "SENTINEL", "REPLICAS", "mall").Slice()
		return err == nil && len(n) == 1
	}, 20*time.Second, 50*time.Millisecond, "the sentinel sees the replica")

	u := "redis+sentinel://" + sentinel.Addr() + "/0?master_name=mall"
	st, err := OpenStores(ctx, RedisURLs{Default: u}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	idem := st.Commerce.Idempotency()
	reserve := func(key string) error {
		_, _, err := idem.Reserve(ctx, key, commerce.Mapping{OrderID: "ord-" + key, Fingerprint: "fp"})
		return err
	}
	require.NoError(t, reserve("before"))
	pc := primary.Client()
	n, err := pc.Wait(ctx, 1, 5*time.Second).Result()
	pc.Close()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the replica holds the write before the kill")

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
	m, err := idem.Get(ctx, "before")
	require.NoError(t, err, "the write WAIT saw replicated survived the failover")
	require.Equal(t, "ord-before", m.OrderID)
}
