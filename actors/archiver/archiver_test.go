package archiver_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/archiver"
	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/pgserver"
	"github.com/shoppingmall-go/shoppingmall/runner/pgserver/pgtest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// kind is the order grains' kind, under which the node's stores mark a
// sealed order for the Location Store (node.NewStores).
const kind = grain.KindName

var errCrash = errors.New("archiver crashed here")

// env is one real redis-server and one real PostgreSQL, the stores over
// them as a workflow member wires them, and a workflow that drives
// orders to their end.
type env struct {
	rdb     redis.UniversalClient
	stores  *node.Stores
	pg      *pgserver.Server
	archive *archive.Postgres
	wf      *workflow.Service
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return setupOn(t, srv.URL(), c)
}

// setupOn is setup over the Redis at url, which rdb reads.
func setupOn(t *testing.T, url string, rdb redis.UniversalClient) *env {
	t.Helper()
	ctx := t.Context()
	pg := pgtest.Start(t)
	st, err := node.OpenStores(ctx, node.RedisURLs{Default: url}, node.StoreOptions{IndexFinished: true})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	arch, err := archive.Open(ctx, archive.Config{URL: pg.URL()})
	require.NoError(t, err)
	t.Cleanup(arch.Close)
	wf, err := workflow.New(workflow.Config{
		Kind: kind, Events: st.Events, ReadModel: st.ReadModel, Idempotency: st.Commerce.Idempotency(),
		Inventory: st.Commerce.Inventory(), Payment: st.Commerce.Payment(), Envelopes: node.Envelopes{Store: st.Relocation},
		Commits: st.Commits, Now: func() int64 { return 1_000 },
	})
	require.NoError(t, err)
	require.NoError(t, st.Commerce.Inventory().SetStock(ctx, "SKU-1", 1_000))
	require.NoError(t, st.Commerce.Inventory().SetStock(ctx, "SKU-2", 1_000))
	require.NoError(t, st.Commerce.Payment().PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	require.NoError(t, st.Commerce.Payment().PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Reason: "card declined"}))
	return &env{rdb: rdb, stores: st, pg: pg, archive: arch, wf: wf}
}

func (e *env) archiver(t *testing.T) *archiver.Archiver {
	t.Helper()
	return e.archiverWith(t, func(*archiver.Config) {})
}

// archiverWith is an archiver over e's stores, named by a fresh owner,
// with edit's changes to its Config.
func (e *env) archiverWith(t *testing.T, edit func(*archiver.Config)) *archiver.Archiver {
	t.Helper()
	owner++
	cfg := archiver.Config{
		Events: e.stores.Events.(*eventstore.Redis), Records: e.stores.ReadModel.(*readmodel.Redis),
		Modules: e.stores.Commerce, Locations: e.stores.Locations, Relocations: e.stores.Relocation.(*relocation.Redis),
		Archive: e.archive, Kind: kind, Retention: time.Hour, Owner: fmt.Sprintf("member-%d", owner),
	}
	edit(&cfg)
	a, err := archiver.New(cfg)
	require.NoError(t, err)
	return a
}

var owner int

// kinds are the three ends of an order: confirmed, failed for stock,
// failed for payment.
var kinds = []struct {
	name     string
	lines    []*contracts.OrderLine
	method   string
	want     contracts.OrderStatus
	reserved bool
}{
	{"confirmed", []*contracts.OrderLine{{Sku: "SKU-1", Quantity: 1}, {Sku: "SKU-2", Quantity: 2}}, "pm-ok", contracts.OrderStatus_Confirmed, true},
	{"no-stock", []*contracts.OrderLine{{Sku: "SKU-1", Quantity: 1}, {Sku: "SKU-2", Quantity: 5_000}}, "pm-ok", contracts.OrderStatus_Failed, false},
	{"declined", []*contracts.OrderLine{{Sku: "SKU-1", Quantity: 1}}, "pm-no", contracts.OrderStatus_Failed, true},
}

// finish starts an order as the API and its grain do (the mapping
// reserved, the Location record Ready at a member) and steps it to its
// end.
func (e *env) finish(t *testing.T, key string, lines []*contracts.OrderLine, method string, want contracts.OrderStatus) string {
	t.Helper()
	ctx := t.Context()
	id := order.OrderIDFor([]byte("test-secret"), key)
	_, won, err := e.stores.Commerce.Idempotency().Reserve(ctx, key, commerce.Mapping{OrderID: id, Status: commerce.MappingPending, Fingerprint: commerce.Fingerprint("cart", "addr", method)})
	require.NoError(t, err)
	require.True(t, won)
	ok, next, _, err := e.stores.Locations.BeginCreate(ctx, kind, id, "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, e.stores.Locations.CommitReady(ctx, kind, id, "tok", location.Record{Owner: "member-1", PIDAddress: "a", PIDID: "p-" + id, Generation: next}))
	o, err := e.wf.OpenFresh(id, next)
	require.NoError(t, err)
	_, _, err = e.wf.Start(ctx, o, &contracts.StartOrderWorkflowReq{
		OrderId: id, CartId: "cart", ShippingAddressId: "addr", PaymentMethodId: method,
		IdempotencyKey: key, SourceCommandId: order.StartSourceCommandID(key), Lines: lines, Amount: 100, Currency: "EUR",
	})
	require.NoError(t, err)
	for {
		progressed, err := e.wf.Step(ctx, o)
		require.NoError(t, err)
		if !progressed {
			break
		}
	}
	require.Equal(t, want, e.wf.View(o).GetStatus(), key)
	// Its grain passivates, releasing the record, as an idle owner does:
	// the archiver takes no order a grain still hosts.
	released, err := e.stores.Locations.ReleaseAt(ctx, kind, id, "member-1", "p-"+id, location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	return id
}

// keysOf lists every Redis key that holds a part of the order: its own
// (its hash tag), its reservation's and payment's, its holds.
func (e *env) keysOf(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	keys := func(ctx context.Context, c redis.UniversalClient) error {
		for _, pat := range []string{"*{" + id + "}*", "*{" + order.ReservationID(id) + "}*", "*" + order.ReservationID(id), "*{" + order.PaymentID(id) + "}*"} {
			ks, err := c.Keys(ctx, pat).Result()
			if err != nil {
				return err
			}
			out = append(out, ks...)
		}
		return nil
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		require.NoError(t, cc.ForEachMaster(t.Context(), func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return keys(ctx, c)
		}))
	} else {
		require.NoError(t, keys(t.Context(), e.rdb))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// hot reports whether the order's slot still holds its stream and record.
func (e *env) hot(t *testing.T, id string) bool {
	n, err := e.rdb.Exists(t.Context(), "sm:es:{"+id+"}:stream", "sm:rm:{"+id+"}").Result()
	require.NoError(t, err)
	return n == 2
}

// requireArchived checks an archived order: the archive holds its whole
// history and final state, what stays in Redis is the compact record
// and nothing else, and a late module call gets the first result.
func (e *env) requireArchived(t *testing.T, id string, want contracts.OrderStatus, reserved bool) {
	t.Helper()
	ctx := t.Context()
	rec, err := e.archive.Get(ctx, id)
	require.NoError(t, err, id)
	require.Equal(t, want.String(), rec.Status)
	require.GreaterOrEqual(t, len(rec.Events), 3)
	sealed, err := e.stores.Events.(*eventstore.Redis).Sealed(ctx, id)
	require.NoError(t, err)
	require.True(t, sealed.Compacted())
	require.EqualValues(t, len(rec.Events), sealed.Version)
	st, version, err := readmodel.KeptState(sealed)
	require.NoError(t, err)
	require.Equal(t, want, st.GetStatus())
	require.EqualValues(t, len(rec.Events), version)
	got, gotVersion, err := e.stores.ReadModel.Get(ctx, id)
	require.NoError(t, err, "%s: the read model answers the final state", id)
	require.True(t, proto.Equal(st, got))
	require.Equal(t, version, gotVersion)

	keys := e.keysOf(t, id)
	allowed := []string{"sm:es:{" + id + "}:fence", "sm:cs:idem:order:{" + id + "}",
		"sm:cs:reservation:{" + order.ReservationID(id) + "}", "sm:cs:payment:{" + order.PaymentID(id) + "}"}
	for _, k := range keys {
		require.Contains(t, allowed, k, "%s: only the compact record stays", id)
	}
	require.LessOrEqual(t, len(keys), 4)
	fin, err := e.stores.ReadModel.(*readmodel.Redis).Finished(ctx, time.Now(), 0)
	require.NoError(t, err)
	for _, f := range fin {
		require.NotEqual(t, id, f.OrderID, "the finished list forgot it")
	}
	m, err := e.stores.Commerce.MappingOf(ctx, id)
	require.NoError(t, err)
	require.Equal(t, commerce.MappingStarted, m.Status, "the mapping stays, with its fingerprint")
	owned, err := e.stores.Locations.Owned(ctx, "member-1", kind)
	require.NoError(t, err)
	require.NotContains(t, owned, id, "the owner's index forgot it")

	// A zombie of the order: its reservation and payment answer their
	// first results, and no stock moves.
	before, err := e.stores.Commerce.Inventory().Stock(ctx, "SKU-1")
	require.NoError(t, err)
	res, err := e.stores.Commerce.Inventory().Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: order.ReservationID(id), OrderId: id,
		Lines: []*contracts.OrderLine{{Sku: "SKU-1", Quantity: 1}}})
	require.NoError(t, err)
	require.Equal(t, reserved, res.GetAccepted(), "%s: a late Reserve gets the first result", id)
	rel, err := e.stores.Commerce.Inventory().Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: order.ReservationID(id), OrderId: id})
	require.NoError(t, err)
	after, err := e.stores.Commerce.Inventory().Stock(ctx, "SKU-1")
	require.NoError(t, err)
	require.Equal(t, before, after, "%s: a late Reserve and Release move no stock (released %v)", id, rel.GetReleased())
	_, _, err = e.stores.Events.Open(ctx, id, sealed.Fence.Generation+1)
	require.ErrorIs(t, err, eventstore.ErrSealed, "no activation writes to it")
	_, _, _, err = e.stores.Locations.BeginCreate(ctx, kind, id, "late", time.Minute)
	require.ErrorIs(t, err, location.ErrSealed, "%s: no activation begins", id)
	p, err := e.stores.Events.(*eventstore.Redis).Presence(ctx, id)
	require.NoError(t, err)
	require.Equal(t, eventstore.TierArchived, p.Tier)
	require.Equal(t, sealed, p.Sealed, "the presence check reads the sealed record")
	require.ElementsMatch(t, keys, e.keysOf(t, id), "%s: the checks wrote nothing", id)
}

// The archiver killed between each pair of its steps: the order is left
// either hot, with everything it had, or archived with its compact
// record, never neither; another archiver then finishes it, for every
// kind of end.
func TestAKilledArchiverLeavesEveryOrderHotOrArchived(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	steps := []string{"seal", "write", "verify", "reservation", "payment", "compact", "forget"}
	for _, step := range steps {
		for _, k := range kinds {
			id := e.finish(t, fmt.Sprintf("%s-%s", step, k.name), k.lines, k.method, k.want)
			before := e.keysOf(t, id)

			a := e.archiver(t)
			archiver.SetStepHook(a, func(s string) error {
				if s == step {
					return errCrash
				}
				return nil
			})
			_, err := a.Archive(ctx, id)
			require.ErrorIs(t, err, errCrash, "%s/%s", step, k.name)

			compacted := slices.Index(steps, step) >= slices.Index(steps, "compact")
			if compacted {
				require.False(t, e.hot(t, id), "%s/%s: the compaction landed", step, k.name)
				sealed, err := e.stores.Events.(*eventstore.Redis).Sealed(ctx, id)
				require.NoError(t, err)
				require.True(t, sealed.Compacted())
			} else {
				require.True(t, e.hot(t, id), "%s/%s: still hot", step, k.name)
				st, _, err := e.stores.ReadModel.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, k.want, st.GetStatus())
				for _, key := range before {
					if strings.Contains(key, "hold") || strings.Contains(key, "reservation") || strings.Contains(key, "payment") {
						continue // the module records compact on their own, answerable throughout
					}
					require.Contains(t, e.keysOf(t, id), key, "%s/%s: hot keys stay", step, k.name)
				}
			}

			out, err := e.archiver(t).Archive(ctx, id)
			require.NoError(t, err, "%s/%s: another archiver finishes", step, k.name)
			require.Equal(t, archiver.Archived, out)
			e.requireArchived(t, id, k.want, k.reserved)
		}
	}
	n, err := e.archive.Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(steps)*len(kinds), n, "one row per order")
}

// A pass takes the orders past their retention only, and an order whose
// repairs are not done waits: sealed, still hot, put back in the list;
// once repaired, a pass archives it.
func TestAPassArchivesOnlyFinishedRepairedOrdersPastTheirRetention(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	ready := e.finish(t, "ready", kinds[0].lines, kinds[0].method, kinds[0].want)
	unmarked := e.finish(t, "unmarked", kinds[2].lines, kinds[2].method, kinds[2].want)
	require.NoError(t, e.rdb.HSet(ctx, "sm:cs:idem:order:{"+unmarked+"}", "status", string(commerce.MappingPending)).Err())
	behind := e.finish(t, "behind", kinds[1].lines, kinds[1].method, kinds[1].want)
	final, version, err := e.stores.ReadModel.Get(ctx, behind)
	require.NoError(t, err)
	created := proto.Clone(final).(*contracts.OrderState)
	created.Status = contracts.OrderStatus_Created
	require.NoError(t, e.stores.ReadModel.(*readmodel.Redis).Replace(ctx, behind, 1, created), "a projection behind its stream")

	a := e.archiver(t)
	p, err := a.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, archiver.Pass{Candidates: 3, Archived: 1, Deferred: 2}, p)
	e.requireArchived(t, ready, kinds[0].want, true)
	for _, id := range []string{unmarked, behind} {
		require.True(t, e.hot(t, id), "a pending repair keeps the order hot")
		_, _, err = e.stores.Events.Open(ctx, id, 9)
		require.ErrorIs(t, err, eventstore.ErrSealed, "sealed all the same")
		_, err := e.archive.Get(ctx, id)
		require.ErrorIs(t, err, archive.ErrNotFound, "nothing written to the archive")
	}

	p, err = a.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, p.Candidates, "put back one retention later")

	// The repairs still write (the projection and the mapping are not
	// the stream); a repaired projection lists its order again.
	_, err = e.stores.ReadModel.Put(ctx, behind, version, final)
	require.NoError(t, err)

	require.NoError(t, e.stores.Commerce.Idempotency().MarkStarted(ctx, "unmarked", unmarked))
	later := e.archiverWith(t, func(c *archiver.Config) { c.Now = func() time.Time { return time.Now().Add(2 * time.Hour) } })
	p, err = later.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, archiver.Pass{Candidates: 2, Archived: 2}, p)
	e.requireArchived(t, unmarked, kinds[2].want, true)
	e.requireArchived(t, behind, kinds[1].want, false)
}

// What stays of an archived order, measured: keys and bytes per order
// (MEMORY USAGE) over the three ends, logged for the docs.
func TestTheCompactRecordIsSmall(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	// The bench's mix: 90 % confirmed, 5 % failed for stock, 5 % for
	// payment.
	var ids []string
	for i := range 40 {
		k := kinds[0]
		switch i % 20 {
		case 7:
			k = kinds[1]
		case 13:
			k = kinds[2]
		}
		// Keys as clients make them: a UUID.
		ids = append(ids, e.finish(t, fmt.Sprintf("6f1c2b9e-0d4a-4c7e-9a51-%012d", i), k.lines, k.method, k.want))
	}
	hotKeys, hotBytes := e.usage(t, ctx, ids)
	p, err := e.archiver(t).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ids), p.Archived)
	keys, bytes := e.usage(t, ctx, ids)
	t.Logf("per order, hot: %.2f keys, %.0f bytes; archived: %.2f keys, %.0f bytes", hotKeys, hotBytes, keys, bytes)
	require.LessOrEqual(t, keys, 4.0)
	require.LessOrEqual(t, bytes, 1024.0)
}

func (e *env) usage(t *testing.T, ctx context.Context, ids []string) (keys, bytes float64) {
	t.Helper()
	for _, id := range ids {
		for _, k := range e.keysOf(t, id) {
			n, err := e.rdb.MemoryUsage(ctx, k).Result()
			require.NoError(t, err)
			keys++
			bytes += float64(n)
		}
	}
	return keys / float64(len(ids)), bytes / float64(len(ids))
}

// On a 3-master Redis Cluster every order's compaction is one script on
// its slot and every other write a per-id one: each kind of order is
// archived with its compact record, and no master ever answered
// CROSSSLOT (StartCluster checks).
func TestArchivingOnARedisCluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	e := setupOn(t, rc.URL(), rc.Client)
	var ids []string
	for _, k := range kinds {
		ids = append(ids, e.finish(t, "cluster-"+k.name, k.lines, k.method, k.want))
	}
	// The finished list's entry is written right after the terminal step
	// on a Redis Cluster (another slot).
	p, err := e.archiver(t).RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, len(ids), p.Archived, "%+v", p)
	for i, k := range kinds {
		e.requireArchived(t, ids[i], k.want, k.reserved)
	}
}

// An order whose grain still hosts it is not archived: it waits, sealed
// and hot, and once sealed no activation of it begins, nor does a
// creation lock get taken for it; when its owner passivates, the next
// pass archives it, and still nothing activates it: the Location Store
// refuses (location.ErrSealed) and writes nothing, so no generation at
// or below the archived one is ever used again.
func TestAHostedOrderWaitsForItsOwnerAndNothingActivatesItOnceSealed(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	id := e.finish(t, "hosted", kinds[0].lines, kinds[0].method, kinds[0].want)
	// Hosted again (an activation after the passivation, before the seal).
	ok, gen, _, err := e.stores.Locations.BeginCreate(ctx, kind, id, "tok-2", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, e.stores.Locations.CommitReady(ctx, kind, id, "tok-2", location.Record{Owner: "member-2", PIDAddress: "a", PIDID: "p2-" + id, Generation: gen}))

	now := time.Now()
	a := e.archiverWith(t, func(c *archiver.Config) {
		c.Retention = time.Millisecond
		c.HostedRecheck = time.Hour
		c.Now = func() time.Time { return now }
	})
	out, err := a.Archive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, archiver.Deferred, out, "its grain still hosts it")
	require.True(t, e.hot(t, id))
	fin, err := e.stores.ReadModel.(*readmodel.Redis).Finished(ctx, now.Add(30*time.Minute), 0)
	require.NoError(t, err)
	require.Empty(t, fin, "taken again after HostedRecheck, not at once")

	// Sealed: no other activation begins, no creation lock is taken.
	_, err = e.stores.Locations.ReleaseAt(ctx, kind, id, "member-2", "p2-"+id, location.KeepGeneration)
	require.NoError(t, err)
	_, _, _, err = e.stores.Locations.BeginCreate(ctx, kind, id, "tok-3", time.Minute)
	require.ErrorIs(t, err, location.ErrSealed)
	c, ok := e.stores.Locations.CreationFor(kind, id)
	require.True(t, ok)
	require.NotEmpty(t, c.Sealed, "a creation lock taken by another store checks the seal too")
	before := e.keysOf(t, id)
	fenceOf, err := e.stores.Events.(*eventstore.Redis).Sealed(ctx, id)
	require.NoError(t, err)
	fence := fenceOf.Fence

	out, err = a.Archive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, archiver.Archived, out, "released: archived")
	e.requireArchived(t, id, kinds[0].want, kinds[0].reserved)
	after := e.keysOf(t, id)
	require.NotEqual(t, before, after)
	_, _, _, err = e.stores.Locations.BeginCreate(ctx, kind, id, "tok-4", time.Minute)
	require.ErrorIs(t, err, location.ErrSealed, "an archived order is activated by no one")
	require.Equal(t, after, e.keysOf(t, id), "and the refusal writes nothing")
	sealed, err := e.stores.Events.(*eventstore.Redis).Sealed(ctx, id)
	require.NoError(t, err)
	require.Equal(t, fence, sealed.Fence, "the sealed record keeps the last writer's fence")
}
