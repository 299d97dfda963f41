package relocation_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

func newStore(t *testing.T) (*relocation.Store, *redis.Client, *redisserver.Server) {
	t.Helper()
	srv := redisserver.ForTest(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return relocation.New(relocation.Config{Client: rdb}), rdb, srv
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// monitor streams the server's MONITOR feed, which lists commands in the
// order the server executed them; it is the only outside witness of which
// of several concurrent writes came first.
type monitor struct {
	conn  net.Conn
	lines *bufio.Reader
}

func startMonitor(t *testing.T, srv *redisserver.Server) *monitor {
	t.Helper()
	conn, err := net.Dial(srv.Network(), srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	m := &monitor{conn: conn, lines: bufio.NewReader(conn)}
	// The server switches the connection to monitoring before it answers,
	// so after +OK no later command can be missed.
	require.Equal(t, "+OK", m.next(t))
	return m
}

func (m *monitor) next(t *testing.T) string {
	t.Helper()
	require.NoError(t, m.conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := m.lines.ReadString('\n')
	require.NoError(t, err, "monitor feed")
	return strings.TrimRight(line, "\r\n")
}

func TestSaveFirstConcurrentFirstWriteWins(t *testing.T) {
	store, _, srv := newStore(t)
	ctx := testCtx(t)
	mon := startMonitor(t, srv)
	const writers = 20
	const orderID = "order-race"

	start := make(chan struct{})
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = store.SaveFirst(ctx, orderID, fmt.Appendf(nil, "envelope-%02d", i))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "writer %d: a losing SaveFirst is not an error", i)
	}

	// Collect the envelope of every write in execution order.
	marker := `"set" "sm:rel:envelope:{` + orderID + `}" "`
	var executed []string
	for len(executed) < writers {
		line := mon.next(t)
		if k := strings.Index(line, marker); k >= 0 {
			rest := line[k+len(marker):]
			require.True(t, strings.HasSuffix(rest, `" "nx"`), "the write must be conditional: %s", line)
			executed = append(executed, strings.TrimSuffix(rest, `" "nx"`))
		}
	}
	t.Logf("first executed write: %s", executed[0])

	got, err := store.LoadFirst(ctx, orderID)
	require.NoError(t, err)
	require.Equal(t, executed[0], string(got), "the first executed write must be the one kept")

	require.NoError(t, store.SaveFirst(ctx, orderID, []byte("late")))
	got, err = store.LoadFirst(ctx, orderID)
	require.NoError(t, err)
	require.Equal(t, executed[0], string(got))
}

func TestSaveFirstKeepsBytesExactly(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)
	env := []byte{0x00, 0xff, '\r', '\n', '{', '}', 0x7f}
	require.NoError(t, store.SaveFirst(ctx, "order-bin", env))
	require.NoError(t, store.SaveFirst(ctx, "order-bin", []byte("second")))
	got, err := store.LoadFirst(ctx, "order-bin")
	require.NoError(t, err)
	require.Equal(t, env, got)

	err = store.SaveFirst(ctx, "order-empty", nil)
	require.ErrorIs(t, err, relocation.ErrInvalidArgument)
	_, err = store.LoadFirst(ctx, "order-empty")
	require.ErrorIs(t, err, relocation.ErrNotFound, "a refused save must store nothing")
}

func TestLoadFirstUnknownIsNotFound(t *testing.T) {
	store, _, _ := newStore(t)
	_, err := store.LoadFirst(testCtx(t), "order-never-seen")
	require.ErrorIs(t, err, relocation.ErrNotFound)
}

func TestOperationLifecycle(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)
	op := relocation.Operation{
		ID: "op-1", OrderID: "order-1", Source: "workflow-a", Target: "workflow-b",
		Generation: 3, State: relocation.OpMoving,
		StartedAtUnixMs: 1_000, UpdatedAtUnixMs: 1_000,
	}
	require.NoError(t, store.PutOperation(ctx, op))
	got, err := store.GetOperation(ctx, "op-1")
	require.NoError(t, err)
	require.Equal(t, op, got)

	// A later write cannot move StartedAt: it fixes the operation's place
	// in the order's history.
	step := op
	step.State = relocation.OpTargetActivated
	step.StartedAtUnixMs = 9_999
	step.UpdatedAtUnixMs = 2_000
	require.NoError(t, store.PutOperation(ctx, step))
	got, err = store.GetOperation(ctx, "op-1")
	require.NoError(t, err)
	require.Equal(t, relocation.OpTargetActivated, got.State)
	require.Equal(t, int64(1_000), got.StartedAtUnixMs)
	require.Equal(t, int64(2_000), got.UpdatedAtUnixMs)

	done := op
	done.State = relocation.OpCommitted
	done.UpdatedAtUnixMs = 3_000
	require.NoError(t, store.PutOperation(ctx, done))
	got, err = store.GetOperation(ctx, "op-1")
	require.NoError(t, err)
	require.Equal(t, relocation.OpCommitted, got.State)
	require.True(t, got.State.Final())
	require.Equal(t, "workflow-b", got.Target)
	require.Equal(t, int64(3), got.Generation)
	require.Equal(t, int64(1_000), got.StartedAtUnixMs)
	require.Equal(t, int64(3_000), got.UpdatedAtUnixMs)

	ops, err := store.Operations(ctx, "order-1")
	require.NoError(t, err)
	require.Len(t, ops, 1, "updates must not add list entries")
}

func TestOpStateFinal(t *testing.T) {
	require.False(t, relocation.OpMoving.Final())
	require.False(t, relocation.OpTargetActivated.Final())
	require.True(t, relocation.OpCommitted.Final())
	require.True(t, relocation.OpAborted.Final())
	require.Equal(t, relocation.OpState("moving"), relocation.OpMoving)
	require.Equal(t, relocation.OpState("target-activated"), relocation.OpTargetActivated)
	require.Equal(t, relocation.OpState("committed"), relocation.OpCommitted)
	require.Equal(t, relocation.OpState("aborted"), relocation.OpAborted)
}

func TestFinalOperationCannotGoBack(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)
	for _, final := range []relocation.OpState{relocation.OpCommitted, relocation.OpAborted} {
		t.Run(string(final), func(t *testing.T) {
			id := "op-" + string(final)
			op := relocation.Operation{
				ID: id, OrderID: "order-final", Source: "workflow-a", Target: "workflow-b",
				Generation: 2, State: relocation.OpMoving, StartedAtUnixMs: 10, UpdatedAtUnixMs: 10,
			}
			require.NoError(t, store.PutOperation(ctx, op))
			op.State, op.UpdatedAtUnixMs = final, 20
			require.NoError(t, store.PutOperation(ctx, op))

			for _, back := range []relocation.OpState{relocation.OpMoving, relocation.OpTargetActivated} {
				again := op
				again.State, again.UpdatedAtUnixMs = back, 30
				require.ErrorIs(t, store.PutOperation(ctx, again), relocation.ErrConflict, "%s → %s", final, back)
			}
			other := relocation.OpAborted
			if final == relocation.OpAborted {
				other = relocation.OpCommitted
			}
			flip := op
			flip.State = other
			require.ErrorIs(t, store.PutOperation(ctx, flip), relocation.ErrConflict, "a final outcome cannot change")
			retarget := op
			retarget.Target = "workflow-c"
			require.ErrorIs(t, store.PutOperation(ctx, retarget), relocation.ErrConflict, "a final record is frozen")

			// A retried final write is harmless and changes nothing.
			retry := op
			retry.UpdatedAtUnixMs = 40
			require.NoError(t, store.PutOperation(ctx, retry))

			got, err := store.GetOperation(ctx, id)
			require.NoError(t, err)
			require.Equal(t, final, got.State)
			require.Equal(t, "workflow-b", got.Target)
			require.Equal(t, int64(20), got.UpdatedAtUnixMs)
		})
	}
}

func TestOperationIDCannotChangeOrder(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)
	op := relocation.Operation{ID: "op-x", OrderID: "order-a", State: relocation.OpMoving, StartedAtUnixMs: 1, UpdatedAtUnixMs: 1}
	require.NoError(t, store.PutOperation(ctx, op))
	moved := op
	moved.OrderID = "order-b"
	require.ErrorIs(t, store.PutOperation(ctx, moved), relocation.ErrConflict)

	got, err := store.GetOperation(ctx, "op-x")
	require.NoError(t, err)
	require.Equal(t, "order-a", got.OrderID)
	ops, err := store.Operations(ctx, "order-b")
	require.NoError(t, err)
	require.Empty(t, ops, "a refused write must leave no trace under the other order")
}

func TestGetOperationUnknownIsNotFound(t *testing.T) {
	store, _, _ := newStore(t)
	_, err := store.GetOperation(testCtx(t), "op-never")
	require.ErrorIs(t, err, relocation.ErrNotFound)
}

func TestOpenOperationFindsInterruptedNotCommitted(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)

	_, ok, err := store.OpenOperation(ctx, "order-open")
	require.NoError(t, err)
	require.False(t, ok, "an order without operations has none open")

	first := relocation.Operation{ID: "op-1", OrderID: "order-open", Source: "workflow-a", Target: "workflow-b",
		Generation: 1, State: relocation.OpCommitted, StartedAtUnixMs: 100, UpdatedAtUnixMs: 150}
	require.NoError(t, store.PutOperation(ctx, first))
	_, ok, err = store.OpenOperation(ctx, "order-open")
	require.NoError(t, err)
	require.False(t, ok, "a committed operation is not open")

	// Interrupted after the target activated: still visible to be repeated.
	second := relocation.Operation{ID: "op-2", OrderID: "order-open", Source: "workflow-b", Target: "workflow-a",
		Generation: 1, State: relocation.OpTargetActivated, StartedAtUnixMs: 200, UpdatedAtUnixMs: 250}
	require.NoError(t, store.PutOperation(ctx, second))
	open, ok, err := store.OpenOperation(ctx, "order-open")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, second, open)

	// The repeat completes it; nothing is open any more.
	second.State, second.UpdatedAtUnixMs = relocation.OpCommitted, 300
	require.NoError(t, store.PutOperation(ctx, second))
	_, ok, err = store.OpenOperation(ctx, "order-open")
	require.NoError(t, err)
	require.False(t, ok)

	// Another order's open operation is not this order's.
	other := relocation.Operation{ID: "op-3", OrderID: "order-other", State: relocation.OpMoving, StartedAtUnixMs: 400, UpdatedAtUnixMs: 400}
	require.NoError(t, store.PutOperation(ctx, other))
	_, ok, err = store.OpenOperation(ctx, "order-open")
	require.NoError(t, err)
	require.False(t, ok)
}

func TestOperationsOldestFirst(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)
	// Written out of time order, with ids whose lexical order is not the
	// time order, so only startedAt can produce the expected sequence.
	for _, op := range []relocation.Operation{
		{ID: "op-a", StartedAtUnixMs: 3_000},
		{ID: "op-b", StartedAtUnixMs: 1_000},
		{ID: "op-c", StartedAtUnixMs: 2_000},
	} {
		op.OrderID, op.State, op.UpdatedAtUnixMs = "order-seq", relocation.OpAborted, op.StartedAtUnixMs
		require.NoError(t, store.PutOperation(ctx, op))
	}
	ops, err := store.Operations(ctx, "order-seq")
	require.NoError(t, err)
	ids := make([]string, len(ops))
	for i, op := range ops {
		ids[i] = op.ID
	}
	require.Equal(t, []string{"op-b", "op-c", "op-a"}, ids)

	none, err := store.Operations(ctx, "order-none")
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestKeysCarryHashTagAndPrefix(t *testing.T) {
	store, rdb, _ := newStore(t)
	ctx := testCtx(t)
	require.NoError(t, store.SaveFirst(ctx, "order-k", []byte("env")))
	require.NoError(t, store.PutOperation(ctx, relocation.Operation{
		ID: "op-k", OrderID: "order-k", State: relocation.OpMoving, StartedAtUnixMs: 5, UpdatedAtUnixMs: 5,
	}))

	var keys []string
	iter := rdb.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	require.NoError(t, iter.Err())
	t.Logf("keys: %v", keys)
	require.ElementsMatch(t, []string{
		"sm:rel:envelope:{order-k}",
		"sm:rel:op:{order-k}:op-k",
		"sm:rel:ops:{order-k}",
		"sm:rel:opid:{op-k}",
	}, keys)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "sm:rel:"), k)
		require.False(t, strings.HasPrefix(k, "sm:loc:"), "%s is in the Location Store keyspace", k)
		if strings.Contains(k, "order-k") {
			require.Equal(t, "order-k", hashTag(k), "per-order key %s must hash by its order", k)
		}
	}
}

// hashTag is the part of a key Redis Cluster hashes: the text between the
// first '{' and the next '}', when not empty.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

func TestCustomKeyPrefix(t *testing.T) {
	srv := redisserver.ForTest(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := testCtx(t)
	store := relocation.New(relocation.Config{Client: rdb, KeyPrefix: "tenant1:rel:"})
	require.NoError(t, store.SaveFirst(ctx, "order-p", []byte("env")))
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"tenant1:rel:envelope:{order-p}"}, keys)
}

func TestNewRefusesLocationKeyspace(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { _ = rdb.Close() })
	require.Panics(t, func() { relocation.New(relocation.Config{Client: rdb, KeyPrefix: "sm:loc:"}) })
	require.Panics(t, func() { relocation.New(relocation.Config{Client: rdb, KeyPrefix: "sm:loc:rel:"}) })
	require.Panics(t, func() { relocation.New(relocation.Config{}) })
	require.NotPanics(t, func() { relocation.New(relocation.Config{Client: rdb}) })
}

func TestInvalidIDs(t *testing.T) {
	store, rdb, _ := newStore(t)
	ctx := testCtx(t)
	for _, id := range []string{"", "a{b", "a}b", "{x}"} {
		require.ErrorIs(t, store.SaveFirst(ctx, id, []byte("e")), relocation.ErrInvalidID, "%q", id)
		_, err := store.LoadFirst(ctx, id)
		require.ErrorIs(t, err, relocation.ErrInvalidID, "%q", id)
		_, err = store.GetOperation(ctx, id)
		require.ErrorIs(t, err, relocation.ErrInvalidID, "%q", id)
		_, err = store.Operations(ctx, id)
		require.ErrorIs(t, err, relocation.ErrInvalidID, "%q", id)
		_, _, err = store.OpenOperation(ctx, id)
		require.ErrorIs(t, err, relocation.ErrInvalidID, "%q", id)
		require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: id, OrderID: "o", State: relocation.OpMoving}), relocation.ErrInvalidID)
		require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: id, State: relocation.OpMoving}), relocation.ErrInvalidID)
	}
	require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: "o", State: "paused"}), relocation.ErrInvalidArgument)
	require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: "o", State: relocation.OpMoving, Generation: -1}), relocation.ErrInvalidArgument)
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "refused writes must store nothing")
}

func TestRedisFailureIsUnavailable(t *testing.T) {
	store, rdb, _ := newStore(t)
	ctx := testCtx(t)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := store.LoadFirst(cancelled, "order-c")
	require.ErrorIs(t, err, relocation.ErrUnavailable)
	require.ErrorIs(t, err, context.Canceled, "the cause stays in the chain")
	require.False(t, errors.Is(err, relocation.ErrNotFound))

	require.NoError(t, rdb.Close())
	require.ErrorIs(t, store.SaveFirst(ctx, "order-c", []byte("e")), relocation.ErrUnavailable)
	require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: "order-c", State: relocation.OpMoving}), relocation.ErrUnavailable)
	_, err = store.Operations(ctx, "order-c")
	require.ErrorIs(t, err, relocation.ErrUnavailable)
}

// TestTakeoverOperationRecord: a takeover is recorded with who asked,
// which incarnation lost the order and both generations; it is repeated
// from fenced to committed, then frozen, and never turns into a relocation.
func TestTakeoverOperationRecord(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := testCtx(t)
	op := relocation.Operation{
		ID: "tk-1", OrderID: "order-tk", Kind: relocation.KindTakeover,
		Source: "workflow-a", Member: "member-a-1", Caller: "operator cli",
		Generation: 4, NewGeneration: 5, State: relocation.OpFenced,
		StartedAtUnixMs: 1_000, UpdatedAtUnixMs: 1_000,
	}
	require.NoError(t, store.PutOperation(ctx, op))
	got, err := store.GetOperation(ctx, "tk-1")
	require.NoError(t, err)
	require.Equal(t, op, got)
	require.False(t, got.State.Final(), "a fenced takeover is not done: its record may not be reset yet")
	open, ok, err := store.OpenOperation(ctx, "order-tk")
	require.NoError(t, err)
	require.True(t, ok, "a half-done takeover is found to be finished")
	require.Equal(t, "tk-1", open.ID)

	// A repeat finishes it.
	done := op
	done.State, done.UpdatedAtUnixMs = relocation.OpCommitted, 2_000
	require.NoError(t, store.PutOperation(ctx, op), "a repeat of the fenced step is harmless")
	require.NoError(t, store.PutOperation(ctx, done))
	require.NoError(t, store.PutOperation(ctx, done), "a repeated commit is harmless")
	got, err = store.GetOperation(ctx, "tk-1")
	require.NoError(t, err)
	require.Equal(t, done, got)

	again := done
	again.NewGeneration, again.Generation = 7, 6
	require.ErrorIs(t, store.PutOperation(ctx, again), relocation.ErrConflict, "a committed takeover is frozen")

	reloc := relocation.Operation{ID: "tk-2", OrderID: "order-tk", Kind: relocation.KindTakeover,
		Generation: 5, NewGeneration: 6, State: relocation.OpFenced}
	require.NoError(t, store.PutOperation(ctx, reloc))
	reloc.Kind, reloc.State = relocation.KindRelocation, relocation.OpMoving
	require.ErrorIs(t, store.PutOperation(ctx, reloc), relocation.ErrConflict, "an operation never changes its kind")
	require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "tk-3", OrderID: "order-tk", Kind: "evict", State: relocation.OpFenced}),
		relocation.ErrInvalidArgument)

	ops, err := store.Operations(ctx, "order-tk")
	require.NoError(t, err)
	require.Len(t, ops, 2)
	require.Equal(t, relocation.KindTakeover, ops[0].Kind)
}
