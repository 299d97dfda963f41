package readmodel_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func newProjected(t *testing.T, c redis.UniversalClient, esPrefix, rmPrefix string) readmodeltest.Projected {
	t.Helper()
	es, err := eventstore.NewRedis(eventstore.Config{Client: c, KeyPrefix: esPrefix})
	require.NoError(t, err)
	rm := newRedis(t, readmodel.Config{Client: c, KeyPrefix: rmPrefix})
	pa, err := readmodel.NewRedisCommitter(readmodel.RedisCommitterConfig{Events: es, ReadModel: rm})
	require.NoError(t, err)
	return readmodeltest.Projected{Append: pa, Events: es, ReadModel: rm}
}

// The Committer contract on a real redis-server, each subtest
// under key prefixes of its own.
func TestRedisProjectedAppendContract(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	readmodeltest.RunProjectedAppendContract(t, func(t *testing.T) readmodeltest.Projected {
		i := n.Add(1)
		return newProjected(t, c, fmt.Sprintf("t%d:es:", i), fmt.Sprintf("t%d:rm:", i))
	})
}

func TestNewProjectedAppendNeedsBothStores(t *testing.T) {
	_, c := setup(t)
	es, err := eventstore.NewRedis(eventstore.Config{Client: c})
	require.NoError(t, err)
	for name, cfg := range map[string]readmodel.RedisCommitterConfig{
		"no events":     {ReadModel: newRedis(t, readmodel.Config{Client: c})},
		"no read model": {Events: es},
	} {
		p, err := readmodel.NewRedisCommitter(cfg)
		require.ErrorIs(t, err, readmodel.ErrConfig, name)
		require.Nil(t, p, name)
	}
}

// The projected append keeps the active-order index: the Created
// projection is indexed, the steps in between leave the entry as it is
// (the report reads the record itself), a terminal one drops it.
func TestProjectedAppendKeepsTheActiveIndex(t *testing.T) {
	_, c := setup(t)
	p := newProjected(t, c, "", "")
	idx, ok := p.ReadModel.(readmodel.ActiveIndex)
	require.True(t, ok, "the Redis read model keeps the active index")
	ctx := ctxT(t)

	env := func(id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, OrderID: "o-ix", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	fence, _, err := p.Events.Open(ctx, "o-ix", 1)
	require.NoError(t, err)
	at := time.UnixMilli(1_700_000_000_000)
	_, err = readmodeltest.Commit(ctx, p.Append, "o-ix", 0, fence, env("e1"),
		&contracts.OrderState{OrderId: "o-ix", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: at.Add(-time.Second).UnixMilli()})
	require.NoError(t, err)
	require.True(t, indexed(t, c, "o-ix"), "the Created projection is indexed")
	_, err = readmodeltest.Commit(ctx, p.Append, "o-ix", 1, fence, env("e1b"),
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

	_, err = readmodeltest.Commit(ctx, p.Append, "o-ix", 2, fence, env("e2"),
		&contracts.OrderState{OrderId: "o-ix", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: at.Add(time.Second).UnixMilli()})
	require.NoError(t, err)
	stuck, err = idx.Stuck(ctx, time.Minute, at.Add(2*time.Minute), 0)
	require.NoError(t, err)
	require.Empty(t, stuck)
	require.False(t, indexed(t, c, "o-ix"), "a terminal order leaves the index")
}

// On one server the index entry rides in the append's own script: the
// Created and the terminal projected appends are one round trip each, and
// an append refused by a check touches the index no more than the record.
func TestProjectedAppendIndexesInTheSameRoundTripOnOneServer(t *testing.T) {
	_, c := setup(t)
	hook := &redistest.RoundTrips{}
	c.AddHook(hook)
	p := newProjected(t, c, "", "")
	ctx := ctxT(t)
	env := func(id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, OrderID: "o-rt", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	fence, _, err := p.Events.Open(ctx, "o-rt", 1)
	require.NoError(t, err)
	// The script is loaded: from here each append is one EVALSHA.
	_, err = readmodeltest.Commit(ctx, p.Append, "o-rt", 0, fence, env("e1"), &contracts.OrderState{OrderId: "o-rt", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 5})
	require.NoError(t, err)
	require.True(t, indexed(t, c, "o-rt"))

	_, err = readmodeltest.Commit(ctx, p.Append, "o-rt", 0, fence, env("e1x"), &contracts.OrderState{OrderId: "o-rt", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 6})
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	require.True(t, indexed(t, c, "o-rt"), "a refused terminal append leaves the index entry")

	before := hook.Count()
	_, err = readmodeltest.Commit(ctx, p.Append, "o-rt", 1, fence, env("e2"), &contracts.OrderState{OrderId: "o-rt", Status: contracts.OrderStatus_Failed, UpdatedAtUnixMs: 7})
	require.NoError(t, err)
	require.EqualValues(t, 1, hook.Count()-before, "the terminal append, its projection and the index update are one round trip")
	require.False(t, indexed(t, c, "o-rt"), "a terminal order leaves the index")
}
