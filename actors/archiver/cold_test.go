package archiver_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/archiver"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// The cold tier answers for archived orders of each kind: History is
// the archive's events, the ones the hot stream held; Rebuild replays
// them to the final state the sealed record keeps and writes nothing
// when they agree, rewrites only the kept state when they do not, and
// touches no other key. A hot order is not the cold tier's. With
// PostgreSQL down, both fail as a store outage (kind StoreUnavailable),
// and the compact record is untouched.
func TestTheColdTierAnswersForArchivedOrders(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	events := e.stores.Events.(*eventstore.Redis)
	cold, err := archiver.NewCold(events, e.archive)
	require.NoError(t, err)

	var ids []string
	for _, k := range kinds {
		id := e.finish(t, "cold-"+k.name, k.lines, k.method, k.want)
		hot, err := events.Load(ctx, id)
		require.NoError(t, err)

		_, _, err = cold.Rebuild(ctx, id)
		require.ErrorIs(t, err, archiver.ErrNotArchived, "%s: a hot order is its grain's", k.name)

		out, err := e.archiver(t).Archive(ctx, id)
		require.NoError(t, err)
		require.Equal(t, archiver.Archived, out)
		ids = append(ids, id)

		rec, got, err := cold.History(ctx, id)
		require.NoError(t, err)
		require.Equal(t, hot, got, "%s: the archive's events are the hot stream's", k.name)
		require.EqualValues(t, len(hot), rec.Version)

		fence := e.fence(t, id)
		keys := e.keysOf(t, id)
		st, rewrote, err := cold.Rebuild(ctx, id)
		require.NoError(t, err)
		require.False(t, rewrote, "%s: the replay agrees with the kept state", k.name)
		require.Equal(t, k.want, st.GetStatus())
		require.Equal(t, fence, e.fence(t, id), "%s: nothing written", k.name)
		require.Equal(t, keys, e.keysOf(t, id))

		// A kept state that went wrong is rewritten from the events, and
		// nothing else returns to Redis.
		wrong, err := readmodel.EncodeState(&contracts.OrderState{OrderId: id, Status: contracts.OrderStatus_Created})
		require.NoError(t, err)
		require.NoError(t, e.rdb.HSet(ctx, "sm:es:{"+id+"}:fence", "readmodel.state", wrong).Err())
		st, rewrote, err = cold.Rebuild(ctx, id)
		require.NoError(t, err)
		require.True(t, rewrote, k.name)
		want, err := workflow.Replay(id, hot)
		require.NoError(t, err)
		require.True(t, proto.Equal(want, st))
		got2, _, err := e.stores.ReadModel.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, proto.Equal(want, got2), "%s: the read model answers the rebuilt state", k.name)
		require.Equal(t, fence, e.fence(t, id), "%s: the kept state is the compaction's again", k.name)
		require.Equal(t, keys, e.keysOf(t, id), "%s: no hot key came back", k.name)
	}

	require.NoError(t, e.pg.Kill())
	for _, id := range ids {
		fence := e.fence(t, id)
		_, _, err := cold.History(ctx, id)
		require.ErrorIs(t, err, archive.ErrUnavailable)
		require.Equal(t, errkind.StoreUnavailable, errkind.Of(err))
		_, _, err = cold.Rebuild(ctx, id)
		require.ErrorIs(t, err, archive.ErrUnavailable)
		require.Equal(t, errkind.StoreUnavailable, errkind.Of(err))
		require.Equal(t, fence, e.fence(t, id))
		st, _, err := e.stores.ReadModel.Get(ctx, id)
		require.NoError(t, err, "the compact record answers without the archive")
		require.NotNil(t, st)
	}
}

// fence is the order's sealed record as Redis holds it.
func (e *env) fence(t *testing.T, id string) map[string]string {
	t.Helper()
	m, err := e.rdb.HGetAll(t.Context(), "sm:es:{"+id+"}:fence").Result()
	require.NoError(t, err)
	return m
}
