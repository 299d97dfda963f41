package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
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
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{Fixtures: true})
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
	_, err = readmodeltest.Commit(ctx, st.Commits, "o-full", 0, fence,
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
	_, _, _, err = st.Locations.BeginCreate(ctx, "order", "o-full", "token", time.Minute)
	full("location creation lock", location.ErrStoreUnavailable, err)
	full("fixture gate", fixture.ErrUnavailable, st.Fixtures.ArmGate(ctx, "k-full", fixture.GateMode(1)))

	require.Equal(t, before, dbsize(), "a refused write applies nothing")
}

// Every script the stores load opens with a "#!lua" shebang without
// allow-oom, so a full Redis refuses it before it runs, even one whose
// first write frees memory (DEL, HDEL): in the compatibility mode of a
// script without a shebang Redis checks the limit only at the first
// deny-oom command, so such a script ran on past the limit. The refusal
// applies nothing and reads as STORE_FULL; a plain read still answers.
func TestWriteScriptsAreRefusedWholeWhenRedisIsFull(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer st.Close()
	admin := srv.Client()
	defer admin.Close()

	acquired, _, _, err := st.Locations.BeginCreate(ctx, "order", "o-full", "token", time.Minute)
	require.NoError(t, err)
	require.True(t, acquired)
	snapshot := func() map[string]string {
		keys, err := admin.Keys(ctx, "*").Result()
		require.NoError(t, err)
		out := map[string]string{}
		for _, k := range keys {
			v, err := admin.Dump(ctx, k).Result()
			require.NoError(t, err)
			out[k] = v
		}
		return out
	}
	before := snapshot()

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
	defer admin.ConfigSet(context.Background(), "maxmemory", "0")

	// abortCreate's first write is a DEL, which never counts as deny-oom.
	err = st.Locations.AbortCreate(ctx, "order", "o-full", "token")
	require.Error(t, err, "a write script runs under a full Redis")
	require.ErrorIs(t, err, errkind.StoreFull, "%v", err)
	require.ErrorIs(t, err, location.ErrStoreUnavailable, "%v", err)
	_, _, err = st.Probe.ProbeSelf(ctx, "m-full", 0)
	require.NoError(t, err, "the self-fence read without a heartbeat is a read, and answers under a full Redis")

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Equal(t, before, snapshot(), "the refused script applied nothing")
}
