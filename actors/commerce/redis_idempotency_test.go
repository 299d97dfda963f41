package commerce_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// oldMapping writes key's mapping as the layout before the order's tag
// did: P idem:{<key>}, without the key field.
func oldMapping(t *testing.T, c *redis.Client, key string, m commerce.Mapping) {
	t.Helper()
	require.NoError(t, c.HSet(t.Context(), "sm:cs:idem:{"+key+"}", "orderId", m.OrderID, "status", string(m.Status), "fingerprint", m.Fingerprint).Err())
}

// A key mapped in the old layout keeps its mapping: every way of
// reserving it (one script on a single server, the old key read first
// elsewhere, with its cart in one script) gets the old mapping and writes
// no new one; MarkStarted and Get reach it; an old mapping may name an
// OrderId minted before OrderIds were derived. A new key costs the
// single-server reservation no round trip more.
func TestMappingsOfTheOldLayoutStillCount(t *testing.T) {
	c, cmds := countedClient(t)
	ctx := t.Context()
	require.NoError(t, c.Ping(ctx).Err())
	one := newRedis(t, commerce.Config{Client: c})
	stepped := newRedis(t, commerce.Config{Client: c})
	commerce.UseSteppedPaths(stepped)
	require.NoError(t, one.Carts().PutCart(ctx, cartFor("c-1")))

	old := commerce.Mapping{OrderID: "o-minted-long-ago", Status: commerce.MappingPending, Fingerprint: "fp"}
	oldMapping(t, c, "k-old", old)
	derived := commerce.Mapping{OrderID: "ord-k-old", Fingerprint: "fp"}
	newKeys := func() int64 { return c.Exists(ctx, "sm:cs:idem:order:{ord-k-old}").Val() }

	for name, reserve := range map[string]func() (commerce.Mapping, bool, error){
		"one script": func() (commerce.Mapping, bool, error) { return one.Idempotency().Reserve(ctx, "k-old", derived) },
		"stepped":    func() (commerce.Mapping, bool, error) { return stepped.Idempotency().Reserve(ctx, "k-old", derived) },
		"with its cart": func() (commerce.Mapping, bool, error) {
			r, err := one.ReserveForCart(ctx, "c-1", "k-old", derived)
			return r.Mapping, r.Created, err
		},
	} {
		m, created, err := reserve()
		require.NoError(t, err, name)
		require.False(t, created, name)
		require.Equal(t, old, m, "%s: the old mapping is in force", name)
		require.Zero(t, newKeys(), "%s: and nothing is written in the new layout", name)
	}
	got, err := one.Idempotency().Get(ctx, "k-old", "ord-k-old")
	require.NoError(t, err)
	require.Equal(t, old, got)

	require.NoError(t, one.Idempotency().MarkStarted(ctx, "k-old", old.OrderID), "the old mapping is marked")
	got, err = stepped.Idempotency().Get(ctx, "k-old", "ord-k-old")
	require.NoError(t, err)
	require.Equal(t, commerce.MappingStarted, got.Status)
	require.ErrorIs(t, one.Idempotency().MarkStarted(ctx, "k-old", "ord-another"), commerce.ErrNotFound)

	// A new key: the single-server reservation is still one round trip.
	before := cmds.Load()
	_, created, err := one.Idempotency().Reserve(ctx, "k-new", commerce.Mapping{OrderID: "ord-k-new", Fingerprint: "fp"})
	require.NoError(t, err)
	require.True(t, created)
	require.EqualValues(t, 1, cmds.Load()-before, "one round trip")
	require.Equal(t, map[string]string{"key": "k-new", "orderId": "ord-k-new", "status": "pending", "fingerprint": "fp"},
		c.HGetAll(ctx, "sm:cs:idem:order:{ord-k-new}").Val(), "filed under the order, with its key")
}

// With SkipLegacyIdempotency the old layout is not read: its key is
// reserved anew, under the derived OrderId, in one round trip on any
// path.
func TestSkipLegacyIdempotencyReadsOnlyTheNewLayout(t *testing.T) {
	c, cmds := countedClient(t)
	ctx := t.Context()
	require.NoError(t, c.Ping(ctx).Err())
	stepped := newRedis(t, commerce.Config{Client: c, SkipLegacyIdempotency: true})
	commerce.UseSteppedPaths(stepped)
	oldMapping(t, c, "k-old", commerce.Mapping{OrderID: "o-minted-long-ago", Status: commerce.MappingStarted, Fingerprint: "fp"})

	before := cmds.Load()
	m, created, err := stepped.Idempotency().Reserve(ctx, "k-old", commerce.Mapping{OrderID: "ord-k-old", Fingerprint: "fp2"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, commerce.Mapping{OrderID: "ord-k-old", Status: commerce.MappingPending, Fingerprint: "fp2"}, m)
	require.EqualValues(t, 1, cmds.Load()-before, "one round trip, no read of the old key")

	withLegacy := newRedis(t, commerce.Config{Client: c})
	commerce.UseSteppedPaths(withLegacy)
	before = cmds.Load()
	_, _, err = withLegacy.Idempotency().Reserve(ctx, "k-other", commerce.Mapping{OrderID: "ord-k-other", Fingerprint: "fp"})
	require.NoError(t, err)
	require.EqualValues(t, 2, cmds.Load()-before, "reading the old layout first costs a stepped reservation a round trip")
}

// The started mark rides in an order's unit of work (eventstore.Unit):
// committed with the start, it turns the key's pending mapping of that
// order started, and reports not written for a mapping of another order
// (MarkStarted's ErrNotFound), which it leaves as it is.
func TestAddStartedMarkRidesInTheOrdersUnit(t *testing.T) {
	store, raw := newStore(t)
	ctx := t.Context()
	es, err := eventstore.NewRedis(eventstore.Config{Client: raw})
	require.NoError(t, err)
	idem := store.Idempotency()
	for _, m := range []struct{ key, order string }{{"k-mine", "o-mine"}, {"k-other", "o-other"}} {
		_, won, err := idem.Reserve(ctx, m.key, commerce.Mapping{OrderID: m.order, Fingerprint: "fp"})
		require.NoError(t, err)
		require.True(t, won)
	}
	commit := func(orderID, key string) (bool, error) {
		f, _, err := es.Open(ctx, orderID, 1)
		require.NoError(t, err)
		u := eventstore.NewUnit(orderID, 0, f, []eventstore.Envelope{{EventID: orderID + "-e1", OrderID: orderID, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}})
		u.Project(eventstore.Projection{Key: "rm:{" + orderID + "}", VersionField: "v", StateField: "s", State: []byte("s")})
		at, err := store.AddStartedMark(u, key)
		if err != nil {
			return false, err
		}
		out, err := es.Commit(ctx, u)
		require.NoError(t, err)
		return out.Wrote(at), nil
	}

	wrote, err := commit("o-mine", "k-mine")
	require.NoError(t, err)
	require.True(t, wrote)
	m, err := idem.Get(ctx, "k-mine", "o-mine")
	require.NoError(t, err)
	require.Equal(t, commerce.MappingStarted, m.Status)

	// o-stray has no mapping of its own under its tag.
	wrote, err = commit("o-stray", "k-other")
	require.NoError(t, err)
	require.False(t, wrote)
	m, err = idem.Get(ctx, "k-other", "o-other")
	require.NoError(t, err)
	require.Equal(t, commerce.MappingPending, m.Status)

	_, err = store.AddStartedMark(eventstore.NewUnit("o-x", 0, eventstore.Fence{}, nil), "")
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
}
