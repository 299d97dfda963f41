package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// Self-fencing. protoactor never tells a member that the others have
// blocked it (its own view still lists itself), so a member that was
// paused or cut off would go on serving orders that every other member
// answers Unavailable for, and that an operator may take over. It learns
// of its eviction from its own gone record instead, and stops hosting.
//
// Fencing is local: the member stops its grains and its remoting; it
// releases and relocates nothing, since handing the orders to another
// member by itself would be the automatic failover the spec forbids. Its
// records stay Ready at its member id, which is gone for good; the process
// then comes back as a new member (the caller exits and is restarted).
//
// The watch tells apart two ways of going a lease without reading the
// gone record, on the monotonic clock:
//
//   - The process did not run (SIGSTOP, a VM stall, a GC pause): the loop
//     sees a gap of more than the lease between two of its own steps.
//     While it did not run, the others may have recorded it gone and an
//     operator may have taken its orders over; it fences at once, before
//     the probe asks anything. Until the loop runs again, Suspended
//     already reports the gap, so no grain turn and no activation starts
//     in between.
//   - The process ran, but the store did not answer (a stalled or
//     restarting Redis, a black-holed network): the member suspends. It
//     activates nothing and runs no grain turn, background steps and
//     retry timers included (they are parked and re-armed), and answers
//     STORE_UNAVAILABLE; it keeps its grains and its member id. The
//     first read that answers again is of its own gone record: recorded
//     gone, it fences for good; not recorded, it serves again and fires
//     every parked step at once.
//
// Why no two owners can ever write one order, in any interleaving of a
// stall, a pause, an eviction and a takeover:
//
//   - Every event append carries the owner's fence token (its activation
//     generation) and the append script refuses a token below the
//     stream's; a takeover or any later activation raises the generation
//     before it writes, so an older owner's writes are refused from then
//     on, whatever it believes.
//   - A takeover needs the old owner recorded gone; a member recorded
//     gone that runs again reads that record (within an Interval of
//     running, or as the first read once a stalled store answers) and
//     fences itself; a paused member fences on the gap alone.
//   - A suspended member writes nothing and, when the store answers, reads
//     its gone record before any grain runs again. Should it be recorded
//     gone just after that read, its next write is refused by the fence
//     of whoever took over, and its next read of the record fences it.

// SelfFenceConfig configures (*Lookup).RunSelfFence.
type SelfFenceConfig struct {
	// Lease is how long the member may go without one successful read of
	// its gone record before it suspends (the store does not answer) or
	// fences itself (the process did not run); default 10s.
	Lease time.Duration
	// Interval between reads of the member's own gone record; default
	// 500ms. It bounds how long an evicted member goes on hosting after it
	// runs again.
	Interval time.Duration
	// StopTimeout bounds the wait for the grains to stop: a grain in the
	// middle of a turn stops once the turn returns. Default 2s.
	StopTimeout time.Duration
	// Probe, if set, is the Location Store the gone record is read
	// through: one on a client of its own, so that load on the lookup's
	// store cannot starve the probe. Nil reads through the lookup's.
	Probe location.Store
	// OnFence, if set, is told why once hosting stopped.
	OnFence func(reason error)
	// Since is when the member began to serve (its join). The watch
	// counts its first gap from it, so a process paused between the join
	// and the watch's first step fences on the gap as at any other time;
	// zero counts from the watch's start.
	Since time.Time

	// onSuspend and onResume are the watch's decisions to stop and start
	// serving again (the lookup's suspend and resume); now is the clock
	// (time.Now). Tests set them.
	onSuspend func(reason error)
	onResume  func(outage time.Duration, suspended bool)
	now       func() time.Time
}

func (c SelfFenceConfig) withDefaults() SelfFenceConfig {
	if c.Lease <= 0 {
		c.Lease = 10 * time.Second
	}
	if c.Interval <= 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.Interval > c.Lease/2 {
		c.Interval = c.Lease / 2
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 2 * time.Second
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.onSuspend == nil {
		c.onSuspend = func(error) {}
	}
	if c.onResume == nil {
		c.onResume = func(time.Duration, bool) {}
	}
	return c
}

// RunSelfFence watches this member's own gone record until ctx ends
// (nil) or the member must stop hosting: it finds itself recorded gone
// (an error wrapping ErrEvicted) or the process did not run for longer
// than cfg.Lease (ErrLeaseExpired). It then stops hosting (see
// StopHosting), calls cfg.OnFence and returns the reason. The caller must
// not let this member host again: it exits, or rejoins as a new member.
//
// A store that does not answer for longer than the lease suspends the
// member instead (Suspended) until the store answers again; see above.
func (l *Lookup) RunSelfFence(ctx context.Context, cfg SelfFenceConfig) error {
	self := l.Self()
	log := l.log.With(slog.String("member", self))
	store := cfg.Probe
	if store == nil {
		store = l.store
	}
	cfg.onSuspend = func(reason error) {
		l.suspend(reason)
		log.Error("suspended: the Location Store did not answer for longer than the lease; serving nothing, keeping every grain, until it answers",
			slog.Any("error", reason))
	}
	cfg.onResume = func(outage time.Duration, suspended bool) {
		if suspended {
			log.Warn("resumed: the Location Store answered and this member is not recorded gone; serving again",
				slog.Duration("outage", outage.Round(time.Millisecond)))
		}
		l.resume(suspended)
	}
	cfg = cfg.withDefaults()
	l.watch.start(cfg.Lease)
	defer l.watch.stop()
	bound := cfg.heartbeatBound()
	reason := watchSelf(ctx, cfg, func(c context.Context) (location.GoneMember, bool, error) {
		// One round trip reads the gone record and beats: the heartbeat
		// is what keeps observers that lost sight of this member from
		// recording it gone (gone.go). A member isolated from every API
		// withholds it, so that it is recorded gone and fences.
		g, gone, err := store.ProbeSelf(c, self, l.beatBound(bound))
		if err != nil || gone {
			return g, gone, err
		}
		return l.prunedSelf(c, store, self)
	}, log, &l.watch)
	if reason == nil {
		return nil
	}
	// Counted first: the caller exits once this returns, and a scrape
	// during the stop may be the only one to see it.
	l.metrics.fences.WithLabelValues(FenceReason(reason)).Inc()
	l.StopHosting(cfg.StopTimeout)
	if cfg.OnFence != nil {
		cfg.OnFence(reason)
	}
	return reason
}

// prunedSelf is the second half of the self-fence read: a member whose
// name it published is missing from the store was pruned
// (location.Redis.PruneMember, which removes the name before the gone
// record, so this read, made after the gone record's, sees one or the
// other) and is gone, though no gone record says so any more: a process
// paused while it was recorded gone and pruned must not serve again.
// Before the name is published nothing is read.
func (l *Lookup) prunedSelf(ctx context.Context, store location.Store, self string) (location.GoneMember, bool, error) {
	select {
	case <-l.named:
	default:
		return location.GoneMember{}, false, nil
	}
	name, err := store.MemberName(ctx, self)
	if err != nil {
		return location.GoneMember{}, false, err
	}
	if name == "" {
		return location.GoneMember{MemberID: self, Node: l.cfg.NodeName, Pruned: true}, true, nil
	}
	return location.GoneMember{}, false, nil
}

// watchSelf polls probe every cfg.Interval until ctx ends (nil) or the
// member must fence itself (the reason), suspending and resuming it
// through cfg on the way. Every step of the loop is noted in w (nil for
// none), so that Suspended sees a gap before the loop runs again.
func watchSelf(ctx context.Context, cfg SelfFenceConfig, probe func(context.Context) (location.GoneMember, bool, error), log *slog.Logger, w *watchState) error {
	// A fixed interval, not cluster/retry's backoff, even after failed
	// probes: the lease is measured in these steps, and a member that
	// backed off would stop noticing, within the lease, that it must
	// fence itself.
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	now := cfg.now
	lastOK := now()
	lastRan := lastOK
	if !cfg.Since.IsZero() && cfg.Since.Before(lastRan) {
		lastRan = cfg.Since
	}
	// ran notes that the loop is running at at; it reports the gap since
	// the last time, when it is longer than the lease.
	ran := func(at time.Time) (time.Duration, bool) {
		gap := at.Sub(lastRan)
		lastRan = at
		if w != nil {
			w.ran(at)
		}
		return gap, gap > cfg.Lease
	}
	var lastErr error
	failures := 0
	suspended := false
	// A probe must end well within the lease, so that the loop's own
	// steps stay closer together than the lease while the process runs:
	// a longer gap then means it did not.
	probeBound := min(max(cfg.Interval, time.Second), cfg.Lease/2)
	for {
		began := now()
		if gap, paused := ran(began); paused {
			return fmt.Errorf("%w: this process did not run for %s (lease %s); it may have been recorded gone meanwhile",
				ErrLeaseExpired, gap.Round(time.Millisecond), cfg.Lease)
		}
		if since := began.Sub(lastOK); !suspended && since > cfg.Lease {
			suspended = true
			cfg.onSuspend(fmt.Errorf("%w: no successful read for %s (lease %s): %v", ErrLeaseExpired,
				since.Round(time.Millisecond), cfg.Lease, lastErr))
		}
		bound := probeBound
		if left := cfg.Lease - began.Sub(lastOK); !suspended && left < bound {
			bound = max(left, 10*time.Millisecond)
		}
		pctx, cancel := context.WithTimeout(ctx, bound)
		g, gone, err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if gap, paused := ran(now()); paused {
			// The read began before a pause: whatever it said is older
			// than the lease.
			return fmt.Errorf("%w: this process did not run for %s (lease %s) while it read its gone record",
				ErrLeaseExpired, gap.Round(time.Millisecond), cfg.Lease)
		}
		switch {
		case err != nil:
			lastErr = err
			failures++
			if failures == 1 || failures%10 == 0 {
				log.Warn("reading this member's gone record failed; suspending once the lease runs out",
					slog.Duration("lease", cfg.Lease), slog.Duration("left", (cfg.Lease-now().Sub(lastOK)).Round(time.Millisecond)),
					slog.Int("failures", failures), slog.Bool("suspended", suspended), slog.Any("error", err))
			}
		case gone:
			if g.Pruned {
				return fmt.Errorf("%w: member %s (node %q) recorded gone and pruned: its name is no longer in the store", ErrEvicted, g.MemberID, g.Node)
			}
			return fmt.Errorf("%w: member %s (node %q) recorded gone, left at %s", ErrEvicted, g.MemberID, g.Node,
				time.UnixMilli(g.LeftAtUnixMs).UTC().Format(time.RFC3339Nano))
		default:
			if failures > 0 {
				log.Info("this member's gone record is readable again", slog.Int("failures", failures))
			}
			// After an outage shorter than the lease the grains' retries
			// fire at once too, rather than after a backoff grown through
			// it; a lone failed read is no outage.
			if suspended || failures >= outageReads {
				cfg.onResume(began.Sub(lastOK), suspended)
			}
			lastOK, lastErr, failures, suspended = began, nil, 0, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// outageReads is how many failed reads in a row make an outage whose
// end fires the grains' pending retries.
const outageReads = 3

// watchState is what the self-fence watch shares with the rest of the
// lookup: whether the member is suspended, and when the watch last ran,
// as a monotonic offset from epoch.
type watchState struct {
	// epoch is set once a watch starts; grains read it concurrently.
	epoch     atomic.Pointer[time.Time]
	lease     atomic.Int64
	lastRan   atomic.Int64
	suspended atomic.Bool
}

func (w *watchState) start(lease time.Duration) {
	w.lease.Store(0)
	w.lastRan.Store(0)
	now := time.Now()
	w.epoch.Store(&now)
	w.lease.Store(int64(lease))
}

func (w *watchState) stop() { w.lease.Store(0) }

func (w *watchState) ran(at time.Time) {
	if e := w.epoch.Load(); e != nil {
		w.lastRan.Store(int64(at.Sub(*e)))
	}
}

// paused reports whether a running watch has not stepped for longer than
// its lease: the process did not run, and the watch fences once it does.
func (w *watchState) paused() bool {
	lease := time.Duration(w.lease.Load())
	e := w.epoch.Load()
	if lease <= 0 || e == nil {
		return false
	}
	return time.Since(*e)-time.Duration(w.lastRan.Load()) > lease
}

// Suspended reports whether this member must not serve right now: its
// self-fence watch suspended it (the Location Store has not answered for
// longer than the lease), or the watch has not run for longer than the
// lease (the process was paused, and fences once the watch runs). A
// suspended member activates nothing, and its grains run no turn: they
// answer ErrStoreUnavailable and park their own work until Resumed.
func (l *Lookup) Suspended() bool { return l.watch.suspended.Load() || l.watch.paused() }

// Resumed is the message every hosted grain receives when its member
// resumes, or when the Location Store answers again after failures: a
// grain fires its parked or pending retry at once.
type Resumed struct{}

// resumeHosted asks the activator to send Resumed to every hosted grain.
type resumeHosted struct{}

func (l *Lookup) suspend(error) { l.watch.suspended.Store(true) }

func (l *Lookup) resume(bool) {
	l.watch.suspended.Store(false)
	if l.cluster != nil && l.activator != nil {
		l.cluster.ActorSystem.Root.Send(l.activator, &resumeHosted{})
	}
}

// StopHosting stops this member from hosting at once, locally: its
// activator refuses activations, its remoting stops (callers see the
// member leave and answer Unavailable, rather than get a dead letter that
// would make them repair the record), and its grains are stopped, waiting
// at most timeout. Nothing in the Location Store is touched. It cannot be
// undone.
func (l *Lookup) StopHosting(timeout time.Duration) {
	l.gone.fenced.Store(true)
	l.SetDraining(true)
	if l.cluster == nil {
		return
	}
	l.cluster.Remote.Shutdown(false)
	if l.activator == nil {
		return
	}
	// The grains are the activator's children: stopping it stops every
	// one of them first, those still opening included.
	done := make(chan error, 1)
	go func() { done <- l.cluster.ActorSystem.Root.StopFuture(l.activator).Wait() }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			l.log.Warn("stopping the grains failed", slog.Any("error", err))
		}
	case <-time.After(timeout):
		l.log.Warn("grains still stopping after the bound; going on", slog.Duration("bound", timeout))
	}
}
