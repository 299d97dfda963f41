package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// Cluster is a local 3-master Redis Cluster for one test.
type Cluster struct {
	*redisserver.Cluster
	// Client is a cluster client seeded with every master, closed when
	// the test ends.
	Client *redis.ClusterClient
}

// StartCluster starts a 3-master Redis Cluster (real redis-servers on
// free TCP ports, in a temporary directory) and stops every master, by
// PID, when the test ends. Before stopping it, it reads INFO errorstats on
// every master and fails the test on any CROSSSLOT error reply: a store
// that sends a multi-key command or script across slots fails its suite
// even if it handled the error.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	c, err := redisserver.StartCluster(ctx, redisserver.ClusterConfig{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	rc := &Cluster{Cluster: c, Client: c.Client()}
	t.Cleanup(func() {
		_ = rc.Client.Close()
		if err := c.Stop(); err != nil {
			t.Errorf("stop redis cluster pids=%v: %v", c.PIDs(), err)
		}
	})
	// Registered after Stop, so it runs before it (cleanups run last
	// first).
	t.Cleanup(func() { RequireNoCrossSlot(t, c) })
	t.Logf("redis cluster pids=%v url=%s", c.PIDs(), c.URL())
	return rc
}

// RequireNoCrossSlot fails the test when any master of c sent a CROSSSLOT
// error reply since it started.
func RequireNoCrossSlot(t testing.TB, c *redisserver.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.ErrorStats(ctx)
	if err != nil {
		t.Errorf("redis cluster errorstats: %v", err)
		return
	}
	if n := stats["CROSSSLOT"]; n != 0 {
		t.Errorf("redis cluster sent %d CROSSSLOT error replies (errorstats %v)", n, stats)
	}
}
