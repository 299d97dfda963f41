// Package relocationtest is the behavioural contract of relocation.Store,
// runnable against any implementation: first envelopes (first write wins,
// bytes kept exactly) and operation records (lifecycle, frozen final
// records, order of operations, open operations, takeover records).
//
// It depends only on relocation, the standard library and testify; an
// implementation's own tests supply the store.
package relocationtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
)

// RunContract runs the Store contract as subtests. newStore is called once
// per subtest and must return an empty store (or one whose keys no other
// subtest sees).
func RunContract(t *testing.T, newStore func(t *testing.T) relocation.Store) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s relocation.Store)
	}{
		{"SaveFirstConcurrentFirstWriteWins", testSaveFirstConcurrentFirstWriteWins},
		{"SaveFirstKeepsBytesExactly", testSaveFirstKeepsBytesExactly},
		{"LoadFirstUnknownIsNotFound", testLoadFirstUnknownIsNotFound},
		{"OperationLifecycle", testOperationLifecycle},
		{"FinalOperationCannotGoBack", testFinalOperationCannotGoBack},
		{"OperationIDCannotChangeOrder", testOperationIDCannotChangeOrder},
		{"GetOperationUnknownIsNotFound", testGetOperationUnknownIsNotFound},
		{"OpenOperationFindsInterruptedNotCommitted", testOpenOperationFindsInterruptedNotCommitted},
		{"OperationsOldestFirst", testOperationsOldestFirst},
		{"TakeoverOperationRecord", testTakeoverOperationRecord},
		{"InvalidIDs", testInvalidIDs},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testSaveFirstKeepsBytesExactly(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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

func testLoadFirstUnknownIsNotFound(t *testing.T, store relocation.Store) {
	_, err := store.LoadFirst(ctxT(t), "order-never-seen")
	require.ErrorIs(t, err, relocation.ErrNotFound)
}

func testOperationLifecycle(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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

func testFinalOperationCannotGoBack(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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

func testOperationIDCannotChangeOrder(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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

func testGetOperationUnknownIsNotFound(t *testing.T, store relocation.Store) {
	_, err := store.GetOperation(ctxT(t), "op-never")
	require.ErrorIs(t, err, relocation.ErrNotFound)
}

func testOpenOperationFindsInterruptedNotCommitted(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)

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

func testOperationsOldestFirst(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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

// TestTakeoverOperationRecord: a takeover is recorded with who asked,
// which incarnation lost the order and both generations; it is repeated
// from fenced to committed, then frozen, and never turns into a relocation.
func testTakeoverOperationRecord(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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

// Of many concurrent first saves every one succeeds and exactly one
// envelope is kept: one of those offered, and no later save replaces it.
func testSaveFirstConcurrentFirstWriteWins(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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
	got, err := store.LoadFirst(ctx, orderID)
	require.NoError(t, err)
	require.Regexp(t, `^envelope-[0-9]{2}$`, string(got))
	require.NoError(t, store.SaveFirst(ctx, orderID, []byte("late")))
	again, err := store.LoadFirst(ctx, orderID)
	require.NoError(t, err)
	require.Equal(t, got, again, "the first envelope stays")
}

// Ids that are empty or hold a brace, and malformed values, are refused
// before anything is written.
func testInvalidIDs(t *testing.T, store relocation.Store) {
	ctx := ctxT(t)
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
	_, err := store.GetOperation(ctx, "op")
	require.ErrorIs(t, err, relocation.ErrNotFound, "a refused write stores nothing")
	ops, err := store.Operations(ctx, "o")
	require.NoError(t, err)
	require.Empty(t, ops, "a refused write stores nothing")
}
