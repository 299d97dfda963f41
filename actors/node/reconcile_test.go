package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/takeover"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// An order whose index entries were lost with a write (both deleted
// here) is missed by the stuck-order report and by a member takeover
// that trusts the index; after one reconciler pass both find it again.
// The pass costs about 4 commands per order held in Redis.
func TestALostIndexEntryIsBackAfterOneReconcilerPass(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cmds atomic.Int64
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{StoreHook: func(string) redis.Hook { return cmdCount{&cmds} }})
	require.NoError(t, err)
	defer st.Close()
	rdb := srv.Client()
	defer rdb.Close()

	require.NoError(t, st.Location.PutMember(ctx, "m-1", "workflow-a", 0))
	const orders = 50
	now := time.Now()
	var lost string
	for i := range orders {
		id := "ord-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		ok, gen, _, err := st.Location.BeginCreate(ctx, grain.KindName, id, "tok", time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, st.Location.CommitReady(ctx, grain.KindName, id, "tok",
			location.Record{Owner: "m-1", PIDAddress: "addr", PIDID: "pid-" + id, Generation: gen}))
		_, _, err = st.Events.Open(ctx, id, gen)
		require.NoError(t, err)
		status := contracts.OrderStatus_Confirmed
		if i == 0 {
			lost, status = id, contracts.OrderStatus_InventoryReserved
		}
		_, err = st.ReadModel.Put(ctx, id, 2, &contracts.OrderState{OrderId: id, Status: status, UpdatedAtUnixMs: now.Add(-time.Hour).UnixMilli()})
		require.NoError(t, err)
	}
	active := st.ReadModel.(readmodel.ActiveIndex)
	tk, err := takeover.New(takeover.Config{Kind: grain.KindName, Location: st.Location, Relocations: st.Relocation, Fences: st.Events.(takeover.Fencer)})
	require.NoError(t, err)
	findings := func() (stuck bool, takenOver bool) {
		t.Helper()
		s, err := active.Stuck(ctx, time.Minute, now, 0)
		require.NoError(t, err)
		for _, o := range s {
			stuck = stuck || o.OrderID == lost
		}
		res, errs, err := tk.Member(ctx, takeover.Request{Member: "m-1", Force: true, DryRun: true, Caller: "test"})
		require.NoError(t, err)
		require.Empty(t, errs)
		for _, r := range res {
			takenOver = takenOver || r.OrderID == lost
		}
		return stuck, takenOver
	}
	stuck, taken := findings()
	require.True(t, stuck && taken, "found while the index entries exist")

	// The entries a lost write would have left out.
	activeKeys, err := rdb.Keys(ctx, readmodel.DefaultKeyPrefix+"active:*").Result()
	require.NoError(t, err)
	for _, k := range activeKeys {
		require.NoError(t, rdb.ZRem(ctx, k, lost).Err())
	}
	require.NoError(t, rdb.SRem(ctx, location.DefaultKeyPrefix+"owned:m-1", grain.KindName+"/"+lost).Err())
	stuck, taken = findings()
	require.False(t, stuck, "the report starts from the index")
	require.False(t, taken, "and so does a member takeover without a scan")

	before := cmds.Load()
	r, err := st.ReconcileIndexes(ctx)
	require.NoError(t, err)
	cost := cmds.Load() - before
	require.Equal(t, 1, r.Active, "one order is not terminal")
	require.Equal(t, orders, r.Owned, "every order is owned")
	stuck, taken = findings()
	require.True(t, stuck, "the report finds it after one pass")
	require.True(t, taken, "and so does the takeover")
	perOrder := float64(cost) / orders
	require.LessOrEqual(t, perOrder, 5.0, "a pass costs about 4 commands per order")
	t.Logf("FIGURE index reconciler pass: %d commands over %d orders = %.2f per order, %s", cost, orders, perOrder, r.Took.Round(time.Millisecond))

	// The member's loop runs passes by itself, and stops with its context.
	require.NoError(t, rdb.SRem(ctx, location.DefaultKeyPrefix+"owned:m-1", grain.KindName+"/"+lost).Err())
	loopCtx, stopLoop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); st.RunReconciler(loopCtx, ReconcileConfig{Every: 20 * time.Millisecond}) }()
	require.Eventually(t, func() bool {
		return rdb.SIsMember(ctx, location.DefaultKeyPrefix+"owned:m-1", grain.KindName+"/"+lost).Val()
	}, 10*time.Second, 10*time.Millisecond, "a pass of the loop adds the entry back")
	stopLoop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not stop with its context")
	}
	st.RunReconciler(ctx, ReconcileConfig{}) // 0 runs none: returns at once
}

// cmdCount counts the commands the stores send, pipelined ones each.
type cmdCount struct{ n *atomic.Int64 }

func (cmdCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c cmdCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c cmdCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// A pass prunes the members recorded gone longer than PruneAfter ago
// whose orders all left them, and only those: one gone a moment ago
// stays, as does one an order still names, and a live one.
func TestAPassPrunesOnlyLongGoneMembersWhoOwnNothing(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	now := time.Now()
	for _, m := range []string{"m-old", "m-new", "m-owns", "m-live"} {
		require.NoError(t, st.Location.PutMember(ctx, m, "node-"+m, 0))
	}
	ok, next, _, err := st.Location.BeginCreate(ctx, grain.KindName, "ord-held", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, st.Location.CommitReady(ctx, grain.KindName, "ord-held", "tok", location.Record{Owner: "m-owns", PIDAddress: "a", PIDID: "p", Generation: next}))
	for m, at := range map[string]time.Time{"m-old": now.Add(-time.Hour), "m-new": now.Add(-time.Second), "m-owns": now.Add(-time.Hour)} {
		_, err := st.Location.MarkGone(ctx, m, "node-"+m, at.UnixMilli())
		require.NoError(t, err)
	}

	p, err := st.PruneMembers(ctx, 10*time.Minute, now)
	require.NoError(t, err)
	require.Equal(t, PrunedMembers{Gone: 3, Pruned: 1, Owning: 1}, p)
	for m, kept := range map[string]bool{"m-old": false, "m-new": true, "m-owns": true, "m-live": true} {
		name, err := st.Location.MemberName(ctx, m)
		require.NoError(t, err)
		require.Equal(t, kept, name != "", m)
	}
}
