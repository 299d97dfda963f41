package placement

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// lockCommit is a commit under a creation lock, taking about a round
// trip: the first call consumes the lock, every later one finds it gone.
func lockCommit(calls *atomic.Int32) func(context.Context) error {
	return func(context.Context) error {
		n := calls.Add(1)
		time.Sleep(200 * time.Microsecond)
		if n == 1 {
			return nil
		}
		return location.ErrLockLost
	}
}

// The grain (EnsureReady) and the activator (resolve after the reply)
// may both ask for a commit left to the grain, at once: it is made
// exactly once, and both get its outcome, not the lock the other one
// consumed.
func TestDeferredReadyIsCommittedOnceWhoeverAsks(t *testing.T) {
	for i := 0; i < 200; i++ {
		var calls atomic.Int32
		act := &Activation{}
		act.ready.Store(newDeferredReady(location.ReadyWrites{}, lockCommit(&calls)))
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for g := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if g%2 == 0 {
					errs[g] = act.EnsureReady(context.Background())
				} else {
					errs[g] = act.ready.Load().resolve(context.Background(), true)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int32(1), calls.Load(), "one commit")
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
}

// Writes the grain took settle the commit by what it reports: landed,
// nobody commits again; otherwise the next to ask commits, a refused lock
// check included (an earlier attempt of the write may have landed). The
// activator waits for writes taken and not yet returned.
func TestDeferredReadyTakenWrites(t *testing.T) {
	for _, tc := range []struct {
		name        string
		w           ReadyWrite
		wantCommits int32
		wantErr     error
	}{
		{name: "landed", w: ReadyLanded, wantCommits: 0},
		// The commit asks again; lockCommit's first answer is the record
		// naming the grain, as when an earlier attempt of the write landed.
		{name: "lock lost", w: ReadyLockLost, wantCommits: 1},
		{name: "not written", w: ReadyNotWritten, wantCommits: 1},
		{name: "in doubt", w: ReadyInDoubt, wantCommits: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			act := &Activation{}
			d := newDeferredReady(location.ReadyWrites{Token: "tok"}, lockCommit(&calls))
			act.ready.Store(d)
			w, ok := act.TakeReady()
			require.True(t, ok)
			require.Equal(t, "tok", w.Token)
			_, ok = act.TakeReady()
			require.False(t, ok, "taken once")

			done := make(chan error, 1)
			go func() { done <- d.resolve(context.Background(), true) }()
			select {
			case err := <-done:
				t.Fatalf("the activator did not wait for the grain's report: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			act.ReadyWritten(tc.w)
			err := <-done
			if tc.wantErr != nil {
				require.True(t, errors.Is(err, tc.wantErr), "got %v", err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantCommits, calls.Load())
			require.Equal(t, err, act.EnsureReady(context.Background()), "the grain gets the same outcome, without another commit")
			require.Equal(t, tc.wantCommits, calls.Load())
		})
	}
}

// A commit the store failed settles nothing: the next to ask tries again.
func TestDeferredReadyStoreFailureIsRetried(t *testing.T) {
	var calls atomic.Int32
	down := errors.New("store down")
	act := &Activation{}
	act.ready.Store(newDeferredReady(location.ReadyWrites{}, func(context.Context) error {
		if calls.Add(1) == 1 {
			return down
		}
		return nil
	}))
	require.ErrorIs(t, act.EnsureReady(context.Background()), down)
	require.NoError(t, act.EnsureReady(context.Background()))
	require.Equal(t, int32(2), calls.Load())
	require.NoError(t, (&Activation{}).EnsureReady(context.Background()), "nothing left to the grain: nothing to do")
}

// A grain whose write may have landed is not to be stopped while the
// commit is unsettled: it took the writes and has not returned them, or
// returned them in doubt. Once the commit settles, or when the grain
// wrote nothing, it may be.
func TestDeferredReadyMayHaveWritten(t *testing.T) {
	down := errors.New("store down")
	var up atomic.Bool
	commit := func(context.Context) error {
		if !up.Load() {
			return down
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		take     bool
		returned bool
		w        ReadyWrite
		want     bool
	}{
		{name: "not taken", want: false},
		{name: "taken, in flight", take: true, want: true},
		{name: "returned not written", take: true, returned: true, w: ReadyNotWritten, want: false},
		{name: "returned in doubt", take: true, returned: true, w: ReadyInDoubt, want: true},
		{name: "returned lock lost", take: true, returned: true, w: ReadyLockLost, want: true},
		{name: "returned landed", take: true, returned: true, w: ReadyLanded, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.Store(false)
			act := &Activation{}
			d := newDeferredReady(location.ReadyWrites{}, commit)
			act.ready.Store(d)
			if tc.take {
				_, ok := act.TakeReady()
				require.True(t, ok)
			}
			if tc.returned {
				act.ReadyWritten(tc.w)
			}
			if tc.w != ReadyLanded {
				require.ErrorIs(t, act.EnsureReady(context.Background()), down, "the store is down: nothing settles")
			}
			require.Equal(t, tc.want, d.mayHaveWritten())
			up.Store(true)
			_ = act.EnsureReady(context.Background())
			require.False(t, d.mayHaveWritten(), "settled: the record says whose it is")
		})
	}
}

// A grain's carried write refused by its lock check, where an earlier
// attempt of the same write landed (a client's retry after a timeout),
// is not taken for a lost activation: the commit asks the record, which
// names the grain, and the grain goes on as the owner. Where the record
// does not name it, the lock was lost for real.
func TestDeferredReadyRefusedLockIsCheckedAgainstTheRecord(t *testing.T) {
	for _, named := range []bool{true, false} {
		var calls atomic.Int32
		act := &Activation{}
		d := newDeferredReady(location.ReadyWrites{}, func(context.Context) error {
			calls.Add(1)
			if named {
				return nil // commitReady: lock gone, record names the grain
			}
			return location.ErrLockLost
		})
		act.ready.Store(d)
		_, ok := act.TakeReady()
		require.True(t, ok)
		act.ReadyWritten(ReadyLockLost)
		require.True(t, d.mayHaveWritten(), "not stopped before the record was read")
		err := act.EnsureReady(context.Background())
		require.Equal(t, int32(1), calls.Load())
		if named {
			require.NoError(t, err, "the record names the grain: it owns the order it wrote")
		} else {
			require.ErrorIs(t, err, location.ErrLockLost)
		}
		require.False(t, d.mayHaveWritten(), "settled")
	}
}
