package readmodel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// With IndexFinished the terminal step moves the order from the active
// index to the finished one, scored by its terminal time, in the step's
// own round trip on one server; Put does the same for a record written
// outside the commit path; Finished lists the orders past a time, oldest
// first; ForgetFinished drops one. Without it, nothing is indexed.
func TestTheTerminalStepIndexesTheFinishedOrder(t *testing.T) {
	_, c := setup(t)
	hook := &redistest.RoundTrips{}
	c.AddHook(hook)
	es, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	rm := newRedis(t, readmodel.Config{Client: c, IndexFinished: true})
	commit, err := readmodel.NewRedisCommitter(readmodel.RedisCommitterConfig{Events: es, ReadModel: rm})
	require.NoError(t, err)
	ctx := ctxT(t)
	env := func(o, id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, OrderID: o, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	at := time.UnixMilli(1_700_000_000_000)
	for i, o := range []string{"o-late", "o-early", "o-open"} {
		f, _, err := es.Open(ctx, o, 1)
		require.NoError(t, err)
		_, err = readmodeltest.Commit(ctx, commit, o, 0, f, env(o, "e1"), &contracts.OrderState{OrderId: o, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: at.UnixMilli()})
		require.NoError(t, err)
		if o == "o-open" {
			continue
		}
		before := hook.Count()
		_, err = readmodeltest.Commit(ctx, commit, o, 1, f, env(o, "e2"), &contracts.OrderState{OrderId: o, Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: at.Add(time.Duration(10-i) * time.Second).UnixMilli()})
		require.NoError(t, err)
		require.EqualValues(t, 1, hook.Count()-before, "the terminal step with both index writes is one round trip")
		require.False(t, indexed(t, c, o), "a terminal order leaves the active index")
	}
	fin, err := rm.Finished(ctx, at.Add(time.Minute), 0)
	require.NoError(t, err)
	require.Equal(t, []readmodel.FinishedOrder{
		{OrderID: "o-early", TerminalAtUnixMs: at.Add(9 * time.Second).UnixMilli()},
		{OrderID: "o-late", TerminalAtUnixMs: at.Add(10 * time.Second).UnixMilli()},
	}, fin)
	fin, err = rm.Finished(ctx, at.Add(9*time.Second), 0)
	require.NoError(t, err)
	require.Len(t, fin, 1, "only the orders ended by then")
	fin, err = rm.Finished(ctx, at.Add(time.Minute), 1)
	require.NoError(t, err)
	require.Equal(t, "o-early", fin[0].OrderID, "the limit keeps the oldest")

	_, err = rm.Put(ctx, "o-put", 3, &contracts.OrderState{OrderId: "o-put", Status: contracts.OrderStatus_Failed, UpdatedAtUnixMs: at.UnixMilli()})
	require.NoError(t, err)
	require.NoError(t, rm.ForgetFinished(ctx, "o-early"))
	require.NoError(t, rm.ForgetFinished(ctx, "o-early"), "forgetting twice")
	fin, err = rm.Finished(ctx, at.Add(time.Minute), 0)
	require.NoError(t, err)
	require.Equal(t, []string{"o-put", "o-late"}, ids(fin))

	plain := newRedis(t, readmodel.Config{Client: c, KeyPrefix: "plain:"})
	_, err = plain.Put(ctx, "o-plain", 1, &contracts.OrderState{OrderId: "o-plain", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: at.UnixMilli()})
	require.NoError(t, err)
	keys, err := c.Keys(ctx, "plain:finished:*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "no finished index unless asked for")
}

// The record leaves with the order's compaction, its version and state
// kept in the sealed record.
func TestTheRecordLeavesWithTheCompaction(t *testing.T) {
	_, c := setup(t)
	es, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	rm := newRedis(t, readmodel.Config{Client: c})
	commit, err := readmodel.NewRedisCommitter(readmodel.RedisCommitterConfig{Events: es, ReadModel: rm})
	require.NoError(t, err)
	ctx := ctxT(t)
	const o = "o-cp"
	f, _, err := es.Open(ctx, o, 1)
	require.NoError(t, err)
	final := &contracts.OrderState{OrderId: o, Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 9}
	_, err = readmodeltest.Commit(ctx, commit, o, 0, f, []eventstore.Envelope{{EventID: "e1", OrderID: o, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}, final)
	require.NoError(t, err)
	_, err = es.Seal(ctx, o, 10)
	require.NoError(t, err)
	cp := eventstore.NewCompaction(o, 11)
	require.NoError(t, rm.AddCompaction(cp))
	_, err = es.Compact(ctx, cp)
	require.NoError(t, err)

	_, _, err = rm.Get(ctx, o)
	require.ErrorIs(t, err, readmodel.ErrNotFound, "the record is gone")
	withSealed := newRedis(t, readmodel.Config{Client: c, Sealed: es})
	got, version, err := withSealed.Get(ctx, o)
	require.NoError(t, err, "the final state answers from the sealed record")
	require.True(t, proto.Equal(final, got), "got %v", got)
	require.EqualValues(t, 1, version)
	_, _, err = withSealed.Get(ctx, "o-never")
	require.ErrorIs(t, err, readmodel.ErrNotFound, "an order that never existed")
	rec, err := es.Sealed(ctx, o)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Kept["readmodel.state"])
	require.ErrorIs(t, rm.AddCompaction(eventstore.NewCompaction("bad{id}", 1)), readmodel.ErrInvalidOrderID)
}

func ids(fin []readmodel.FinishedOrder) []string {
	out := make([]string, len(fin))
	for i, f := range fin {
		out[i] = f.OrderID
	}
	return out
}

// A shard's lease is one owner's at a time: its owner renews it, another
// is refused until the owner gives it back or its ttl ends; a stranger's
// give-back changes nothing.
func TestAFinishedShardIsLeasedToOneArchiverAtATime(t *testing.T) {
	_, c := setup(t)
	rm := newRedis(t, readmodel.Config{Client: c, IndexFinished: true})
	ctx := ctxT(t)
	held, err := rm.LeaseFinished(ctx, 3, "a", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	held, err = rm.LeaseFinished(ctx, 3, "a", time.Minute)
	require.NoError(t, err)
	require.True(t, held, "its owner renews it")
	held, err = rm.LeaseFinished(ctx, 3, "b", time.Minute)
	require.NoError(t, err)
	require.False(t, held, "another is refused")
	held, err = rm.LeaseFinished(ctx, 4, "b", time.Minute)
	require.NoError(t, err)
	require.True(t, held, "each shard has a lease of its own")
	require.NoError(t, rm.UnleaseFinished(ctx, 3, "b"))
	held, err = rm.LeaseFinished(ctx, 3, "b", time.Minute)
	require.NoError(t, err)
	require.False(t, held, "a stranger's give-back changes nothing")
	require.NoError(t, rm.UnleaseFinished(ctx, 3, "a"))
	held, err = rm.LeaseFinished(ctx, 3, "b", 50*time.Millisecond)
	require.NoError(t, err)
	require.True(t, held, "given back, it is free")
	require.Eventually(t, func() bool {
		held, err := rm.LeaseFinished(ctx, 3, "a", time.Minute)
		require.NoError(t, err)
		return held
	}, 5*time.Second, 10*time.Millisecond, "a lease whose owner is gone ends with its ttl")
	_, err = rm.LeaseFinished(ctx, readmodel.ActiveShards, "a", time.Minute)
	require.Error(t, err, "no such shard")
}
