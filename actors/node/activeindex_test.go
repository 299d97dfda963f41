package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// The combined append+projection path keeps the active-order index: the
// Created projection is indexed, the steps in between leave the entry as
// it is (the report reads the projection itself), a terminal one drops it.
func TestProjectedAppendKeepsTheActiveIndex(t *testing.T) {
	srv := redisserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.NotNil(t, st.ProjectedAppend)
	idx, ok := st.ReadModel.(readmodel.ActiveIndex)
	require.True(t, ok, "the Redis read model keeps the active index")

	env := func(id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, OrderID: "o-ix", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	fence, _, err := st.Events.Open(ctx, "o-ix", 1)
	require.NoError(t, err)
	at := time.UnixMilli(1_700_000_000_000)
	_, err = st.ProjectedAppend.AppendProjected(ctx, "o-ix", 0, fence, env("e1"),
		&contracts.OrderState{OrderId: "o-ix", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: at.Add(-time.Second).UnixMilli()})
	require.NoError(t, err)
	_, err = st.ProjectedAppend.AppendProjected(ctx, "o-ix", 1, fence, env("e1b"),
		&contracts.OrderState{OrderId: "o-ix", Status: contracts.OrderStatus_InventoryReserved, UpdatedAtUnixMs: at.UnixMilli()})
	require.NoError(t, err)
	stuck, err := idx.Stuck(ctx, time.Minute, at.Add(2*time.Minute), 0)
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	require.Equal(t, "o-ix", stuck[0].OrderID)
	require.Equal(t, contracts.OrderStatus_InventoryReserved, stuck[0].State.GetStatus())

	recent, err := idx.Stuck(ctx, time.Minute, at.Add(30*time.Second), 0)
	require.NoError(t, err)
	require.Empty(t, recent, "30 s after its last change it is not stuck")

	_, err = st.ProjectedAppend.AppendProjected(ctx, "o-ix", 2, fence, env("e2"),
		&contracts.OrderState{OrderId: "o-ix", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: at.Add(time.Second).UnixMilli()})
	require.NoError(t, err)
	stuck, err = idx.Stuck(ctx, time.Minute, at.Add(2*time.Minute), 0)
	require.NoError(t, err)
	require.Empty(t, stuck)
	rc := srv.Client()
	defer rc.Close()
	keys, err := rc.Keys(ctx, readmodel.DefaultKeyPrefix+"active:*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		n, err := rc.ZCard(ctx, k).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a terminal order leaves the index (%s)", k)
	}
}
