package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// One Redis for the event store and the read model: the stores are wired
// with readmodel's projected append, and what it writes is the record the
// read model reads. Its contract (guard, refused appends, index) is
// readmodeltest's, run in readmodel.
func TestOneRedisWiresTheProjectedAppend(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.IsType(t, &readmodel.ProjectedAppend{}, st.ProjectedAppend, "one Redis: projections travel with appends")

	fence, _, err := st.Events.Open(ctx, "o1", 1)
	require.NoError(t, err)
	created := &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 5}
	v, err := st.ProjectedAppend.AppendProjected(ctx, "o1", 0, fence,
		[]eventstore.Envelope{{EventID: "e1", OrderID: "o1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}, created)
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	got, gv, err := st.ReadModel.Get(ctx, "o1")
	require.NoError(t, err)
	require.EqualValues(t, 1, gv)
	require.Equal(t, contracts.OrderStatus_Created, got.GetStatus())
}

// Split deployments keep two round trips: no projected append is wired.
func TestSplitStoresHaveNoProjectedAppend(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: a.URL(), ReadModel: b.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.Nil(t, st.ProjectedAppend)
}
