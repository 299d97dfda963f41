package placement

import (
	"context"
	"errors"
	"sync"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// deferredReady is a Ready commit an activator left to its grain
// (ReadyCarrier). The grain may take its writes once, to carry them in
// its first write (TakeReady), and returns them with what came of it
// (ReadyWritten). Otherwise the commit is made by whichever asks first,
// the grain before a write of its own (EnsureReady) or the activator once
// the first command was answered (resolve), never by both at once: the
// mutex is held across the commit, so the second finds the outcome.
type deferredReady struct {
	writes location.ReadyWrites
	commit func(context.Context) error

	mu    sync.Mutex
	taken bool
	// returned closes when the grain returned the writes it took.
	returned     chan struct{}
	returnedOnce sync.Once
	// settled: outcome is final, nil when the record names the grain,
	// location.ErrLockLost when the lock was lost. A store failure
	// settles nothing.
	settled bool
	outcome error
	// doubt: the grain's write that carried the commit has no known
	// outcome; it may have recorded the grain Ready (and its own write).
	doubt bool
}

// ReadyWrite is what came of the writes a grain took with TakeReady.
type ReadyWrite uint8

const (
	// ReadyNotWritten: no write carried them, or the store refused that
	// write before writing anything.
	ReadyNotWritten ReadyWrite = iota
	// ReadyLanded: they landed: the record names the grain.
	ReadyLanded
	// ReadyLockLost: their lock check failed, so this attempt wrote
	// nothing; an earlier attempt of the same write (a client's retry
	// after a timeout) may have, so it is settled as in doubt.
	ReadyLockLost
	// ReadyInDoubt: the write that carried them has no known outcome.
	ReadyInDoubt
)

func newDeferredReady(w location.ReadyWrites, commit func(context.Context) error) *deferredReady {
	return &deferredReady{writes: w, commit: commit, returned: make(chan struct{})}
}

func (d *deferredReady) take() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled || d.taken {
		return false
	}
	d.taken = true
	return true
}

func (d *deferredReady) written(w ReadyWrite) {
	d.mu.Lock()
	if !d.settled {
		switch w {
		case ReadyLanded:
			d.settled, d.outcome = true, nil
		case ReadyLockLost, ReadyInDoubt:
			// A refused lock check settles nothing by itself: a client
			// that retried the write after a timeout (go-redis does) sees
			// the second attempt refused by the lock the first one
			// consumed, and the first may have landed. The commit then
			// asks the record, which names the grain or not.
			d.doubt = true
		}
	}
	d.mu.Unlock()
	d.returnedOnce.Do(func() { close(d.returned) })
}

// mayHaveWritten reports whether the grain may have written anything
// while the commit is not settled: it took the writes and has not
// returned them, or the write that carried them has no known outcome.
// Such a grain must not be stopped for a commit that failed: should its
// write have landed, it is the order's recorded owner and the only one
// to drive it, and it settles the commit itself (EnsureReady).
func (d *deferredReady) mayHaveWritten() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled || !d.taken {
		return false
	}
	select {
	case <-d.returned:
		return d.doubt
	default:
		return true
	}
}

// resolve returns the settled outcome, or makes the commit. With wait, it
// first waits, up to ctx, for the grain to return writes it took: their
// outcome may settle it. A commit made while the grain's write is still
// in flight is safe all the same: whichever lands first consumes the
// lock, the other finds it gone (commitReady then asks the record).
func (d *deferredReady) resolve(ctx context.Context, wait bool) error {
	if wait {
		d.mu.Lock()
		taken := d.taken
		d.mu.Unlock()
		if taken {
			select {
			case <-d.returned:
			case <-ctx.Done():
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return d.outcome
	}
	err := d.commit(ctx)
	if err == nil || errors.Is(err, location.ErrLockLost) {
		d.settled, d.outcome = true, err
	}
	return err
}

// TakeReady hands the grain the writes that record it Ready, when its
// activator left the commit to it (ReadyCarrier) and nobody took it yet.
// The grain must then make them in the step of its first write, checked
// as location.ReadyWrites says, before it writes anything else, and
// report what came of it with ReadyWritten.
func (a *Activation) TakeReady() (location.ReadyWrites, bool) {
	d := a.ready.Load()
	if d == nil || !d.take() {
		return location.ReadyWrites{}, false
	}
	return d.writes, true
}

// ReadyWritten reports what came of the writes TakeReady handed over.
// Landed settles the commit. Not written, lock lost or in doubt hands it
// back: the activator makes it before it answers, or the grain's next
// EnsureReady does, whichever asks first. A commit after a write in doubt
// finds the lock consumed if the write landed, and counts as made when
// the record names the grain. A grain whose write is in doubt stays up
// should that commit fail, and makes it before its next write.
func (a *Activation) ReadyWritten(w ReadyWrite) {
	if d := a.ready.Load(); d != nil {
		d.written(w)
	}
}

// EnsureReady is for a grain about to write anything but the step that
// TakeReady's writes ride in: it returns nil once the record names the
// grain Ready. A commit left to the grain and not settled yet is made now
// (or, should the activator be making it, its outcome waited for); a
// grain whose activator made the commit before delivering anything has
// nothing to wait for. location.ErrLockLost means the record does not
// name the grain and never will, so nothing the grain wrote landed: it
// must leave without writing. Any other error settles nothing.
func (a *Activation) EnsureReady(ctx context.Context) error {
	d := a.ready.Load()
	if d == nil {
		return nil
	}
	return d.resolve(ctx, false)
}
