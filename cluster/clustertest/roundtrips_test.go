package clustertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// countedMembers starts a workflow member (idle: its -idle-timeout) and
// an API member whose stores count their Redis commands and round trips
// in reg, as a process's /metrics does.
func countedMembers(t *testing.T, h *harness, ctx context.Context, idle time.Duration) (*telemetry.Registry, *node.Stores, *node.Workflow, *api) {
	t.Helper()
	reg := telemetry.NewRegistry()
	stores, err := node.OpenStores(ctxT(t, 5*time.Second), node.RedisURLs{Default: h.redis.URL()}, node.StoreOptions{StoreHook: reg.RedisHook})
	require.NoError(t, err)
	t.Cleanup(stores.Close)
	w, err := node.StartWorkflow(ctx, node.WorkflowConfig{
		Cluster: cluster.Config{NodeName: "workflow-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, Logger: h.logger("workflow-a"), FrameworkLogLevel: quietFramework},
		Stores: stores, Logger: h.logger("workflow-a"), IdleTimeout: idle,
	})
	require.NoError(t, err)
	t.Cleanup(w.Member.Crash)
	a := h.startAPIOn("api-a", stores.Location)
	waitMembers(t, a.member.Lookup, 1)
	return reg, stores, w, a
}

// TestRoundTripsPerOrder counts the Redis round trips (a pipeline is one)
// that the grain call path and the workflow make for one order from start
// to Confirmed (the edge adds its cart read and idempotency reservation,
// which on one Redis server also takes the order's creation lock: one more
// there, two on a Redis Cluster, where the lookup takes the lock itself). The bound guards against a regression; the figure is reported in
// the log. It counts with the processes' own instrument: the stores' Redis
// hooks and the metrics registry that /metrics serves.
func TestRoundTripsPerOrder(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t, 30*time.Second)
	reg, stores, _, a := countedMembers(t, h, ctx, 0)
	m, client := a.member, a.client
	var err error

	// Warm the scripts so NOSCRIPT fallbacks are not counted.
	warm := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err = client.StartOrderWorkflow(ctx, warm)
	require.NoError(t, err)
	h.waitStatus(t, warm.OrderId, contracts.OrderStatus_Confirmed)

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	sum := func(name string, match map[string]string) int64 {
		v, err := telemetry.Sum(reg.Gatherer(), name, match)
		require.NoError(t, err)
		return int64(v)
	}
	rt := func() int64 { return sum(telemetry.MetricRedisRoundTrips, nil) }
	byStore := func() map[string]int64 {
		out := map[string]int64{}
		for _, st := range []string{node.StoreEvents, node.StoreReadModel, node.StoreCommerce, node.StoreLocation, node.StoreRelocation} {
			out[st] = sum(telemetry.MetricRedisRoundTrips, map[string]string{telemetry.LabelStore: st})
		}
		return out
	}
	// As the edge does for an OrderId its request minted, on one Redis
	// server: its key reservation took the order's creation lock as well
	// (here taken as location.Creation says), so the cold lookup only
	// commits.
	lock, ok := stores.Locations.CreationFor(grain.KindName, req.OrderId)
	require.True(t, ok, "commerce and the Location Store share one server")
	rdb := h.redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.SetNX(ctx, lock.Lock, "held-by-the-edge", m.Lookup.CreateLockTTL()).Err())
	require.NoError(t, rdb.HSet(ctx, lock.Record, lock.StatusField, lock.Creating).Err())
	startCtx := placement.WithHeldCreation(placement.WithMintedIdentity(ctx, grain.KindName, req.OrderId), grain.KindName, req.OrderId, "held-by-the-edge")

	before, beforeByStore := rt(), byStore()
	_, _, err = client.StartOrderWorkflow(startCtx, req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Eventually(t, func() bool {
		return rt()-before >= 1
	}, 5*time.Second, 10*time.Millisecond, "round trips counted")
	n := rt() - before
	delta := byStore()
	var perStore int64
	for st, v := range delta {
		delta[st] = v - beforeByStore[st]
		perStore += delta[st]
	}
	require.Equal(t, n, perStore, "every round trip is some store's")
	t.Logf("Redis round trips for one order, grain call + workflow, start to Confirmed: %d (+1 at the edge); by store: %v", n, delta)
	// The demo cart has two SKUs. Commerce on one Redis server: Reserve
	// and Authorize as one script each (on a Redis Cluster they are
	// stepped: begin, a hold per SKU, finish; the method's seed, then the
	// payment record). Every store on one server: the start's append
	// carries its projection, its envelope, its idempotency mark and the
	// grain's Ready commit.
	require.LessOrEqual(t, delta[node.StoreCommerce], int64(2), "reserve 1 + authorize 1 (the mapping's mark rides in the start)")
	require.Zero(t, delta[node.StoreRelocation], "the first envelope rides in the start's append")
	require.LessOrEqual(t, delta[node.StoreEvents], int64(3), "start, then one projected append per step: the first cold generation of a minted OrderId opens nothing")
	require.Zero(t, delta[node.StoreLocation], "the lock held already, the grain's Ready commit (record, history, owner index) rides in the start's append")
	require.LessOrEqual(t, n, int64(5), "start (with projection, envelope, mark and the Ready commit), then the module calls + projected append per step (the confirmation rides with the payment)")
	require.Zero(t, rdb.Exists(ctx, lock.Lock).Val(), "the commit ended the held lock")
	require.Zero(t, delta[node.StoreReadModel], "on one Redis server the active-order index entry and its removal ride in the projected appends: no read-model round trip of their own")

	// Read after the count: on one Redis server the terminal step drops the active-order index
	// entry in the same script as its Confirmed projection.
	active, err := stores.ReadModel.(readmodel.ActiveIndex).Stuck(ctx, 0, time.Now().Add(time.Hour), 0)
	require.NoError(t, err)
	for _, o := range active {
		require.NotEqual(t, req.OrderId, o.OrderID, "index entry dropped with the terminal projection")
	}
}

// TestPassivationRoundTrips counts what an idle passivation costs on one
// Redis server: one command, the release script, which drops the owner's
// takeover index entry as well. The orders of a bench are all
// passivated once, so it is part of each order's cost.
func TestPassivationRoundTrips(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t, 30*time.Second)
	reg, _, w, a := countedMembers(t, h, ctx, 300*time.Millisecond)
	var err error
	// Commands are counted before they are sent, so once the test sees
	// the release in Redis every command of it is in the count (a round
	// trip is counted once its reply is read, which may come later).
	locationCommands := func() int64 {
		v, err := telemetry.Sum(reg.Gatherer(), telemetry.MetricRedisCommands, map[string]string{telemetry.LabelStore: node.StoreLocation})
		require.NoError(t, err)
		return int64(v)
	}
	// The test reads the records on a client of its own, outside the
	// count.
	raw := h.redis.Client()
	t.Cleanup(func() { _ = raw.Close() })
	records, err := location.NewRedis(location.Config{Client: raw})
	require.NoError(t, err)
	released := func(id string) bool {
		rec, err := records.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		owned, err := records.Owned(ctx, w.Member.Lookup.Self(), grain.KindName)
		require.NoError(t, err)
		return rec.Owner == "" && !slices.Contains(owned, id)
	}

	// The first passivation loads the release script (an EVAL retry).
	for i := range 2 {
		req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
		_, _, err = a.client.StartOrderWorkflow(ctx, req)
		require.NoError(t, err)
		h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
		before := locationCommands()
		require.Eventually(t, func() bool { return released(req.OrderId) }, 10*time.Second, 10*time.Millisecond,
			"the confirmed order's grain passivates: its record and the owner index forget it")
		if i == 1 {
			require.Equal(t, int64(1), locationCommands()-before, "one command, so one round trip: the release script, which drops the index entry too")
		}
	}
}
