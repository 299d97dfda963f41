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

// The projected append writes exactly the record the read model reads,
// under the same version guard, and nothing when the append is refused.
func TestProjectedAppendIsTheReadModelsRecord(t *testing.T) {
	srv := redisserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.NotNil(t, st.ProjectedAppend, "one Redis: projections travel with appends")

	env := func(id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, OrderID: "o1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	fence, _, err := st.Events.Open(ctx, "o1", 1)
	require.NoError(t, err)
	created := &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 5}
	v, err := st.ProjectedAppend.AppendProjected(ctx, "o1", 0, fence, env("e1"), created)
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	got, gv, err := st.ReadModel.Get(ctx, "o1")
	require.NoError(t, err)
	require.EqualValues(t, 1, gv)
	require.Equal(t, contracts.OrderStatus_Created, got.GetStatus())

	// A newer projection already stored is never overwritten by an older.
	newer := &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 9}
	_, err = st.ReadModel.Put(ctx, "o1", 7, newer)
	require.NoError(t, err)
	_, err = st.ProjectedAppend.AppendProjected(ctx, "o1", 1, fence, env("e2"), &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_InventoryReserved})
	require.NoError(t, err)
	got, gv, err = st.ReadModel.Get(ctx, "o1")
	require.NoError(t, err)
	require.EqualValues(t, 7, gv)
	require.Equal(t, contracts.OrderStatus_Confirmed, got.GetStatus())

	// A refused append writes no projection.
	require.NoError(t, st.ReadModel.Delete(ctx, "o1"))
	_, err = st.ProjectedAppend.AppendProjected(ctx, "o1", 0, fence, env("e3"), created)
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	_, _, err = st.ReadModel.Get(ctx, "o1")
	require.ErrorIs(t, err, readmodel.ErrNotFound)
	stale := eventstore.Fence{Generation: 0, Epoch: 1}
	_, err = st.ProjectedAppend.AppendProjected(ctx, "o1", 2, stale, env("e4"), created)
	require.ErrorIs(t, err, eventstore.ErrFenced)
	_, _, err = st.ReadModel.Get(ctx, "o1")
	require.ErrorIs(t, err, readmodel.ErrNotFound)
}

// Split deployments keep two round trips: no projected append is wired.
func TestSplitStoresHaveNoProjectedAppend(t *testing.T) {
	a, b := redisserver.ForTest(t), redisserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: a.URL(), ReadModel: b.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.Nil(t, st.ProjectedAppend)
}
