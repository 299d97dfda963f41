package redisserver_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

func startClusterT(t *testing.T) *redisserver.Cluster {
	t.Helper()
	c, err := redisserver.StartCluster(ctxT(t), redisserver.ClusterConfig{})
	must(t, err, "StartCluster")
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	t.Logf("redis cluster pids=%v url=%s", c.PIDs(), c.URL())
	return c
}

// A formed cluster serves every slot from three masters, spreads keys
// over all of them, and counts a cross-slot command in errorstats.
func TestStartClusterSpreadsKeysAndCountsCrossSlot(t *testing.T) {
	c := startClusterT(t)
	ctx := ctxT(t)
	if got := len(c.Nodes()); got != redisserver.DefaultMasters {
		t.Fatalf("%d masters", got)
	}
	rc, err := redisurl.NewClient(c.URL(), redisurl.Options{})
	must(t, err, "NewClient")
	defer rc.Close()
	if _, ok := rc.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient(%s) = %T, want a cluster client", c.URL(), rc)
	}
	for i := range 60 {
		must(t, rc.Set(ctx, fmt.Sprintf("k:{%d}", i), i, 0).Err(), "SET")
	}
	spread, err := c.KeysPerMaster(ctx)
	must(t, err, "KeysPerMaster")
	t.Logf("keys per master: %v", spread)
	for addr, n := range spread {
		if n == 0 {
			t.Errorf("master %s holds no key", addr)
		}
	}
	// Slot agrees with the server's CLUSTER KEYSLOT.
	for _, k := range []string{"a", "sm:es:{ord-1}:stream", "x{}y", "{}", "p{q}r{s}"} {
		want, err := rc.ClusterKeySlot(ctx, k).Result()
		must(t, err, "CLUSTER KEYSLOT")
		if got := redisserver.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, server says %d", k, got, want)
		}
	}

	stats, err := c.ErrorStats(ctx)
	must(t, err, "ErrorStats")
	if stats["CROSSSLOT"] != 0 {
		t.Fatalf("CROSSSLOT before any cross-slot command: %v", stats)
	}
	// Two keys in different slots, sent to the first key's master.
	node, err := rc.(*redis.ClusterClient).MasterForKey(ctx, "a")
	must(t, err, "MasterForKey")
	if err := node.MSet(ctx, "a", 1, "b", 2).Err(); err == nil || !redis.HasErrorPrefix(err, "CROSSSLOT") {
		t.Fatalf("MSET a b = %v, want CROSSSLOT", err)
	}
	stats, err = c.ErrorStats(ctx)
	must(t, err, "ErrorStats")
	if stats["CROSSSLOT"] != 1 {
		t.Fatalf("errorstats after one CROSSSLOT: %v", stats)
	}
}

// MoveSlots hands a slot and its keys to another master; a client that
// reads a moved key during the move is sent ASK, and after it MOVED.
func TestMoveSlotsRedirects(t *testing.T) {
	c := startClusterT(t)
	ctx := ctxT(t)
	rc := c.Client()
	defer rc.Close()
	key := "sm:es:{ord-move}:stream"
	slot := redisserver.Slot(key)
	must(t, rc.Set(ctx, key, "v", 0).Err(), "SET")
	from, err := rc.MasterForKey(ctx, key)
	must(t, err, "MasterForKey")
	to := -1
	for i, s := range c.Nodes() {
		if s.Addr() != from.Options().Addr {
			to = i
			break
		}
	}
	var during string
	moved, err := c.MoveSlots(ctx, []int{slot}, to, redisserver.MoveOptions{Between: func(ctx context.Context, _ int) error {
		// Asked of the old owner directly: the key left, the slot is
		// migrating, so it answers ASK.
		err := from.Get(ctx, key).Err()
		if err != nil {
			during = err.Error()
		}
		// The cluster client follows it.
		v, err := rc.Get(ctx, key).Result()
		if err != nil || v != "v" {
			return fmt.Errorf("GET during the move = %q, %v", v, err)
		}
		return nil
	}})
	must(t, err, "MoveSlots")
	if moved[slot] != 1 {
		t.Fatalf("moved %v, want 1 key of slot %d", moved, slot)
	}
	if len(during) < 3 || during[:3] != "ASK" {
		t.Fatalf("the old owner answered %q during the move, want ASK", during)
	}
	if err := from.Get(ctx, key).Err(); err == nil || !redis.HasErrorPrefix(err, "MOVED") {
		t.Fatalf("the old owner answered %v after the move, want MOVED", err)
	}
	v, err := rc.Get(ctx, key).Result()
	must(t, err, "GET after the move")
	if v != "v" {
		t.Fatalf("GET = %q", v)
	}
	stats, err := c.ErrorStats(ctx)
	must(t, err, "ErrorStats")
	t.Logf("errorstats: %v", stats)
	if stats["ASK"] == 0 || stats["MOVED"] == 0 {
		t.Fatalf("errorstats %v: want ASK and MOVED counted", stats)
	}
}

// Stop ends every master by PID and removes the directory it created.
func TestClusterStopEndsEveryMaster(t *testing.T) {
	c, err := redisserver.StartCluster(ctxT(t), redisserver.ClusterConfig{})
	must(t, err, "StartCluster")
	pids, dir := c.PIDs(), c.Dir()
	must(t, c.Stop(), "Stop")
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still there: %v", dir, err)
	}
}

// ClusterURL names every seed in the form the processes parse.
func TestClusterURLNamesEverySeed(t *testing.T) {
	seeds := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	u := redisserver.ClusterURL(seeds)
	if u != "redis+cluster://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3" {
		t.Errorf("ClusterURL = %s", u)
	}
	p, err := redisurl.Parse(u)
	must(t, err, "Parse")
	if p.Kind != redisurl.Cluster || len(p.Cluster.Addrs) != 3 || p.Cluster.Addrs[2] != seeds[2] {
		t.Errorf("Parse(%s) = %v %+v", u, p.Kind, p.Cluster)
	}
}
