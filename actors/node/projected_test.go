package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
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

// A split deployment is refused at start, naming the URLs and what to
// set: any store apart (a server, or another database of the same
// server). One deployment spelled differently (client options) is one,
// and gets every one-script path.
func TestSplitStoresAreRefused(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	for _, tc := range []struct {
		name string
		urls RedisURLs
	}{
		{"read model apart", RedisURLs{Default: a.URL(), ReadModel: b.URL()}},
		{"commerce apart", RedisURLs{Default: a.URL(), Commerce: b.URL()}},
		{"location apart", RedisURLs{Default: a.URL(), Location: b.URL()}},
		{"relocation apart", RedisURLs{Default: a.URL(), Relocation: b.URL()}},
		{"events apart", RedisURLs{Default: a.URL(), Events: b.URL()}},
		{"another database", RedisURLs{Default: "redis://127.0.0.1:6379/0", Location: "redis://127.0.0.1:6379/1"}},
		{"sentinel and direct", RedisURLs{Default: "redis://127.0.0.1:6379/0", Events: "redis+sentinel://127.0.0.1:26379/0?master_name=mall"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewStores(tc.urls, StoreOptions{})
			require.ErrorIs(t, err, ErrSplitDeployment)
			require.ErrorContains(t, err, "set -redis alone")
			require.ErrorContains(t, err, "-redis-location")
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: a.URL(), Location: a.URL() + "&client_name=loc", Events: a.URL() + "&pool_size=4"}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.NotNil(t, st.ProjectedAppend)
	require.NotNil(t, st.StartAppend)
	require.NotNil(t, st.CreationLocks)
	require.True(t, st.ReadyInStart)
}

// One Redis for every store: a start's envelope and started mapping ride
// in the append's script, and each store reads back what it would have
// written itself (Envelopes.LoadFirst, Idempotency.Get, ReadModel.Get).
// A mapping of another order is left alone and reported unmarked.
func TestOneRedisWiresTheStartAppend(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	require.NotNil(t, st.StartAppend, "one Redis: a start is one script")

	idem := st.Commerce.Idempotency()
	for _, k := range []struct{ key, order string }{{"k1", "o1"}, {"k2", "someone-else"}} {
		_, _, err := idem.Reserve(ctx, k.key, commerce.Mapping{OrderID: k.order, Status: commerce.MappingPending, Fingerprint: "fp"})
		require.NoError(t, err)
	}
	start := func(id, key string) *contracts.StartOrderWorkflowReq {
		return &contracts.StartOrderWorkflowReq{OrderId: id, CartId: "c", ShippingAddressId: "a", PaymentMethodId: "pm-" + id, IdempotencyKey: key}
	}
	ev := func(id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: "e-" + id, OrderID: id, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	created := func(id string) *contracts.OrderState {
		return &contracts.OrderState{OrderId: id, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 5}
	}

	fence, _, err := st.Events.Open(ctx, "o1", 1)
	require.NoError(t, err)
	v, marked, err := st.StartAppend.AppendStart(ctx, "o1", 0, fence, ev("o1"), created("o1"), start("o1", "k1"), nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	require.True(t, marked)
	m, err := idem.Get(ctx, "k1", "o1")
	require.NoError(t, err)
	require.Equal(t, commerce.MappingStarted, m.Status)
	env, err := (Envelopes{Store: st.Relocation}).LoadFirst(ctx, "o1")
	require.NoError(t, err)
	require.Equal(t, "pm-o1", env.GetPaymentMethodId())
	_, gv, err := st.ReadModel.Get(ctx, "o1")
	require.NoError(t, err)
	require.EqualValues(t, 1, gv)

	// A refused append writes none of it.
	_, _, err = st.StartAppend.AppendStart(ctx, "o1", 0, fence, ev("o1"), created("o1"), start("o1", "k1"), nil)
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)

	fence2, _, err := st.Events.Open(ctx, "o2", 1)
	require.NoError(t, err)
	_, marked, err = st.StartAppend.AppendStart(ctx, "o2", 0, fence2, ev("o2"), created("o2"), start("o2", "k2"), nil)
	require.NoError(t, err)
	require.False(t, marked, "k2 maps to another order")
	m, err = idem.Get(ctx, "k2", "someone-else")
	require.NoError(t, err)
	require.Equal(t, commerce.MappingPending, m.Status)
}
