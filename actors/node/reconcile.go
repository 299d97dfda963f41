package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// The cross-order indexes and their reconciler (issue 50, point 2).
//
// Two indexes span orders: the active index (readmodel, sorted sets
// <prefix>active:{<shard>}, the non-terminal orders the stuck-order report
// starts from) and the per-member index (cluster/location,
// <prefix>owned:<memberId>, the orders a member takeover starts from).
// Neither can share an order's hash slot, so neither can be part of an
// order's commit. The one rule for both:
//
//   - written beside the order's commit, best effort, erring towards
//     listing too much (an entry is added before or with the commit and
//     dropped only after the record stops needing it);
//   - never the truth: the report and a takeover check each entry against
//     the order's own record (the read model's, the Location record) and
//     drop entries the record contradicts;
//   - repaired by the reconciler, which rebuilds every missing entry from
//     the per-order records: a SCAN of the read model's records and one of
//     the Location records, on every master of a Redis Cluster.
//
// So an entry lost with a write (a failover, a timeout after the commit)
// is back after the next pass, and the report and a takeover find the
// order then. Every workflow member runs a pass every ReconcileEvery (its
// first at a random point of the first period, so that members started
// together spread out): with M members a lost entry is back within
// ReconcileEvery, after ReconcileEvery/M on average. A pass costs, per
// order held in Redis, one record read and one index write per index,
// plus the SCAN pages (500 keys each): about 4 commands per order; it
// reads the whole keyspace, finished orders included, until they leave
// Redis for the archive.

// DefaultReconcileEvery is a member's time between two passes. A pass
// reads every order held in Redis, one command at a time: over the 70,750
// orders of a 10-minute soak it took 25.8 s, some 11,000 commands a
// second while it ran, on a machine whose order load sent about 8,000.
// Every 30 minutes per member keeps that to a few percent of the load on
// average; lost entries are rare (a failover, a timeout after a commit).
const DefaultReconcileEvery = 30 * time.Minute

// Reconciled is one pass's outcome.
type Reconciled struct {
	// Active is how many non-terminal orders the active index holds
	// after the pass; Owned how many owned records the per-member index
	// lists.
	Active, Owned int
	Took          time.Duration
}

// ErrNoActiveIndex: the read model keeps no active index to reconcile.
var ErrNoActiveIndex = errors.New("node: the read model keeps no active index")

// ReconcileIndexes runs one pass: every missing entry of the active index
// and of the per-member index is added back from the per-order records.
// Both scans run even when the first fails; the error joins theirs.
func (s *Stores) ReconcileIndexes(ctx context.Context) (Reconciled, error) {
	began := time.Now()
	var out Reconciled
	var errActive, errOwned error
	if ai, ok := s.ReadModel.(readmodel.ActiveIndex); ok {
		out.Active, errActive = ai.RebuildActiveIndex(ctx)
		if errActive != nil {
			errActive = fmt.Errorf("reconcile the active index: %w", errActive)
		}
	} else {
		errActive = ErrNoActiveIndex
	}
	out.Owned, errOwned = s.Location.Reindex(ctx, grain.KindName)
	if errOwned != nil {
		errOwned = fmt.Errorf("reconcile the per-member index: %w", errOwned)
	}
	out.Took = time.Since(began)
	return out, errors.Join(errActive, errOwned)
}

// DefaultPruneAfter is ReconcileConfig.PruneAfter when unset: well past
// any lease, so a gone member's process has long fenced itself, or been
// killed, before its traces go.
const DefaultPruneAfter = 10 * time.Minute

// PrunedMembers is one pruning pass's outcome.
type PrunedMembers struct {
	// Gone is how many gone records the pass read; Pruned how many
	// members it pruned; Owning how many it left because a Location
	// record still names them (their orders wait for a takeover); Beats
	// how many orphan heartbeats it dropped (location.Redis.PruneOrphanBeats).
	Gone, Pruned, Owning, Beats int
}

// PruneMembers prunes every member recorded gone more than after before
// now whose orders all left it (location.Redis.PruneMember): its name,
// gone record, heartbeat and takeover index go. A failure on one member
// is joined into the error and the others are still tried.
func (s *Stores) PruneMembers(ctx context.Context, after time.Duration, now time.Time) (PrunedMembers, error) {
	var out PrunedMembers
	if s.Locations == nil {
		return out, nil
	}
	gone, err := s.Locations.Gone(ctx)
	if err != nil {
		return out, fmt.Errorf("prune members: %w", err)
	}
	out.Gone = len(gone)
	var errs []error
	for id, g := range gone {
		if now.Sub(time.UnixMilli(g.LeftAtUnixMs)) < after {
			continue
		}
		r, err := s.Locations.PruneMember(ctx, id)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("prune member %s: %w", id, err))
		case r.Pruned:
			out.Pruned++
		case r.Owns > 0:
			out.Owning++
		}
	}
	beats, err := s.Locations.PruneOrphanBeats(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("prune orphan heartbeats: %w", err))
	}
	out.Beats = beats
	return out, errors.Join(errs...)
}

// ReconcileConfig is RunReconciler's.
type ReconcileConfig struct {
	// Every is the time between two passes; 0 or less runs none.
	Every time.Duration
	// PruneAfter is how long a member stays recorded gone before a pass
	// prunes it (PruneMembers); default DefaultPruneAfter, below 0 none.
	PruneAfter time.Duration
	Logger     *slog.Logger
}

// RunReconciler runs a pass every cfg.Every until ctx ends, the first at
// a random point of the first period; each pass ends with PruneMembers. A failed pass is logged and the
// next one runs as planned: the indexes only find candidates, and the
// records stay the truth meanwhile.
func (s *Stores) RunReconciler(ctx context.Context, cfg ReconcileConfig) {
	if cfg.Every <= 0 {
		return
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	wait := time.Duration(rand.Int64N(int64(cfg.Every)))
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		r, err := s.ReconcileIndexes(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("index reconciler pass failed", slog.Any("error", err), slog.Duration("took", r.Took))
		} else {
			log.Info("index reconciler pass", slog.Int("activeOrders", r.Active), slog.Int("ownedOrders", r.Owned), slog.Duration("took", r.Took))
		}
		if cfg.PruneAfter >= 0 {
			p, err := s.PruneMembers(ctx, cmp.Or(cfg.PruneAfter, DefaultPruneAfter), time.Now())
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				log.Warn("member pruning failed", slog.Any("error", err))
			}
			if p.Pruned > 0 || p.Beats > 0 || err != nil {
				log.Info("members pruned", slog.Int("gone", p.Gone), slog.Int("pruned", p.Pruned), slog.Int("stillOwning", p.Owning),
					slog.Int("orphanHeartbeats", p.Beats))
			}
		}
		wait = cfg.Every
	}
}
