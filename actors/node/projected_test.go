package node

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
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
	require.IsType(t, &readmodel.RedisCommitter{}, st.Commits, "one Redis: projections travel with appends")

	fence, _, err := st.Events.Open(ctx, "o1", 1)
	require.NoError(t, err)
	created := &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 5}
	v, err := readmodeltest.Commit(ctx, st.Commits, "o1", 0, fence,
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
	require.NotNil(t, st.Commits)
	_, ok := st.Locations.CreationFor("order", "o")
	require.True(t, ok, "one server: a start's key reservation takes the creation lock")
	_, ok = st.Locations.ReadyWritesFor("order", "o", "tok", location.Record{Owner: "m", Generation: 1})
	require.True(t, ok, "one server: a start may carry its grain's Ready commit")
}

// One Redis for every store: a new order's start is one unit of work
// (workflow.Service.Start), whose envelope and started mapping ride in
// the append's script, and each store reads back what it would have
// written itself (Envelopes.LoadFirst, Idempotency.Get, ReadModel.Get).
// A mapping of another order is left alone and reported unmarked.
func TestOneRedisRecordsAStartInOneUnit(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	svc := workflowOver(t, st)

	idem := st.Commerce.Idempotency()
	o1, req1 := reservedStart(ctx, t, st, "k1", "")
	_, recorded, err := svc.Start(ctx, o1, req1)
	require.NoError(t, err)
	require.True(t, recorded)
	m, err := idem.Get(ctx, "k1", req1.OrderId)
	require.NoError(t, err)
	require.Equal(t, commerce.MappingStarted, m.Status)
	env, err := (Envelopes{Store: st.Relocation}).LoadFirst(ctx, req1.OrderId)
	require.NoError(t, err)
	require.Equal(t, req1.PaymentMethodId, env.GetPaymentMethodId())
	_, gv, err := st.ReadModel.Get(ctx, req1.OrderId)
	require.NoError(t, err)
	require.EqualValues(t, 1, gv)

	o2, req2 := reservedStart(ctx, t, st, "k2", "someone-else")
	_, recorded, err = svc.Start(ctx, o2, req2)
	require.True(t, recorded)
	require.ErrorIs(t, err, commerce.ErrNotFound, "k2 maps to another order: the separate mark says so")
	m, err = idem.Get(ctx, "k2", "someone-else")
	require.NoError(t, err)
	require.Equal(t, commerce.MappingPending, m.Status)
}

// workflowOver is a workflow.Service over st, wired as StartWorkflow
// wires one.
func workflowOver(t *testing.T, st *Stores) *workflow.Service {
	t.Helper()
	s, err := workflow.New(workflow.Config{
		Kind: "order", Events: st.Events, ReadModel: st.ReadModel, Idempotency: st.Commerce.Idempotency(),
		Inventory: st.Commerce.Inventory(), Payment: st.Commerce.Payment(), Envelopes: Envelopes{Store: st.Relocation},
		Commits: st.Commits, Barrier: st.Barrier,
		Now: func() int64 { return 1_000 },
	})
	require.NoError(t, err)
	return s
}

// reservedStart reserves key's mapping, as the API does, for key's
// order, or for mappedTo when set, and returns that order's fresh
// activation and its start request.
func reservedStart(ctx context.Context, t *testing.T, st *Stores, key, mappedTo string) (*workflow.Order, *contracts.StartOrderWorkflowReq) {
	t.Helper()
	id := order.OrderIDFor([]byte("test-secret"), key)
	req := &contracts.StartOrderWorkflowReq{
		OrderId: id, CartId: "cart", ShippingAddressId: "addr", PaymentMethodId: "pm-" + key,
		IdempotencyKey: key, SourceCommandId: order.StartSourceCommandID(key),
		Lines: []*contracts.OrderLine{{Sku: "SKU-1", Quantity: 1}}, Amount: 100, Currency: "EUR",
	}
	_, won, err := st.Commerce.Idempotency().Reserve(ctx, key, commerce.Mapping{OrderID: cmp.Or(mappedTo, id), Status: commerce.MappingPending, Fingerprint: "fp"})
	require.NoError(t, err)
	require.True(t, won)
	o, err := workflowOver(t, st).OpenFresh(id, 1)
	require.NoError(t, err)
	return o, req
}
