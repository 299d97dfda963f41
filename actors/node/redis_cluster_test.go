package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// A redis+cluster URL opens every store on go-redis' cluster client:
// one client for the URL, a pool of its own per hooked store, each
// store's calls counted under its label; orders written through the
// stores land on all three masters, and the projected append (event and
// projection in one script) runs on the order's slot. StartCluster fails
// the test on any CROSSSLOT reply.
func TestStoresOnARedisCluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg := telemetry.NewRegistry()
	st, err := OpenStores(ctx, RedisURLs{Default: rc.URL()}, StoreOptions{StoreHook: reg.RedisHook, PoolSize: 4})
	require.NoError(t, err)
	defer st.Close()
	require.Len(t, st.clients, 1)
	require.IsType(t, &redis.ClusterClient{}, st.clients[0].client)
	require.Len(t, st.own, 5, "a hooked store on a cluster has a client of its own")
	require.NotNil(t, st.Commits)

	for i := range 30 {
		id := fmt.Sprintf("ord-%d", i)
		fence, _, err := st.Events.Open(ctx, id, 1)
		require.NoError(t, err)
		_, err = readmodeltest.Commit(ctx, st.Commits, id, 0, fence,
			[]eventstore.Envelope{{EventID: id + "-e1", OrderID: id, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}},
			&contracts.OrderState{OrderId: id, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 5})
		require.NoError(t, err)
		_, v, err := st.ReadModel.Get(ctx, id)
		require.NoError(t, err)
		require.EqualValues(t, 1, v)
		acquired, _, _, err := st.Location.BeginCreate(ctx, "order", id, "tok-"+id, time.Minute)
		require.NoError(t, err)
		require.True(t, acquired)
	}
	spread, err := rc.KeysPerMaster(ctx)
	require.NoError(t, err)
	t.Logf("keys per master: %v", spread)
	for addr, n := range spread {
		require.NotZero(t, n, "master %s holds no key", addr)
	}
	n, err := telemetry.Sum(reg.Gatherer(), telemetry.MetricRedisCommands, map[string]string{telemetry.LabelStore: StoreLocation, "command": "evalsha"})
	require.NoError(t, err)
	require.Equal(t, 30.0, n, "the Location Store's scripts, counted under its label")
}

// On a Redis Cluster a new order's start is one script too: the start
// event, its Created projection, the first activation envelope and the
// mapping's started mark all carry the order's hash tag, so they ride in
// the start's unit of work (workflow.Service.Start) and neither commerce
// nor the Relocation Store sends a command of its own. StartCluster fails
// the test on any CROSSSLOT reply.
func TestAStartIsOneScriptOnARedisCluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := telemetry.NewRegistry()
	st, err := OpenStores(ctx, RedisURLs{Default: rc.URL()}, StoreOptions{StoreHook: reg.RedisHook, PoolSize: 4})
	require.NoError(t, err)
	defer st.Close()
	_, ok := st.Locations.ReadyWritesFor("order", "o", "tok", location.Record{Owner: "m", Generation: 1})
	require.False(t, ok, "the Ready commit's owned set is another slot: no start carries it")
	svc := workflowOver(t, st)

	commands := func(store string) float64 {
		n, err := telemetry.Sum(reg.Gatherer(), telemetry.MetricRedisCommands, map[string]string{telemetry.LabelStore: store})
		require.NoError(t, err)
		return n
	}
	scripts := func() float64 {
		n, err := telemetry.Sum(reg.Gatherer(), telemetry.MetricRedisCommands, map[string]string{telemetry.LabelStore: StoreEvents, "command": "evalsha"})
		require.NoError(t, err)
		return n
	}
	for i := range 20 {
		key := fmt.Sprintf("key-s%d", i)
		o, req := reservedStart(ctx, t, st, key, "")
		cs, rel, ev := commands(StoreCommerce), commands(StoreRelocation), scripts()
		_, recorded, err := svc.Start(ctx, o, req)
		require.NoError(t, err)
		require.True(t, recorded)
		require.Equal(t, cs, commands(StoreCommerce), "commerce sent nothing itself: the mark rode in the start's script")
		require.Equal(t, rel, commands(StoreRelocation), "the Relocation Store sent nothing itself")
		require.Equal(t, ev+1, scripts(), "the start is one script")

		m, err := st.Commerce.Idempotency().Get(ctx, key, req.OrderId)
		require.NoError(t, err)
		require.Equal(t, commerce.MappingStarted, m.Status)
		env, err := Envelopes{Store: st.Relocation}.LoadFirst(ctx, req.OrderId)
		require.NoError(t, err)
		require.Equal(t, req.PaymentMethodId, env.GetPaymentMethodId())
		_, pv, err := st.ReadModel.Get(ctx, req.OrderId)
		require.NoError(t, err)
		require.EqualValues(t, 1, pv)
	}
}
