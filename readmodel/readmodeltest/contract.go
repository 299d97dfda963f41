// Package readmodeltest is the behavioural contract of readmodel.Store, of
// readmodel.Committer and of readmodel.TerminalWatcher, runnable
// against any implementation: round trips, the version guard, deletes,
// concurrent writers, the projected append's all-or-nothing step over both
// stores, and the terminal notices of both writes (RunTerminalContract,
// with AwaitTerminal, the waiter the watcher's contract describes).
//
// It depends only on readmodel, eventstore, the contracts and testify;
// an implementation's own tests supply the stores.
package readmodeltest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// RunContract runs the Store contract as subtests. newStore is called once
// per subtest and must return an empty store (or one whose keys no other
// subtest sees).
func RunContract(t *testing.T, newStore func(t *testing.T) readmodel.Store) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s readmodel.Store)
	}{
		{"GetUnknownIsNotFound", testGetUnknown},
		{"PutGetRoundTripsEveryField", testRoundTrip},
		{"StoredStateIsACopy", testCopy},
		{"OlderVersionNeverOverwritesNewer", testOlder},
		{"EqualVersionOverwrites", testEqual},
		{"ReplaceLowersANewerProjection", testReplace},
		{"ConcurrentWritersKeepTheMaxVersion", testConcurrent},
		{"Delete", testDelete},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func state(orderID string, s contracts.OrderStatus, updated int64) *contracts.OrderState {
	return &contracts.OrderState{OrderId: orderID, Status: s, UpdatedAtUnixMs: updated}
}

// mustApply puts st at version and requires the store to take it.
func mustApply(t *testing.T, s readmodel.Store, orderID string, version int64, st *contracts.OrderState) {
	t.Helper()
	applied, err := s.Put(ctxT(t), orderID, version, st)
	require.NoError(t, err, "Put(%s, %d)", orderID, version)
	require.True(t, applied, "Put(%s, %d) must be applied", orderID, version)
}

// mustIgnore puts st at version and requires the store to keep what it
// has: the version guard refuses it.
func mustIgnore(t *testing.T, s readmodel.Store, orderID string, version int64, st *contracts.OrderState) {
	t.Helper()
	applied, err := s.Put(ctxT(t), orderID, version, st)
	require.NoError(t, err, "Put(%s, %d)", orderID, version)
	require.False(t, applied, "Put(%s, %d) must be ignored", orderID, version)
}

func mustGet(t *testing.T, s readmodel.Store, orderID string) (*contracts.OrderState, int64) {
	t.Helper()
	st, v, err := s.Get(ctxT(t), orderID)
	require.NoError(t, err, "Get(%s)", orderID)
	return st, v
}

func requireState(t *testing.T, want, got *contracts.OrderState, msg string) {
	t.Helper()
	require.True(t, proto.Equal(want, got), "%s: got %v, want %v", msg, got, want)
}

func testGetUnknown(t *testing.T, s readmodel.Store) {
	_, _, err := s.Get(ctxT(t), "nobody")
	require.ErrorIs(t, err, readmodel.ErrNotFound)
}

func testRoundTrip(t *testing.T, s readmodel.Store) {
	full := &contracts.OrderState{
		OrderId:           "o-full",
		Status:            contracts.OrderStatus_Failed,
		ShippingAddressId: proto.String("addr-1"),
		ReservationId:     proto.String("res-1"),
		PaymentId:         proto.String("pay-1"),
		Amount:            proto.Int64(1<<62 + 7), // beyond float64 precision
		Currency:          proto.String("EUR"),
		Reason:            proto.String("PAYMENT_DECLINED"),
		UpdatedAtUnixMs:   1_700_000_000_123,
	}
	mustApply(t, s, "o-full", 7, full)
	got, v := mustGet(t, s, "o-full")
	require.EqualValues(t, 7, v)
	requireState(t, full, got, "full state")

	// Unset optional fields stay unset, and zero-valued ones stay set.
	sparse := &contracts.OrderState{OrderId: "o-sparse", Status: contracts.OrderStatus_Created, Amount: proto.Int64(0)}
	mustApply(t, s, "o-sparse", 1, sparse)
	got, _ = mustGet(t, s, "o-sparse")
	require.Nil(t, got.ShippingAddressId)
	require.Nil(t, got.Reason)
	require.NotNil(t, got.Amount)
	require.Zero(t, *got.Amount)
}

func testCopy(t *testing.T, s readmodel.Store) {
	in := state("o1", contracts.OrderStatus_Created, 1)
	mustApply(t, s, "o1", 1, in)
	in.Status = contracts.OrderStatus_Failed
	got, _ := mustGet(t, s, "o1")
	require.Equal(t, contracts.OrderStatus_Created, got.GetStatus(), "changing the caller's state after Put changed the record")
	got.Status = contracts.OrderStatus_Confirmed
	again, _ := mustGet(t, s, "o1")
	require.Equal(t, contracts.OrderStatus_Created, again.GetStatus(), "changing a returned state changed the record")
}

func testOlder(t *testing.T, s readmodel.Store) {
	mustApply(t, s, "o1", 5, state("o1", contracts.OrderStatus_Created, 5))
	mustIgnore(t, s, "o1", 4, state("o1", contracts.OrderStatus_Created, 4))
	mustIgnore(t, s, "o1", 0, state("o1", contracts.OrderStatus_Created, 0))
	got, v := mustGet(t, s, "o1")
	require.EqualValues(t, 5, v)
	require.EqualValues(t, 5, got.UpdatedAtUnixMs, "a refused Put wrote its state")
	mustApply(t, s, "o1", 6, state("o1", contracts.OrderStatus_Created, 6))
	got, v = mustGet(t, s, "o1")
	require.EqualValues(t, 6, v)
	require.EqualValues(t, 6, got.UpdatedAtUnixMs)
}

// A projection ahead of its stream is lowered by Replace, and Put's guard
// holds again from the lowered version on.
func testReplace(t *testing.T, s readmodel.Store) {
	ctx := ctxT(t)
	mustApply(t, s, "o1", 4, state("o1", contracts.OrderStatus_Confirmed, 40))
	lowered := state("o1", contracts.OrderStatus_InventoryReserved, 20)
	require.NoError(t, s.Replace(ctx, "o1", 2, lowered))
	got, v := mustGet(t, s, "o1")
	require.EqualValues(t, 2, v)
	requireState(t, lowered, got, "lowered to the stream's version")
	mustIgnore(t, s, "o1", 1, state("o1", contracts.OrderStatus_Created, 10))
	mustApply(t, s, "o1", 3, state("o1", contracts.OrderStatus_PaymentAuthorized, 30))
	require.NoError(t, s.Replace(ctx, "o2", 1, state("o2", contracts.OrderStatus_Created, 1)), "replacing nothing stores it")
	_, v = mustGet(t, s, "o2")
	require.EqualValues(t, 1, v)
}

func testEqual(t *testing.T, s readmodel.Store) {
	mustApply(t, s, "o1", 3, state("o1", contracts.OrderStatus_Created, 100))
	repaired := state("o1", contracts.OrderStatus_Created, 200)
	repaired.Reason = proto.String("rebuilt")
	mustApply(t, s, "o1", 3, repaired)
	got, v := mustGet(t, s, "o1")
	require.EqualValues(t, 3, v)
	requireState(t, repaired, got, "rebuilt at the stored version")
}

func testConcurrent(t *testing.T, s readmodel.Store) {
	const (
		writers = 50
		puts    = 20
	)
	ctx := ctxT(t)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		maxV  int64
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			<-start
			for range puts {
				v := rng.Int64N(10_000)
				// The state carries its version so a torn write would show.
				if _, err := s.Put(ctx, "race", v, state("race", contracts.OrderStatus_Created, v)); err != nil {
					t.Errorf("writer %d: Put(%d): %v", w, v, err)
					return
				}
				mu.Lock()
				maxV = max(maxV, v)
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	got, v := mustGet(t, s, "race")
	require.Equal(t, maxV, v, "after %d concurrent puts", writers*puts)
	require.Equal(t, maxV, got.UpdatedAtUnixMs, "the record's state is not the one of its version")
	// The record stays at maxV: every lower version is refused now.
	mustIgnore(t, s, "race", maxV-1, state("race", contracts.OrderStatus_Created, maxV-1))
	t.Logf("final version %d", v)
}

func testDelete(t *testing.T, s readmodel.Store) {
	mustApply(t, s, "o1", 9, state("o1", contracts.OrderStatus_Created, 9))
	require.NoError(t, s.Delete(ctxT(t), "o1"))
	_, _, err := s.Get(ctxT(t), "o1")
	require.ErrorIs(t, err, readmodel.ErrNotFound)
	require.NoError(t, s.Delete(ctxT(t), "o1"), "deleting an absent record")
	// With the record gone, a lower version is accepted again.
	mustApply(t, s, "o1", 1, state("o1", contracts.OrderStatus_Created, 1))
}

// Projected are the stores a Committer writes, as its contract suite
// needs them: the committer and, to read what it wrote and to set up
// records, the event store and the read model it writes to.
type Projected struct {
	Append    readmodel.Committer
	Events    eventstore.Store
	ReadModel readmodel.Store
}

// RunProjectedAppendContract runs the Committer contract, for units of
// events alone, as
// subtests; newStores is called once per subtest and must return empty
// stores (or ones whose keys no other subtest sees).
func RunProjectedAppendContract(t *testing.T, newStores func(t *testing.T) Projected) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, p Projected)
	}{
		{"RecordsTheEventsAndTheReadModelsRecord", testProjectedRecords},
		{"BatchProjectsTheNewVersion", testProjectedBatch},
		{"NewerRecordIsKeptAndTheAppendStands", testProjectedGuard},
		{"RefusedAppendWritesNothing", testProjectedRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStores(t)) })
	}
}

func envs(orderID string, ids ...string) []eventstore.Envelope {
	out := make([]eventstore.Envelope, 0, len(ids))
	for _, id := range ids {
		out = append(out, eventstore.Envelope{EventID: id, OrderID: orderID, EventType: "X", SourceCommandID: "cmd-" + id,
			CreatedAtUnixMs: 1, Data: []byte(`{"id":"` + id + `"}`)})
	}
	return out
}

func open(t *testing.T, p Projected, orderID string) eventstore.Fence {
	t.Helper()
	f, evs, err := p.Events.Open(ctxT(t), orderID, 1)
	require.NoError(t, err)
	require.Empty(t, evs)
	return f
}

func loadIDs(t *testing.T, p Projected, orderID string) []string {
	t.Helper()
	evs, err := p.Events.Load(ctxT(t), orderID)
	require.NoError(t, err)
	ids := []string{}
	for i, e := range evs {
		require.EqualValues(t, i+1, e.Version)
		ids = append(ids, e.EventID)
	}
	return ids
}

func testProjectedRecords(t *testing.T, p Projected) {
	ctx := ctxT(t)
	f := open(t, p, "o1")
	created := state("o1", contracts.OrderStatus_Created, 5)
	v, err := Commit(ctx, p.Append, "o1", 0, f, envs("o1", "e1"), created)
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	require.Equal(t, []string{"e1"}, loadIDs(t, p, "o1"))
	got, gv := mustGet(t, p.ReadModel, "o1")
	require.EqualValues(t, 1, gv, "the record is the projection of the new version")
	requireState(t, created, got, "projected record")

	reserved := state("o1", contracts.OrderStatus_InventoryReserved, 6)
	v, err = Commit(ctx, p.Append, "o1", 1, f, envs("o1", "e2"), reserved)
	require.NoError(t, err)
	require.EqualValues(t, 2, v)
	got, gv = mustGet(t, p.ReadModel, "o1")
	require.EqualValues(t, 2, gv)
	requireState(t, reserved, got, "second projected record")
}

func testProjectedBatch(t *testing.T, p Projected) {
	f := open(t, p, "o1")
	st := state("o1", contracts.OrderStatus_InventoryReserved, 7)
	v, err := Commit(ctxT(t), p.Append, "o1", 0, f, envs("o1", "e1", "e2", "e3"), st)
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	require.Equal(t, []string{"e1", "e2", "e3"}, loadIDs(t, p, "o1"))
	_, gv := mustGet(t, p.ReadModel, "o1")
	require.EqualValues(t, 3, gv)
}

func testProjectedGuard(t *testing.T, p Projected) {
	f := open(t, p, "o1")
	newer := state("o1", contracts.OrderStatus_Confirmed, 9)
	mustApply(t, p.ReadModel, "o1", 7, newer)
	v, err := Commit(ctxT(t), p.Append, "o1", 0, f, envs("o1", "e1"), state("o1", contracts.OrderStatus_Created, 1))
	require.NoError(t, err, "a record the guard refuses is no error")
	require.EqualValues(t, 1, v)
	require.Equal(t, []string{"e1"}, loadIDs(t, p, "o1"), "the append stands")
	got, gv := mustGet(t, p.ReadModel, "o1")
	require.EqualValues(t, 7, gv)
	requireState(t, newer, got, "the newer record")

	// Equal versions overwrite, as Put does.
	require.NoError(t, p.ReadModel.Delete(ctxT(t), "o1"))
	mustApply(t, p.ReadModel, "o1", 2, state("o1", contracts.OrderStatus_Created, 1))
	at2 := state("o1", contracts.OrderStatus_InventoryReserved, 2)
	_, err = Commit(ctxT(t), p.Append, "o1", 1, f, envs("o1", "e2"), at2)
	require.NoError(t, err)
	got, gv = mustGet(t, p.ReadModel, "o1")
	require.EqualValues(t, 2, gv)
	requireState(t, at2, got, "the projection at the stored version")
}

func testProjectedRefused(t *testing.T, p Projected) {
	f := open(t, p, "o1")
	created := state("o1", contracts.OrderStatus_Created, 1)
	_, err := Commit(ctxT(t), p.Append, "o1", 0, f, envs("o1", "e1"), created)
	require.NoError(t, err)
	require.NoError(t, p.ReadModel.Delete(ctxT(t), "o1"))

	later := state("o1", contracts.OrderStatus_InventoryReserved, 2)
	for _, tc := range []struct {
		name     string
		expected int64
		fence    eventstore.Fence
		events   []eventstore.Envelope
		want     error
	}{
		{"stale version", 0, f, envs("o1", "e2"), eventstore.ErrVersionConflict},
		{"wrong fence", 1, eventstore.Fence{Generation: f.Generation, Epoch: f.Epoch + 1}, envs("o1", "e2"), eventstore.ErrFenced},
		{"recorded source command", 1, f, envs("o1", "e1"), eventstore.ErrDuplicateCommand},
	} {
		_, err := Commit(ctxT(t), p.Append, "o1", tc.expected, tc.fence, tc.events, later)
		require.ErrorIs(t, err, tc.want, tc.name)
		_, _, err = p.ReadModel.Get(ctxT(t), "o1")
		require.True(t, errors.Is(err, readmodel.ErrNotFound), "%s: a refused append wrote the record (Get: %v)", tc.name, err)
		require.Equal(t, []string{"e1"}, loadIDs(t, p, "o1"), tc.name)
	}
}

// Commit commits a unit of events alone through c, with the projection
// of state, and returns the stream's new version: the shape of a step's
// write, for tests that need one.
func Commit(ctx context.Context, c readmodel.Committer, orderID string, expected int64, f eventstore.Fence, evs []eventstore.Envelope, state *contracts.OrderState) (int64, error) {
	out, err := c.Commit(ctx, eventstore.NewUnit(orderID, expected, f, evs), state)
	return out.Version, err
}
