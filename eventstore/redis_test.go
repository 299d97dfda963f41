package eventstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/eventstoretest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newRedis is NewRedis for a Config the test knows to be valid.
func newRedis(t testing.TB, cfg eventstore.Config) *eventstore.Redis {
	t.Helper()
	s, err := eventstore.NewRedis(cfg)
	require.NoError(t, err)
	return s
}

func newClient(t testing.TB, srv *redisserver.Server) *redis.Client {
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisContract(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	var n atomic.Int64
	eventstoretest.RunContract(t, func(t *testing.T) eventstore.Store {
		// Alternate between the default and a custom prefix so both are
		// exercised.
		i := n.Add(1)
		if i%2 == 0 {
			return newRedis(t, eventstore.Config{Client: c})
		}
		return newRedis(t, eventstore.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:es:", i)})
	})
}

// The read contract every tier of the event store holds to, on the hot
// tier: a stream appended in one batch under its owner's fence.
func TestRedisReadContract(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedis(t, eventstore.Config{Client: newClient(t, srv)})
	eventstoretest.RunReadContract(t, func(*testing.T) eventstoretest.Tier {
		return eventstoretest.Tier{
			Write: func(t *testing.T, orderID string, evs []eventstore.Envelope) {
				ctx := context.Background()
				f, _, err := s.Open(ctx, orderID, 1)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Append(ctx, orderID, 0, f, evs); err != nil {
					t.Fatal(err)
				}
			},
			Load: s.Load,
		}
	})
}

// TestRedisStreamCheckerContract: StreamExists against a real
// redis-server, default and custom prefixes.
func TestRedisStreamCheckerContract(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	var n atomic.Int64
	eventstoretest.RunStreamCheckerContract(t, func(t *testing.T) eventstoretest.CheckedStore {
		i := n.Add(1)
		if i%2 == 0 {
			return newRedis(t, eventstore.Config{Client: c})
		}
		return newRedis(t, eventstore.Config{Client: c, KeyPrefix: fmt.Sprintf("x%d:es:", i)})
	})
}

func allKeys(t *testing.T, c *redis.Client) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(ctxT(t), 0, "*", 100).Iterator()
	for iter.Next(ctxT(t)) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	sort.Strings(keys)
	return keys
}

func TestRedisKeysCarryOrderHashTag(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)

	for _, o := range []string{"order-1", "order:2"} {
		f, _, err := s.Open(ctx, o, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, o, 0, f, []eventstore.Envelope{{EventID: "e", EventType: "T", SourceCommandID: "c", Data: []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"sm:es:{order-1}:cmds", "sm:es:{order-1}:fence", "sm:es:{order-1}:stream",
		"sm:es:{order:2}:cmds", "sm:es:{order:2}:fence", "sm:es:{order:2}:stream",
	}
	got := allKeys(t, c)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	tag := regexp.MustCompile(`^[^{}]*\{([^{}]+)\}[^{}]*$`)
	for _, k := range got {
		m := tag.FindStringSubmatch(k)
		if m == nil || !strings.HasPrefix(m[1], "order") {
			t.Fatalf("key %q does not carry exactly one {orderId} hash tag", k)
		}
	}
	if typ, _ := c.Type(ctx, "sm:es:{order-1}:stream").Result(); typ != "stream" {
		t.Fatalf("stream key has type %q", typ)
	}
	fence, err := c.HGetAll(ctx, "sm:es:{order-1}:fence").Result()
	if err != nil || fence["gen"] != "1" || fence["epoch"] != "1" {
		t.Fatalf("fence hash = %v, %v; want gen 1 epoch 1", fence, err)
	}
	cmds, err := c.HGetAll(ctx, "sm:es:{order-1}:cmds").Result()
	if err != nil || cmds["c"] != "1" {
		t.Fatalf("cmds hash = %v, %v; want c -> 1", cmds, err)
	}
}

func TestRedisRefusesOrderIDsThatBreakTheHashTag(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	f := eventstore.Fence{Generation: 1, Epoch: 1}
	ev := []eventstore.Envelope{{EventID: "e", EventType: "T"}}

	for _, o := range []string{"", "a{b", "a}b", "{x}"} {
		_, _, err := s.Open(ctx, o, 1)
		if !errors.Is(err, eventstore.ErrInvalidOrderID) {
			t.Fatalf("Open(%q): err = %v, want ErrInvalidOrderID", o, err)
		}
		_, err = s.Append(ctx, o, 0, f, ev)
		if !errors.Is(err, eventstore.ErrInvalidOrderID) {
			t.Fatalf("Append(%q): err = %v, want ErrInvalidOrderID", o, err)
		}
		_, err = s.Load(ctx, o)
		if !errors.Is(err, eventstore.ErrInvalidOrderID) {
			t.Fatalf("Load(%q): err = %v, want ErrInvalidOrderID", o, err)
		}
	}
	// An envelope naming another order is refused too.
	_, err := s.Append(ctx, "o1", 0, f, []eventstore.Envelope{{EventID: "e", OrderID: "o2", EventType: "T"}})
	if !errors.Is(err, eventstore.ErrInvalidOrderID) {
		t.Fatalf("Append of an o2 envelope to o1: err = %v, want ErrInvalidOrderID", err)
	}
	if keys := allKeys(t, c); len(keys) != 0 {
		t.Fatalf("refused calls wrote keys %v", keys)
	}
}

func TestRedisConfigErrors(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for name, cfg := range map[string]eventstore.Config{
		"nil client":      {},
		"prefix with tag": {Client: c, KeyPrefix: "sm:{es}:"},
	} {
		s, err := eventstore.NewRedis(cfg)
		require.ErrorIs(t, err, eventstore.ErrConfig, name)
		require.Nil(t, s, name)
		t.Logf("%s: %v", name, err)
	}
}

func TestRedisErrorsNameVersionsAndFence(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedis(t, eventstore.Config{Client: newClient(t, srv)})
	ctx := ctxT(t)
	f, _, _ := s.Open(ctx, "o1", 3)
	if _, err := s.Append(ctx, "o1", 0, f, []eventstore.Envelope{{EventID: "e1", EventType: "T", SourceCommandID: "c1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expected int64
		fence    eventstore.Fence
		cmd      string
		target   error
		text     string
	}{
		{0, f, "", eventstore.ErrVersionConflict, "expected version 0, actual 1"},
		{1, eventstore.Fence{Generation: 3, Epoch: 2}, "", eventstore.ErrFenced, "fence (3, 2): stored fence is (3, 1)"},
		{1, f, "c1", eventstore.ErrDuplicateCommand, `"c1" recorded at version 1`},
	} {
		_, err := s.Append(ctx, "o1", tc.expected, tc.fence, []eventstore.Envelope{{EventID: "x", EventType: "T", SourceCommandID: tc.cmd}})
		if !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.text) {
			t.Fatalf("err = %v, want %v saying %q", err, tc.target, tc.text)
		}
	}
	_, _, err := s.Open(ctx, "o1", 2)
	if !errors.Is(err, eventstore.ErrFenced) || !strings.Contains(err.Error(), "generation 2: stored fence is (3, 1)") {
		t.Fatalf("Open(gen 2): err = %v", err)
	}
}

func TestRedisCorruptEntry(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)

	good := func(o string, v int) map[string]any {
		return map[string]any{
			"eventId": "bad", "orderId": o, "eventType": "T", "version": v,
			"sourceCommandId": "", "createdAtUnixMs": 1, "data": "{}",
		}
	}
	without := func(m map[string]any, field string) map[string]any {
		delete(m, field)
		return m
	}
	with := func(m map[string]any, field string, v any) map[string]any {
		m[field] = v
		return m
	}
	for i, tc := range []struct {
		field  string
		values func(o string) map[string]any
	}{
		{"data", func(o string) map[string]any { return without(good(o, 2), "data") }},
		{"eventType", func(o string) map[string]any { return without(good(o, 2), "eventType") }},
		{"version", func(o string) map[string]any { return with(good(o, 2), "version", "two") }},
		{"version", func(o string) map[string]any { return with(good(o, 3), "version", 3) }}, // a gap
		{"createdAtUnixMs", func(o string) map[string]any { return with(good(o, 2), "createdAtUnixMs", "soon") }},
		{"orderId", func(o string) map[string]any { return with(good(o, 2), "orderId", "someone-else") }},
		{"fenceGen", func(o string) map[string]any { return with(good(o, 2), "fenceGen", "new") }},
		{"fenceEpoch", func(o string) map[string]any { return with(good(o, 2), "fenceEpoch", "") }},
		{"schema", func(o string) map[string]any { return with(good(o, 2), "schema", "v2") }},
		{"schema", func(o string) map[string]any { return with(good(o, 2), "schema", 0) }},
	} {
		o := fmt.Sprintf("corrupt-%d", i)
		f, _, err := s.Open(ctx, o, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, o, 0, f, []eventstore.Envelope{{EventID: "ok", EventType: "T", Data: []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "sm:es:{" + o + "}:stream", Values: tc.values(o)}).Result()
		if err != nil {
			t.Fatal(err)
		}

		_, err = s.Load(ctx, o)
		if !errors.Is(err, eventstore.ErrCorrupt) {
			t.Fatalf("%s: Load err = %v, want ErrCorrupt", tc.field, err)
		}
		if !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "field "+tc.field) {
			t.Fatalf("%s: error %q does not name entry %s and the field", tc.field, err, id)
		}
		_, _, err = s.Open(ctx, o, 1)
		if !errors.Is(err, eventstore.ErrCorrupt) || !strings.Contains(err.Error(), id) {
			t.Fatalf("%s: Open err = %v, want ErrCorrupt naming %s", tc.field, err, id)
		}
		t.Logf("%s: %v", tc.field, err)
	}
}

func TestRedisUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Network: srv.Network(), Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	if _, err := s.Load(ctx, "o1"); err != nil {
		t.Fatalf("Load while up: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	_, _, err := s.Open(ctx, "o1", 1)
	if !errors.Is(err, eventstore.ErrUnavailable) {
		t.Fatalf("Open: err = %v, want ErrUnavailable", err)
	}
	_, err = s.Append(ctx, "o1", 0, eventstore.Fence{Generation: 1, Epoch: 1}, []eventstore.Envelope{{EventID: "e"}})
	if !errors.Is(err, eventstore.ErrUnavailable) {
		t.Fatalf("Append: err = %v, want ErrUnavailable", err)
	}
	_, err = s.Load(ctx, "o1")
	if !errors.Is(err, eventstore.ErrUnavailable) {
		t.Fatalf("Load: err = %v, want ErrUnavailable", err)
	}
	t.Log(err)

	// A caller's cancellation is the caller's, not an outage.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Load(cctx, "o1"); errors.Is(err, eventstore.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Load with cancelled ctx: err = %v, want context.Canceled only", err)
	}
}

func BenchmarkAppend(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv)
	s := newRedis(b, eventstore.Config{Client: c})
	ctx := ctxT(b)
	f, _, err := s.Open(ctx, "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	ev := []eventstore.Envelope{{EventID: "e", EventType: "InventoryReservedEvent", SourceCommandID: "",
		CreatedAtUnixMs: 1_700_000_000_000, Data: []byte(`{"orderId":"bench","reservationId":"r-1"}`)}}
	var v int64
	for b.Loop() {
		if v, err = s.Append(ctx, "bench", v, f, ev); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRedisWrongTypeAtStreamKeyIsCorrupt(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	if err := c.Set(ctx, "sm:es:{o1}:stream", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "o1"); !errors.Is(err, eventstore.ErrCorrupt) {
		t.Fatalf("Load: err = %v, want ErrCorrupt", err)
	}
	if _, _, err := s.Open(ctx, "o1", 1); !errors.Is(err, eventstore.ErrCorrupt) {
		t.Fatalf("Open: err = %v, want ErrCorrupt", err)
	}
	_, err := s.Append(ctx, "o1", 0, eventstore.Fence{Generation: 1, Epoch: 1}, []eventstore.Envelope{{EventID: "e"}})
	if !errors.Is(err, eventstore.ErrCorrupt) {
		t.Fatalf("Append: err = %v, want ErrCorrupt", err)
	}
	t.Log(err)
}

// A projected append refuses a projection that cannot share the script's
// slot or lacks its fields, before anything is written. (Its version is
// the unit's: Unit.Project sets it.)
func TestRedisCommitRefusesMisfitProjections(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	ev := []eventstore.Envelope{{EventID: "e1", OrderID: "o1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
	f := eventstore.Fence{Generation: 1, Epoch: 1}
	_, err := commitProjected(ctx, s, "o1", 0, f, ev, eventstore.Projection{Key: "rm:o1", VersionField: "version", StateField: "state", Version: 1, State: []byte("s")})
	if !errors.Is(err, eventstore.ErrInvalidOrderID) {
		t.Fatalf("projection key without the hash tag: got %v", err)
	}
	for _, fields := range [][2]string{{"", "state"}, {"version", ""}, {"v", "v"}} {
		_, err = commitProjected(ctx, s, "o1", 0, f, ev, eventstore.Projection{Key: "rm:{o1}", VersionField: fields[0], StateField: fields[1], Version: 1, State: []byte("s")})
		require.Error(t, err, "fields %q", fields)
	}
	if keys := allKeys(t, c); len(keys) != 0 {
		t.Fatalf("refused appends wrote %v", keys)
	}
	v, err := commitProjected(ctx, s, "o1", 0, f, ev, eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: 1, State: []byte("s")})
	if err != nil || v != 1 {
		t.Fatalf("projected append: %d %v", v, err)
	}
	got, err := c.HGetAll(ctx, "rm:{o1}").Result()
	if err != nil || got["version"] != "1" || got["state"] != "s" {
		t.Fatalf("projection record %v %v", got, err)
	}
}

// The projection goes to the fields its owner names, under the guard
// Projection states; a plain Append writes none of it.
func TestRedisCommitWritesTheProjectionsFieldsUnderTheGuard(t *testing.T) {
	s, c, ctx, f := openedO1(t)
	ev := oneEvent
	proj := func(v int64, state string) eventstore.Projection {
		return eventstore.Projection{Key: "other:{o1}", VersionField: "ver", StateField: "body", Version: v, State: []byte(state)}
	}

	_, err := commitProjected(ctx, s, "o1", 0, f, ev("e1"), proj(1, "one"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ver": "1", "body": "one"}, c.HGetAll(ctx, "other:{o1}").Val())

	// A newer record stored by its owner is kept.
	require.NoError(t, c.HSet(ctx, "other:{o1}", "ver", 9, "body", "nine").Err())
	_, err = commitProjected(ctx, s, "o1", 1, f, ev("e2"), proj(2, "two"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ver": "9", "body": "nine"}, c.HGetAll(ctx, "other:{o1}").Val())

	// A damaged version does not block the write.
	require.NoError(t, c.HSet(ctx, "other:{o1}", "ver", "x").Err())
	_, err = commitProjected(ctx, s, "o1", 2, f, ev("e3"), proj(3, "three"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ver": "3", "body": "three"}, c.HGetAll(ctx, "other:{o1}").Val())

	// A refused append leaves the record alone.
	_, err = commitProjected(ctx, s, "o1", 0, f, ev("e4"), proj(1, "stale"))
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	require.Equal(t, "three", c.HGet(ctx, "other:{o1}", "body").Val())

	// A plain append writes only the store's own keys.
	_, err = s.Append(ctx, "o1", 3, f, ev("e5"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ver": "3", "body": "three"}, c.HGetAll(ctx, "other:{o1}").Val())
	require.Equal(t, []string{"other:{o1}", "sm:es:{o1}:fence", "sm:es:{o1}:stream"}, allKeys(t, c))
	evs, err := s.Load(ctx, "o1")
	require.NoError(t, err)
	require.Len(t, evs, 4)
}

// Companions run in the append's step, in order, once its checks passed:
// SetIfAbsent keeps the first value, HashSetIf writes only under its
// condition and says so; a refused append runs none of them, and an
// index entry still finds its key behind them.
func TestRedisCommitWithCompanions(t *testing.T) {
	s, c, ctx, f := openedO1(t)
	ev := oneEvent
	proj := func(v int64) eventstore.Projection {
		return eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: v, State: []byte("s"),
			Index: eventstore.IndexEntry{Op: eventstore.IndexAdd, Key: "active", Member: "o1", Score: v}}
	}
	require.NoError(t, c.HSet(ctx, "map:k", "orderId", "o1", "status", "pending").Err())
	require.NoError(t, c.HSet(ctx, "map:other", "orderId", "o2", "status", "pending").Err())
	comps := func(envelope string) []eventstore.Companion {
		return []eventstore.Companion{
			{Op: eventstore.SetIfAbsent, Key: "env:o1", Value: []byte(envelope)},
			{Op: eventstore.HashSetIf, Key: "map:k", IfField: "orderId", IfValue: "o1", Field: "status", Value: []byte("started")},
			{Op: eventstore.HashSetIf, Key: "map:other", IfField: "orderId", IfValue: "o1", Field: "status", Value: []byte("started")},
		}
	}

	// A refused append runs no companion.
	_, _, err := commit(ctx, s, "o1", 5, f, ev("e1"), proj(6), comps("first"))
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	require.Zero(t, c.Exists(ctx, "env:o1").Val())
	require.Equal(t, "pending", c.HGet(ctx, "map:k", "status").Val())

	v, applied, err := commit(ctx, s, "o1", 0, f, ev("e1"), proj(1), comps("first"))
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
	require.Equal(t, []bool{true, true, false}, applied)
	require.Equal(t, "first", c.Get(ctx, "env:o1").Val())
	require.Equal(t, "started", c.HGet(ctx, "map:k", "status").Val())
	require.Equal(t, "pending", c.HGet(ctx, "map:other", "status").Val(), "a failed condition writes nothing")
	require.Equal(t, float64(1), c.ZScore(ctx, "active", "o1").Val(), "the index key sits behind the companions")

	v, applied, err = commit(ctx, s, "o1", 1, f, ev("e2"), proj(2), comps("second"))
	require.NoError(t, err)
	require.Equal(t, int64(2), v)
	require.Equal(t, []bool{true, true, false}, applied)
	require.Equal(t, "first", c.Get(ctx, "env:o1").Val(), "the first value wins")

	_, _, err = commit(ctx, s, "o1", 2, f, ev("e3"), proj(3), []eventstore.Companion{{Op: eventstore.HashSetIf, Key: "map:k"}})
	require.Error(t, err, "a HashSetIf without fields is refused")
	got, err := s.Load(ctx, "o1")
	require.NoError(t, err)
	require.Len(t, got, 2, "a refused companion refuses the append")
}

// A Require companion gates the whole step: while its key holds another
// value nothing is written, not even a projection or another companion,
// and the error says so before any of the append's own checks; once it
// holds the value, the plain writes (HashSet, HashDelete, Delete,
// ListPushCapped, SetAdd) all land with the append.
func TestRedisCommitWithRequire(t *testing.T) {
	s, c, ctx, f := openedO1(t)
	ev := oneEvent
	proj := eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: 1, State: []byte("s")}
	require.NoError(t, c.Set(ctx, "lock", "other-token", 0).Err())
	require.NoError(t, c.HSet(ctx, "rec", "takeover", "1").Err())
	require.NoError(t, c.RPush(ctx, "hist", "h1", "h2", "h3").Err())
	comps := []eventstore.Companion{
		{Op: eventstore.Require, Key: "lock", Value: []byte("my-token")},
		{Op: eventstore.HashSet, Key: "rec", Field: "status", Value: []byte("Ready")},
		{Op: eventstore.HashDelete, Key: "rec", Field: "takeover"},
		{Op: eventstore.Delete, Key: "lock"},
		{Op: eventstore.ListPushCapped, Key: "hist", Value: []byte("h4"), Cap: 3},
		{Op: eventstore.SetAdd, Key: "owned", Value: []byte("o1")},
	}

	// Another token: nothing at all, even with a wrong expected version.
	for _, expected := range []int64{0, 7} {
		_, _, err := commit(ctx, s, "o1", expected, f, ev("e1"), eventstore.Projection{Key: proj.Key, VersionField: "version", StateField: "state", Version: expected + 1, State: []byte("s")}, comps)
		require.ErrorIs(t, err, eventstore.ErrPrecondition)
	}
	require.Zero(t, c.Exists(ctx, "rm:{o1}", "owned", "sm:es:{o1}:stream").Val())
	require.Equal(t, "other-token", c.Get(ctx, "lock").Val())
	require.Equal(t, map[string]string{"takeover": "1"}, c.HGetAll(ctx, "rec").Val())
	require.Equal(t, []string{"h1", "h2", "h3"}, c.LRange(ctx, "hist", 0, -1).Val())

	// The required value: everything lands in the one step.
	require.NoError(t, c.Set(ctx, "lock", "my-token", 0).Err())
	v, applied, err := commit(ctx, s, "o1", 0, f, ev("e1"), proj, comps)
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
	require.Equal(t, []bool{true, true, true, true, true, true}, applied)
	require.Zero(t, c.Exists(ctx, "lock").Val())
	require.Equal(t, map[string]string{"status": "Ready"}, c.HGetAll(ctx, "rec").Val())
	require.Equal(t, []string{"h2", "h3", "h4"}, c.LRange(ctx, "hist", 0, -1).Val(), "capped to the newest")
	require.True(t, c.SIsMember(ctx, "owned", "o1").Val())
	require.Equal(t, "1", c.HGet(ctx, "rm:{o1}", "version").Val())

	// A step whose lock is gone now fails again, and appends nothing.
	_, _, err = commit(ctx, s, "o1", 1, f, ev("e2"), eventstore.Projection{Key: proj.Key, VersionField: "version", StateField: "state", Version: 2, State: []byte("s")}, comps)
	require.ErrorIs(t, err, eventstore.ErrPrecondition)
	got, err := s.Load(ctx, "o1")
	require.NoError(t, err)
	require.Len(t, got, 1)

	for _, bad := range []eventstore.Companion{
		{Op: eventstore.HashSet, Key: "rec"},
		{Op: eventstore.HashDelete, Key: "rec"},
		{Op: eventstore.ListPushCapped, Key: "hist", Value: []byte("x")},
		{Op: eventstore.Require},
	} {
		_, _, err := commit(ctx, s, "o1", 1, f, ev("e2"), eventstore.Projection{Key: proj.Key, VersionField: "version", StateField: "state", Version: 2, State: []byte("s")}, []eventstore.Companion{bad})
		require.Error(t, err, "%+v is refused", bad)
		require.NotErrorIs(t, err, eventstore.ErrPrecondition)
	}
}

// commit commits the unit of evs at expected under f, with proj and comps
// (eventstore.Unit), and returns the new version and what each companion
// wrote.
func commit(ctx context.Context, s *eventstore.Redis, orderID string, expected int64, f eventstore.Fence, evs []eventstore.Envelope, proj eventstore.Projection, comps []eventstore.Companion) (int64, []bool, error) {
	u := eventstore.NewUnit(orderID, expected, f, evs)
	u.Project(proj)
	u.Add(comps...)
	out, err := s.Commit(ctx, u)
	return out.Version, out.Applied, err
}

// openedO1 is a store on a fresh redis-server, its raw client, and the
// fence of order o1 opened at generation 1.
func openedO1(t *testing.T) (*eventstore.Redis, *redis.Client, context.Context, eventstore.Fence) {
	t.Helper()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	f, _, err := s.Open(ctx, "o1", 1)
	require.NoError(t, err)
	return s, c, ctx, f
}

// oneEvent is a batch of one opaque event with the given id.
func oneEvent(id string) []eventstore.Envelope {
	return []eventstore.Envelope{{EventID: id, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}}
}

// commitProjected commits a unit of events and proj alone: a step's
// write as the read model makes it.
func commitProjected(ctx context.Context, s *eventstore.Redis, orderID string, expected int64, f eventstore.Fence, evs []eventstore.Envelope, proj eventstore.Projection) (int64, error) {
	u := eventstore.NewUnit(orderID, expected, f, evs)
	u.Project(proj)
	out, err := s.Commit(ctx, u)
	return out.Version, err
}

// The order's highest schema rides in its fence hash, raised by the
// append that wrote it and by a unit's commit alike, written only when it
// rises (a stream of the base schema costs no write), and never lowered;
// a refused append raises nothing.
func TestRedisHighestSchemaRisesWithTheAppendThatWroteIt(t *testing.T) {
	s, c, ctx, f := openedO1(t)
	schemaOf := func(id string) int {
		t.Helper()
		n, err := s.HighestSchema(ctx, id)
		require.NoError(t, err)
		return n
	}
	field := func() bool {
		t.Helper()
		ok, err := c.HExists(ctx, "sm:es:{o1}:fence", "schema").Result()
		require.NoError(t, err)
		return ok
	}
	require.Equal(t, 1, schemaOf("o1"), "no stream reads the base schema")
	at := func(schema int, ids ...string) []eventstore.Envelope {
		var evs []eventstore.Envelope
		for _, id := range ids {
			evs = append(evs, eventstore.Envelope{EventID: id, EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}"), Schema: schema})
		}
		return evs
	}
	_, err := s.Append(ctx, "o1", 0, f, at(1, "e1", "e2"))
	require.NoError(t, err)
	require.Equal(t, 1, schemaOf("o1"))
	require.False(t, field(), "the base schema writes nothing")

	_, err = s.Append(ctx, "o1", 2, f, append(at(1, "e3"), at(3, "e4")...))
	require.NoError(t, err)
	require.Equal(t, 3, schemaOf("o1"), "the batch's highest")

	_, err = s.Append(ctx, "o1", 4, f, at(2, "e5"))
	require.NoError(t, err)
	require.Equal(t, 3, schemaOf("o1"), "never lowered")

	_, err = s.Append(ctx, "o1", 1, f, at(7, "stale"))
	require.ErrorIs(t, err, eventstore.ErrVersionConflict)
	require.Equal(t, 3, schemaOf("o1"), "a refused append raises nothing")

	_, err = commitProjected(ctx, s, "o1", 5, f, at(4, "e6"), eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: 6, State: []byte("s")})
	require.NoError(t, err)
	require.Equal(t, 4, schemaOf("o1"), "a unit's commit raises it too")

	_, err = s.HighestSchema(ctx, "bad{id}")
	require.ErrorIs(t, err, eventstore.ErrInvalidOrderID)
	require.NoError(t, c.HSet(ctx, "sm:es:{o1}:fence", "schema", "x").Err())
	_, err = s.HighestSchema(ctx, "o1")
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
}

// HashSet companions in a row on one key land as one HSET; a HashSet on
// another key between them splits the run, and every one of them still
// reports applied.
func TestRedisHashSetsInARowOnOneKeyAreOneCommand(t *testing.T) {
	s, c, ctx, f := openedO1(t)
	hsets := func() int64 {
		t.Helper()
		info, err := c.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		for _, l := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_hset:calls="); ok {
				n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		return 0
	}
	proj := func(v int64) eventstore.Projection {
		return eventstore.Projection{Key: "rm:{o1}", VersionField: "version", StateField: "state", Version: v, State: []byte("s")}
	}
	// The first append writes the fence hash's generation too.
	_, err := commitProjected(ctx, s, "o1", 0, f, oneEvent("e1"), proj(1))
	require.NoError(t, err)

	before := hsets()
	comps := []eventstore.Companion{
		{Op: eventstore.HashSet, Key: "rec:{o1}", Field: "a", Value: []byte("1")},
		{Op: eventstore.HashSet, Key: "rec:{o1}", Field: "b", Value: []byte("2")},
		{Op: eventstore.HashSet, Key: "rec:{o1}", Field: "c", Value: []byte("3")},
		{Op: eventstore.HashSet, Key: "other:{o1}", Field: "x", Value: []byte("9")},
		{Op: eventstore.HashSet, Key: "rec:{o1}", Field: "d", Value: []byte("4")},
		{Op: eventstore.HashDelete, Key: "rec:{o1}", Field: "zz"},
		{Op: eventstore.HashSet, Key: "rec:{o1}", Field: "e", Value: []byte("5")},
	}
	v, applied, err := commit(ctx, s, "o1", 1, f, oneEvent("e2"), proj(2), comps)
	require.NoError(t, err)
	require.Equal(t, int64(2), v)
	require.Equal(t, []bool{true, true, true, true, true, true, true}, applied)
	require.Equal(t, map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}, c.HGetAll(ctx, "rec:{o1}").Val())
	require.Equal(t, map[string]string{"x": "9"}, c.HGetAll(ctx, "other:{o1}").Val())
	require.Equal(t, int64(1+4), hsets()-before, "the projection, then a, b and c as one, x, d, e")
}
