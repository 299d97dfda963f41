package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// Self-fencing. protoactor never tells a member that the others have
// blocked it (its own view still lists itself), so a member that was
// paused or cut off would go on serving orders that every other member
// answers Unavailable for, and that an operator may take over. It learns
// of its eviction from its own gone record instead, and stops hosting. A
// member that cannot read the Location Store at all cannot learn it, so
// after a lease without a successful read it assumes the worst.
//
// Fencing is local: the member stops its grains and its remoting; it
// releases and relocates nothing, since handing the orders to another
// member by itself would be the automatic failover the spec forbids. Its
// records stay Ready at its member id, which is gone for good; the process
// then comes back as a new member (the caller exits and is restarted).

// SelfFenceConfig configures (*Lookup).RunSelfFence.
type SelfFenceConfig struct {
	// Lease is how long the member may go without one successful read of
	// its gone record before it fences itself; default 10s. A Location
	// Store outage (or a process pause) longer than the lease fences
	// every workflow member.
	Lease time.Duration
	// Interval between reads of the member's own gone record; default
	// 500ms. It bounds how long an evicted member goes on hosting after it
	// runs again.
	Interval time.Duration
	// StopTimeout bounds the wait for the grains to stop: a grain in the
	// middle of a turn stops once the turn returns. Default 2s.
	StopTimeout time.Duration
	// OnFence, if set, is told why once hosting stopped.
	OnFence func(reason error)
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
	return c
}

// RunSelfFence watches this member's own gone record until ctx ends
// (nil) or the member must stop hosting: it finds itself recorded gone
// (an error wrapping ErrEvicted) or could not read the Location Store for
// longer than cfg.Lease (ErrLeaseExpired). It then stops hosting (see
// StopHosting), calls cfg.OnFence and returns the reason. The caller must
// not let this member host again: it exits, or rejoins as a new member.
func (l *Lookup) RunSelfFence(ctx context.Context, cfg SelfFenceConfig) error {
	cfg = cfg.withDefaults()
	self := l.Self()
	bound := cfg.heartbeatBound()
	reason := watchSelf(ctx, cfg, func(c context.Context) (location.GoneMember, bool, error) {
		// One round trip reads the gone record and beats: the heartbeat
		// is what keeps observers that lost sight of this member from
		// recording it gone (gone.go). A member isolated from every API
		// withholds it, so that it is recorded gone and fences.
		return l.store.ProbeSelf(c, self, l.beatBound(bound))
	}, l.log.With(slog.String("member", self)))
	if reason == nil {
		return nil
	}
	l.StopHosting(cfg.StopTimeout)
	if cfg.OnFence != nil {
		cfg.OnFence(reason)
	}
	return reason
}

// watchSelf polls probe every cfg.Interval until ctx ends (nil) or the
// member must fence itself (the reason). The lease runs from the start of
// the last probe that succeeded, on the monotonic clock, which goes on
// while the process is paused: a member that resumes after more than the
// lease fences itself before it asks anything.
func watchSelf(ctx context.Context, cfg SelfFenceConfig, probe func(context.Context) (location.GoneMember, bool, error), log *slog.Logger) error {
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	lastOK := time.Now()
	var lastErr error
	failures := 0
	for {
		if since := time.Since(lastOK); since > cfg.Lease {
			return fmt.Errorf("%w: no successful read for %s (lease %s): %v", ErrLeaseExpired,
				since.Round(time.Millisecond), cfg.Lease, lastErr)
		}
		began := time.Now()
		// A probe must not outlive the lease: a hanging store is as good
		// as a down one.
		pctx, cancel := context.WithTimeout(ctx, min(cfg.Lease-time.Since(lastOK), max(cfg.Interval, time.Second)))
		g, gone, err := probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			lastErr = err
			failures++
			if failures == 1 || failures%10 == 0 {
				log.Warn("reading this member's gone record failed; fencing once the lease runs out",
					slog.Duration("lease", cfg.Lease), slog.Duration("left", (cfg.Lease-time.Since(lastOK)).Round(time.Millisecond)),
					slog.Int("failures", failures), slog.Any("error", err))
			}
		case gone:
			return fmt.Errorf("%w: member %s (node %q) recorded gone, left at %s", ErrEvicted, g.MemberID, g.Node,
				time.UnixMilli(g.LeftAtUnixMs).UTC().Format(time.RFC3339Nano))
		default:
			if failures > 0 {
				log.Info("this member's gone record is readable again", slog.Int("failures", failures))
			}
			lastOK, lastErr, failures = began, nil, 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
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
