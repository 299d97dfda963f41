package eventstore_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// A sealed order takes no writer at all: not its owner, not a newer
// generation, not a unit; RaiseFence leaves the last fence as it was, and
// sealing again keeps the first seal.
func TestSealRefusesEveryWriter(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	const o = "sealed-1"
	ev := func(id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, EventType: "T", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}

	_, err := s.Seal(ctx, o, 100)
	require.ErrorIs(t, err, eventstore.ErrNoStream, "nothing to seal")
	require.Zero(t, c.Exists(ctx, "sm:es:{"+o+"}:fence").Val(), "a refused seal writes nothing")

	f, _, err := s.Open(ctx, o, 3)
	require.NoError(t, err)
	_, err = s.Append(ctx, o, 0, f, ev("e1"))
	require.NoError(t, err)

	sealed, err := s.Seal(ctx, o, 100)
	require.NoError(t, err)
	require.Equal(t, f, sealed, "the seal keeps the owner's fence")
	again, err := s.Seal(ctx, o, 200)
	require.NoError(t, err)
	require.Equal(t, f, again)

	_, err = s.Append(ctx, o, 1, f, ev("e2"))
	require.ErrorIs(t, err, eventstore.ErrSealed, "the owner")
	require.ErrorIs(t, err, eventstore.ErrFenced, "a sealed order fences its writers")
	_, _, err = s.Open(ctx, o, 9)
	require.ErrorIs(t, err, eventstore.ErrSealed, "a newer generation")
	var fe *eventstore.FencedOpenError
	require.False(t, errors.As(err, &fe), "no stored generation for an activation to move above")
	_, err = commitProjected(ctx, s, o, 1, f, ev("e3"), eventstore.Projection{Key: "rm:{" + o + "}", VersionField: "v", StateField: "s", Version: 2, State: []byte("x")})
	require.ErrorIs(t, err, eventstore.ErrSealed, "a unit")
	require.Zero(t, c.Exists(ctx, "rm:{"+o+"}").Val(), "a refused unit writes nothing")
	raised, err := s.RaiseFence(ctx, o, 50)
	require.NoError(t, err)
	require.Equal(t, f, raised, "the fence keeps the last generation")

	evs, err := s.Load(ctx, o)
	require.NoError(t, err)
	require.Len(t, evs, 1, "sealing appends nothing")
	rec, err := s.Sealed(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.SealedRecord{Fence: f, SealedAtUnixMs: 100}, rec)
	require.False(t, rec.Compacted())
}

// Compact removes the stream and the keys other stores add, after copying
// the fields they keep into the sealed record, in one script; only on a
// sealed order, once, and only keys in the order's slot.
func TestCompactKeepsTheSealedRecordAlone(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	const o = "compact-1"
	f, _, err := s.Open(ctx, o, 2)
	require.NoError(t, err)
	evs := []eventstore.Envelope{
		{EventID: "e1", EventType: "T", SourceCommandID: "c1", CreatedAtUnixMs: 1, Data: []byte("{}")},
		{EventID: "e2", EventType: "T", SourceCommandID: "c2", CreatedAtUnixMs: 2, Data: []byte("{}")},
	}
	_, err = commitProjected(ctx, s, o, 0, f, evs, eventstore.Projection{Key: "rm:{" + o + "}", VersionField: "v", StateField: "s", Version: 2, State: []byte("final")})
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "other:{"+o+"}", "x", 0).Err())
	require.NoError(t, s.Barrier(ctx, o))

	compaction := func() *eventstore.Compaction {
		cp := eventstore.NewCompaction(o, 300)
		cp.Keep("rm:{"+o+"}", "s", "rm.state")
		cp.Keep("rm:{"+o+"}", "missing", "rm.none")
		cp.Delete("rm:{" + o + "}")
		cp.Delete("other:{" + o + "}")
		return cp
	}
	_, err = s.Compact(ctx, compaction())
	require.ErrorIs(t, err, eventstore.ErrNotSealed)
	require.EqualValues(t, 2, c.Exists(ctx, "rm:{"+o+"}", "sm:es:{"+o+"}:stream").Val(), "nothing written before the seal")

	bad := eventstore.NewCompaction(o, 300)
	bad.Delete("elsewhere")
	_, err = s.Compact(ctx, bad)
	require.ErrorIs(t, err, eventstore.ErrConfig, "a key in another slot")
	bad = eventstore.NewCompaction(o, 300)
	bad.Keep("rm:{"+o+"}", "s", "gen")
	_, err = s.Compact(ctx, bad)
	require.ErrorIs(t, err, eventstore.ErrConfig, "a kept name that could be this store's own")

	_, err = s.Seal(ctx, o, 250)
	require.NoError(t, err)
	out, err := s.Compact(ctx, compaction())
	require.NoError(t, err)
	require.Equal(t, eventstore.CompactOutcome{Version: 2}, out)

	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"sm:es:{" + o + "}:fence"}, keys, "the sealed record is the one key left")
	rec, err := s.Sealed(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.SealedRecord{Fence: f, SealedAtUnixMs: 250, ArchivedAtUnixMs: 300, Version: 2,
		Kept: map[string]string{"rm.state": "final"}}, rec)
	require.True(t, rec.Compacted())

	out, err = s.Compact(ctx, compaction())
	require.NoError(t, err)
	require.Equal(t, eventstore.CompactOutcome{Version: 2, Already: true}, out, "a second compaction writes nothing")
	_, _, err = s.Open(ctx, o, 3)
	require.ErrorIs(t, err, eventstore.ErrSealed, "a compacted order takes no writer either")
	require.EqualValues(t, 1, c.DBSize(ctx).Val(), "and the refusal writes nothing")
}

// Presence tells an order without events, a hot one (sealed or not) and
// an archived one apart in one read, with the archived one's sealed
// record; RewriteKept rewrites a kept field of a compacted order only,
// and only when it differs.
func TestPresenceAndTheKeptFieldsOfACompactedOrder(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	const o = "presence-1"

	p, err := s.Presence(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.Presence{Tier: eventstore.TierNone}, p)
	f, _, err := s.Open(ctx, o, 2)
	require.NoError(t, err)
	p, err = s.Presence(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.TierNone, p.Tier, "a fence without an event is no stream")
	_, err = commitProjected(ctx, s, o, 0, f, []eventstore.Envelope{{EventID: "e1", EventType: "T", CreatedAtUnixMs: 1, Data: []byte("{}")}},
		eventstore.Projection{Key: "rm:{" + o + "}", VersionField: "v", StateField: "s", Version: 1, State: []byte("final")})
	require.NoError(t, err)
	p, err = s.Presence(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.Presence{Tier: eventstore.TierHot}, p)

	_, err = s.RewriteKept(ctx, o, "rm.state", []byte("x"))
	require.ErrorIs(t, err, eventstore.ErrNotSealed, "a hot order's keys are its stores'")
	_, err = s.Seal(ctx, o, 10)
	require.NoError(t, err)
	p, err = s.Presence(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.TierHot, p.Tier, "sealed, still hot")
	_, err = s.RewriteKept(ctx, o, "rm.state", []byte("x"))
	require.ErrorIs(t, err, eventstore.ErrNotSealed, "sealed is not compacted")

	cp := eventstore.NewCompaction(o, 20)
	cp.Keep("rm:{"+o+"}", "s", "rm.state")
	cp.Delete("rm:{" + o + "}")
	_, err = s.Compact(ctx, cp)
	require.NoError(t, err)
	p, err = s.Presence(ctx, o)
	require.NoError(t, err)
	require.Equal(t, eventstore.Presence{Tier: eventstore.TierArchived, Sealed: eventstore.SealedRecord{
		Fence: f, SealedAtUnixMs: 10, ArchivedAtUnixMs: 20, Version: 1, Kept: map[string]string{"rm.state": "final"}}}, p)

	wrote, err := s.RewriteKept(ctx, o, "rm.state", []byte("final"))
	require.NoError(t, err)
	require.False(t, wrote, "the same value is no write")
	_, err = s.RewriteKept(ctx, o, "gen", []byte("1"))
	require.ErrorIs(t, err, eventstore.ErrConfig, "this store's own fields are not kept fields")
	wrote, err = s.RewriteKept(ctx, o, "rm.state", []byte("again"))
	require.NoError(t, err)
	require.True(t, wrote)
	rec, err := s.Sealed(ctx, o)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"rm.state": "again"}, rec.Kept)
	require.Equal(t, f, rec.Fence, "the generation stays what the order was sealed at")
	require.EqualValues(t, 1, c.DBSize(ctx).Val(), "the sealed record is still the one key")
}
