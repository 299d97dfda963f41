package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts/errkind"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// A Redis at its memory limit under noeviction refuses every write with
// OOM. Each store reports that as its own Unavailable (a caller that only
// asks "retry later?" needs no new case) carrying the kind StoreFull, so
// that the edge answers 503 STORE_FULL, never 500; and nothing of the
// refused write is applied.
func TestEveryStoreReportsAFullRedisAsStoreFull(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()

	admin := srv.Client()
	defer admin.Close()
	dbsize := func() int64 {
		n, err := admin.DBSize(ctx).Result()
		require.NoError(t, err)
		return n
	}
	// A fence taken before the limit, so that the append below is refused
	// for memory, not for its fence.
	fence, _, err := st.Events.Open(ctx, "o-full", 1)
	require.NoError(t, err)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
	defer admin.ConfigSet(context.Background(), "maxmemory", "0")
	before := dbsize()

	full := func(name string, unavailable error, err error) {
		t.Helper()
		require.Error(t, err, name)
		require.ErrorIs(t, err, errkind.StoreFull, "%s: %v", name, err)
		require.ErrorIs(t, err, unavailable, "%s: still its store's Unavailable: %v", name, err)
		require.Equal(t, errkind.StoreFull, errkind.Of(err), name)
	}
	_, err = st.Events.Append(ctx, "o-full", 0, fence,
		[]eventstore.Envelope{{EventID: "e1", OrderID: "o-full", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}})
	full("event store append", eventstore.ErrUnavailable, err)
	_, err = st.ProjectedAppend.AppendProjected(ctx, "o-full", 0, fence,
		[]eventstore.Envelope{{EventID: "e1", OrderID: "o-full", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}},
		&contracts.OrderState{OrderId: "o-full", Status: contracts.OrderStatus_Created})
	full("projected append", eventstore.ErrUnavailable, err)
	_, err = st.ReadModel.(interface {
		Put(context.Context, string, int64, *contracts.OrderState) (bool, error)
	}).Put(ctx, "o-full", 1, &contracts.OrderState{OrderId: "o-full", Status: contracts.OrderStatus_Created})
	full("read model put", readmodel.ErrUnavailable, err)
	_, _, err = st.Commerce.Idempotency().Reserve(ctx, "k-full", commerce.Mapping{OrderID: "o-full"})
	full("idempotency reserve", commerce.ErrUnavailable, err)
	full("relocation first envelope", relocation.ErrUnavailable, st.Relocation.SaveFirst(ctx, "o-full", []byte("envelope")))
	_, _, _, err = st.CreationLocks.BeginCreate(ctx, "order", "o-full", "token", time.Minute)
	full("location creation lock", location.ErrStoreUnavailable, err)
	full("fixture gate", fixture.ErrUnavailable, st.Fixtures.ArmGate(ctx, "k-full", fixture.GateMode(1)))

	require.Equal(t, before, dbsize(), "a refused write applies nothing")
}
