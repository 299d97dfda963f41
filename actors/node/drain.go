package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// DrainClosedMessage is logged, with the order id, for every non-terminal
// order a drain closed because no other workflow member could take it.
// Operators search for it: those orders resume on their next command once
// a workflow member is up, and nothing sends one by itself.
const DrainClosedMessage = "drain closed non-terminal order"

// DefaultDrainParallelism is DrainConfig.Parallelism when unset.
const DefaultDrainParallelism = 32

// DefaultDrainGrainTimeout is DrainConfig.GrainTimeout when unset: above
// the grain's own turn bound, so a slow turn is reported by the grain
// rather than cut off by the drainer.
const DefaultDrainGrainTimeout = 15 * time.Second

// DrainConfig tunes the graceful stop.
type DrainConfig struct {
	// Parallelism is how many grains hand off at once. A relocation is a
	// handful of Redis round trips and a remote activation, all inside
	// the grain's turn, so one at a time thousands of grains outlast any
	// stop grace period; unbounded, they would queue on the Redis pool
	// and the target's activator and time out together.
	Parallelism int
	// GrainTimeout bounds the wait for one grain's answer.
	GrainTimeout time.Duration
	// Budget bounds the whole hand-off on top of the caller's context;
	// zero leaves it to the context. Grains not reached within it stay
	// Ready here and become Unavailable once the member is gone.
	Budget time.Duration
}

func (c DrainConfig) withDefaults() DrainConfig {
	if c.Parallelism <= 0 {
		c.Parallelism = DefaultDrainParallelism
	}
	if c.GrainTimeout <= 0 {
		c.GrainTimeout = DefaultDrainGrainTimeout
	}
	return c
}

// DrainReport counts what a drain did with the grains it found.
type DrainReport struct {
	Hosted    int
	Released  int // terminal orders, released where they stood
	Relocated int
	Closed    int // non-terminal orders with no member to take them
	NotFound  int // grains without a stream
	Left      int // grains that had already stopped on their own
	Failed    int
	// NotSent were never asked because the budget ran out first.
	NotSent int
	// HandOff is the time from the start until every grain answered,
	// before the member left the cluster.
	HandOff time.Duration
}

func (r *DrainReport) count(o grain.DrainOutcome) {
	switch o {
	case grain.DrainReleased:
		r.Released++
	case grain.DrainRelocated:
		r.Relocated++
	case grain.DrainClosed:
		r.Closed++
	case grain.DrainNotFound:
		r.NotFound++
	case grain.DrainLeft:
		r.Left++
	}
}

// Drain is the graceful stop with the default DrainConfig; see DrainWith.
func (w *Workflow) Drain(ctx context.Context) error {
	_, err := w.DrainWith(ctx, DrainConfig{})
	return err
}

// DrainWith is the graceful stop: this member stops accepting activations,
// then every grain it hosts hands its order off — a terminal order is
// released where it stands, any other is relocated to another member with
// the same generation (like a shard hand-off) or, when none is left,
// closed — and then the member leaves the cluster. Only a crash, or a
// drain cut short, leaves orders Unavailable.
func (w *Workflow) DrainWith(ctx context.Context, cfg DrainConfig) (DrainReport, error) {
	cfg = cfg.withDefaults()
	began := time.Now()
	if cfg.Budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Budget)
		defer cancel()
	}
	lookup := w.Member.Lookup
	lookup.SetDraining(true)
	var errs []error
	hosted, err := lookup.Hosted()
	if err != nil {
		errs = append(errs, fmt.Errorf("listing hosted grains: %w", err))
	}
	grains := make([]placement.HostedGrain, 0, len(hosted))
	for _, h := range hosted {
		if h.Kind == grain.KindName {
			grains = append(grains, h)
		}
	}
	req := &grain.DrainReq{NoPeer: !hasPeer(lookup)}
	root := w.Member.System.Root
	rep, grainErrs := drainGrains(ctx, grains, cfg, w.log, func(pid *actor.PID, timeout time.Duration) (grain.DrainOutcome, error) {
		return grain.Drain(root, pid, req, timeout)
	})
	rep.HandOff = time.Since(began)
	errs = append(errs, grainErrs...)
	w.log.Info("drain handed off",
		slog.Int("hosted", rep.Hosted), slog.Int("released", rep.Released), slog.Int("relocated", rep.Relocated),
		slog.Int("closed", rep.Closed), slog.Int("notFound", rep.NotFound), slog.Int("left", rep.Left),
		slog.Int("failed", rep.Failed), slog.Int("notSent", rep.NotSent),
		slog.Bool("noPeer", req.NoPeer), slog.Duration("duration", rep.HandOff))
	// This member id is gone for good (a restart is a new member), and it
	// says so before it leaves: a peer that sees it leave its topology
	// while its heartbeat is still fresh and its port still open would
	// otherwise take the loss for a partition, and an API would leave to
	// rejoin as a new member at every planned stop of a workflow member.
	// An order the drain did not hand off becomes Unavailable now rather
	// than once the heartbeat goes stale: the same answer, sooner.
	goneCtx, cancel := context.WithTimeout(context.Background(), goneOnLeaveTimeout)
	if _, err := lookup.RecordGone(goneCtx, lookup.Self(), time.Now()); err != nil {
		w.log.Warn("drain: recording this member gone before it leaves failed; peers record it once its heartbeat is stale", slog.Any("error", err))
	}
	cancel()
	w.Member.Stop()
	return rep, errors.Join(errs...)
}

// goneOnLeaveTimeout bounds the gone record a drained member writes of
// itself: one script on the Location Store.
const goneOnLeaveTimeout = 2 * time.Second

func hasPeer(l *placement.Lookup) bool {
	for _, m := range l.Eligible(grain.KindName) {
		if m.Id != l.Self() {
			return true
		}
	}
	return false
}

type drainFunc func(pid *actor.PID, timeout time.Duration) (grain.DrainOutcome, error)

// drainGrains asks every grain to hand off, at most cfg.Parallelism at
// once, and stops asking once ctx is done.
func drainGrains(ctx context.Context, grains []placement.HostedGrain, cfg DrainConfig, log *slog.Logger, drain drainFunc) (DrainReport, []error) {
	var (
		mu   sync.Mutex
		rep  = DrainReport{Hosted: len(grains)}
		errs []error
		wg   sync.WaitGroup
	)
	work := make(chan placement.HostedGrain)
	for range min(cfg.Parallelism, len(grains)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range work {
				timeout := cfg.GrainTimeout
				if dl, ok := ctx.Deadline(); ok {
					timeout = min(timeout, time.Until(dl))
				}
				if ctx.Err() != nil || timeout <= 0 {
					mu.Lock()
					rep.NotSent++
					mu.Unlock()
					continue
				}
				out, err := drain(h.PID, timeout)
				mu.Lock()
				if err != nil {
					rep.Failed++
					errs = append(errs, fmt.Errorf("order %s: %w", h.Identity, err))
				} else {
					rep.count(out)
				}
				mu.Unlock()
				switch {
				case err != nil:
					log.Warn("drain: order not handed off", slog.String("order", h.Identity), slog.Any("error", err))
				case out == grain.DrainClosed:
					log.Warn(DrainClosedMessage, slog.String("order", h.Identity), slog.Int64("generation", h.Generation))
				}
			}
		}()
	}
	sent := 0
	for _, h := range grains {
		if ctx.Err() != nil {
			break
		}
		select {
		case work <- h:
			sent++
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	rep.NotSent += len(grains) - sent
	if rep.NotSent > 0 {
		// A worker may see the deadline pass a moment before ctx reports it.
		cause := context.Cause(ctx)
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		errs = append(errs, fmt.Errorf("%d orders not asked to hand off before the drain budget ran out: %w", rep.NotSent, cause))
	}
	return rep, errs
}
