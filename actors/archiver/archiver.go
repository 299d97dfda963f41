// Package archiver owns the move of finished orders from Redis to the
// archive: after a grace period (the retention) a terminal order's
// history is written to the cold tier (eventstore/archive), and its hot
// keys leave Redis but for a compact record that keeps every answer and
// every idempotency guarantee.
//
// Each store removes its own keys through its own package (the archiver
// spells none): the event store seals and compacts the order's slot
// (eventstore.Redis.Seal, Compact), the read model, the Location Store
// and the Relocation Store add their keys to that compaction, and the
// modules compact their records by their own per-id scripts.
//
// It must not import the grain, the node, the edge, the runners, a Redis
// client or the actor runtime: the stores come in through the interfaces
// below.
package archiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Events is the event store's part: the order's stream, its seal and its
// compaction (eventstore.Redis).
type Events interface {
	// Load returns the order's events in version order.
	Load(ctx context.Context, orderID string) ([]eventstore.Envelope, error)
	// Seal stops every write to the order and returns the last fence;
	// sealing again returns the first seal's.
	Seal(ctx context.Context, orderID string, atUnixMs int64) (eventstore.Fence, error)
	// Sealed returns the order's sealed record, or ErrNotSealed.
	Sealed(ctx context.Context, orderID string) (eventstore.SealedRecord, error)
	// Compact removes the sealed order's hot keys, c's included, in one
	// step; a compacted order is left as it is.
	Compact(ctx context.Context, c *eventstore.Compaction) (eventstore.CompactOutcome, error)
}

// Records is the read model's part (readmodel.Redis).
type Records interface {
	// Get returns the order's record, or readmodel.ErrNotFound.
	Get(ctx context.Context, orderID string) (*contracts.OrderState, int64, error)
	// FinishedIn lists the terminal orders of one shard (0 to
	// readmodel.ActiveShards-1) that ended by before, oldest first, at
	// most limit.
	FinishedIn(ctx context.Context, shard int, before time.Time, limit int) ([]readmodel.FinishedOrder, error)
	// LeaseFinished takes or renews a shard's lease for owner, for ttl;
	// false when another owner holds it.
	LeaseFinished(ctx context.Context, shard int, owner string, ttl time.Duration) (bool, error)
	// UnleaseFinished gives a shard's lease back if owner holds it.
	UnleaseFinished(ctx context.Context, shard int, owner string) error
	// ForgetFinished drops the order from that list.
	ForgetFinished(ctx context.Context, orderID string) error
	// PostponeFinished lists a listed order again as ended at, so that
	// an order not ready does not hold up the ones after it.
	PostponeFinished(ctx context.Context, orderID string, at time.Time) error
	// AddCompaction adds the order's record to c, its state kept.
	AddCompaction(c *eventstore.Compaction) error
}

// Modules is commerce's part (commerce.Redis).
type Modules interface {
	// MappingOf returns the idempotency mapping filed under the order.
	MappingOf(ctx context.Context, orderID string) (commerce.Mapping, error)
	// CompactReservation and CompactPayment keep a record's first result
	// alone; a record never made is no error, an undecided one is
	// commerce.ErrNotDecided.
	CompactReservation(ctx context.Context, id string) error
	CompactPayment(ctx context.Context, id string) error
}

// Locations is the Location Store's part (location.Redis).
type Locations interface {
	// Get returns kind/id's record (its owner, for Unindex).
	Get(ctx context.Context, kind, id string) (location.Record, error)
	// AddForget adds kind/id's keys to c.
	AddForget(c location.Forgetting, kind, id string) error
	// Unindex drops kind/id from memberID's index.
	Unindex(ctx context.Context, memberID, kind, id string) error
}

// Relocations is the Relocation Store's part (relocation.Redis).
type Relocations interface {
	// AddForget adds the order's keys to c and returns its operations'
	// ids, for ForgetOperations once c is committed.
	AddForget(ctx context.Context, c relocation.Forgetting) ([]string, error)
	ForgetOperations(ctx context.Context, ids []string) error
}

// Config wires an Archiver. Every store is required.
type Config struct {
	Events      Events
	Records     Records
	Modules     Modules
	Locations   Locations
	Relocations Relocations
	Archive     archive.Store
	// Kind is the order grains' kind in the Location Store.
	Kind string
	// Owner names this archiver in the shards' leases (the member's id);
	// required.
	Owner string
	// LeaseTTL is how long a shard's lease lasts unless renewed: how long
	// the shards of an archiver that died stay untouched. Default 30 s.
	LeaseTTL time.Duration
	// Retention is the grace after an order's terminal event before it is
	// archived; it must be above 0.
	Retention time.Duration
	// HostedRecheck is how soon an order whose grain still hosts it (its
	// Location record not Missing) is taken again; default 1 min. Such
	// an order waits, sealed, until its owner passivates it.
	HostedRecheck time.Duration
	// Batch is how many candidates a pass takes; default 256.
	Batch int
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// ErrConfig: New was given a Config it cannot work with.
var ErrConfig = errors.New("archiver: invalid config")

// ErrMismatch: the archive's row does not read back as what was
// written; the order stays hot.
var ErrMismatch = errors.New("archiver: the archive does not hold what was written")

// Archiver moves finished orders past their retention to the archive.
// Its passes may run anywhere, any number at once: a pass works on the
// shards of the finished list whose lease it holds, so two archivers do
// not take the same order at once; should a lease lapse under one (a
// stalled process), every step is idempotent, and two archivers of one
// order do the work twice and agree. An archiver that dies leaves its
// shards to the others when their leases end.
type Archiver struct {
	cfg Config
	// next is the shard the next pass starts at: each pass starts one
	// further, so no shard waits behind a busy one.
	next int
	// after, nil outside tests (export_test.go), is called after each
	// step of an order's archival; an error stops the archival there, as
	// a crash of the archiver would.
	after func(step string) error
}

// New returns an Archiver, or an error wrapping ErrConfig.
func New(cfg Config) (*Archiver, error) {
	switch {
	case cfg.Events == nil || cfg.Records == nil || cfg.Modules == nil || cfg.Locations == nil || cfg.Relocations == nil || cfg.Archive == nil:
		return nil, fmt.Errorf("%w: every store is required", ErrConfig)
	case cfg.Kind == "" || cfg.Owner == "":
		return nil, fmt.Errorf("%w: Kind and Owner are required", ErrConfig)
	case cfg.Retention <= 0:
		return nil, fmt.Errorf("%w: Retention %s must be above 0", ErrConfig, cfg.Retention)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.HostedRecheck <= 0 {
		cfg.HostedRecheck = time.Minute
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Archiver{cfg: cfg}, nil
}

// Outcome of one order's archival.
type Outcome uint8

const (
	// Archived: the order's hot keys are gone and its compact record
	// stays (by this pass or an earlier one).
	Archived Outcome = iota + 1
	// Deferred: the order is not ready (a repair pending: the projection
	// behind its stream, the mapping not marked started), and is put
	// back in the list one retention later; or its grain still hosts it,
	// and it is taken again after Config.HostedRecheck.
	Deferred
	// Skipped: the list named an order without a stream; it was dropped
	// from the list.
	Skipped
)

// Pass is what one pass did. Busy counts the shards another archiver
// held.
type Pass struct {
	Candidates, Archived, Deferred, Skipped, Failed, Busy int
}

// RunOnce archives the orders past their retention, at most Batch of
// them, one after another, from the shards whose lease it takes. An
// order that fails is logged and left for the next pass; a failure of
// the archive itself (unavailable) ends the pass, which reports it.
func (a *Archiver) RunOnce(ctx context.Context) (Pass, error) {
	var p Pass
	start := a.next
	a.next = (a.next + 1) % readmodel.ActiveShards
	for i := range readmodel.ActiveShards {
		if p.Candidates >= a.cfg.Batch {
			break
		}
		if err := a.shard(ctx, (start+i)%readmodel.ActiveShards, &p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// shard works through one shard's candidates under its lease, renewed
// every third of its ttl, and gives the lease back.
func (a *Archiver) shard(ctx context.Context, shard int, p *Pass) error {
	held, err := a.cfg.Records.LeaseFinished(ctx, shard, a.cfg.Owner, a.cfg.LeaseTTL)
	if err != nil {
		return fmt.Errorf("archiver: lease shard %d: %w", shard, err)
	}
	if !held {
		p.Busy++
		return nil
	}
	defer func() {
		if err := a.cfg.Records.UnleaseFinished(context.WithoutCancel(ctx), shard, a.cfg.Owner); err != nil {
			a.cfg.Logger.Warn("shard lease not given back; it ends by itself", slog.Int("shard", shard), slog.Any("error", err))
		}
	}()
	leased := time.Now()
	cands, err := a.cfg.Records.FinishedIn(ctx, shard, a.cfg.Now().Add(-a.cfg.Retention), a.cfg.Batch-p.Candidates)
	if err != nil {
		return fmt.Errorf("archiver: candidates: %w", err)
	}
	p.Candidates += len(cands)
	for _, c := range cands {
		if time.Since(leased) > a.cfg.LeaseTTL/3 {
			if held, err = a.cfg.Records.LeaseFinished(ctx, shard, a.cfg.Owner, a.cfg.LeaseTTL); err != nil || !held {
				// Lapsed and taken, or unknown: the rest is the
				// other archiver's, or the next pass's.
				return err
			}
			leased = time.Now()
		}
		out, err := a.Archive(ctx, c.OrderID)
		switch {
		case err == nil && out == Archived:
			p.Archived++
		case err == nil && out == Skipped:
			p.Skipped++
		case err == nil:
			p.Deferred++
		case errors.Is(err, archive.ErrUnavailable) || ctx.Err() != nil:
			p.Failed++
			return err
		default:
			p.Failed++
			a.cfg.Logger.Warn("order not archived; a later pass retries", slog.String("order", c.OrderID), slog.Any("error", err))
		}
	}
	return nil
}

// Run makes passes until ctx ends: the next one at once while a pass
// found a full batch (a backlog drains at the archiver's own pace), every
// interval otherwise.
func (a *Archiver) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := a.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.cfg.Logger.Warn("archive pass ended early; the next one retries", slog.Int("archived", p.Archived), slog.Any("error", err))
		case p.Archived > 0 || p.Deferred > 0 || p.Failed > 0:
			a.cfg.Logger.Info("archive pass", slog.Int("archived", p.Archived), slog.Int("deferred", p.Deferred), slog.Int("failed", p.Failed), slog.Int("busy", p.Busy))
		}
		next := interval
		if err == nil && p.Candidates >= a.cfg.Batch {
			next = 0
		}
		t.Reset(next)
	}
}

// Archive archives one terminal order, in this order:
//
//  1. seal it (no event is appended): no owner, zombie or late step
//     writes to it afterwards, and no activation begins; an order whose
//     grain still hosts it waits (Deferred) until its owner releases it;
//  2. check that its repairs are done: the projection equals the
//     stream's fold, the mapping is started (Deferred otherwise: a sealed
//     order is still hot, and the repairs still write their own keys);
//  3. write the archive (idempotent);
//  4. read the row back and compare;
//  5. compact the module records (their own per-id scripts);
//  6. drop the entries in other slots that only the hot keys name (the
//     owner's index, the operations' index), then compact the order's
//     slot in one script: its stream, record, Location keys, envelope
//     and operations go, the sealed record stays with the final state;
//  7. drop the order from the finished list.
//
// A crash between any two leaves the order hot (up to 6) or archived
// with its compact record (from 6), and a rerun from the start finishes
// it: each step is idempotent, and from 6 on the rerun skips to 7.
func (a *Archiver) Archive(ctx context.Context, orderID string) (Outcome, error) {
	rec, err := a.cfg.Events.Sealed(ctx, orderID)
	switch {
	case err == nil && rec.Compacted():
		// A crash after the compaction: the finished-list entry is what
		// may be left.
		return Archived, a.forgetFinished(ctx, orderID)
	case err != nil && !errors.Is(err, eventstore.ErrNotSealed):
		return 0, fmt.Errorf("archiver: %s: %w", orderID, err)
	}
	now := a.cfg.Now().UnixMilli()
	fence, err := a.cfg.Events.Seal(ctx, orderID, now)
	if errors.Is(err, eventstore.ErrNoStream) {
		// Listed, but no history to archive (deleted by hand): nothing
		// to do, and nothing to take again.
		a.cfg.Logger.Warn("finished order without a stream dropped from the list", slog.String("order", orderID))
		return Skipped, a.cfg.Records.ForgetFinished(ctx, orderID)
	}
	if err != nil {
		return 0, fmt.Errorf("archiver: seal %s: %w", orderID, err)
	}
	if err := a.step("seal"); err != nil {
		return 0, err
	}
	// A grain that still hosts the order would outlive its keys, and
	// answer (and write a projection or a mapping) from memory. Once
	// sealed no activation begins (location.Config.Sealed), so the
	// order waits, sealed and hot, until its owner passivates and
	// releases it; a new owner never comes.
	loc, err := a.cfg.Locations.Get(ctx, a.cfg.Kind, orderID)
	if err != nil {
		return 0, fmt.Errorf("archiver: %s: location: %w", orderID, err)
	}
	if loc.Status != location.Missing {
		a.cfg.Logger.Debug("finished order still hosted; archived once its owner releases it", slog.String("order", orderID),
			slog.String("status", string(loc.Status)), slog.String("owner", loc.Owner))
		return Deferred, a.cfg.Records.PostponeFinished(ctx, orderID, a.cfg.Now().Add(a.cfg.HostedRecheck-a.cfg.Retention))
	}
	r, ready, err := a.record(ctx, orderID, fence)
	if err != nil {
		return 0, err
	}
	if !ready {
		if rec, err := a.cfg.Events.Sealed(ctx, orderID); err == nil && rec.Compacted() {
			// Another archiver compacted it meanwhile.
			return Archived, a.forgetFinished(ctx, orderID)
		}
		return Deferred, a.cfg.Records.PostponeFinished(ctx, orderID, a.cfg.Now())
	}
	if err := a.cfg.Archive.Put(ctx, r); err != nil {
		return 0, fmt.Errorf("archiver: write %s: %w", orderID, err)
	}
	if err := a.step("write"); err != nil {
		return 0, err
	}
	back, err := a.cfg.Archive.Get(ctx, orderID)
	if err != nil {
		return 0, fmt.Errorf("archiver: read back %s: %w", orderID, err)
	}
	if !sameRecord(r, back) {
		return 0, fmt.Errorf("%w: order %s", ErrMismatch, orderID)
	}
	if err := a.step("verify"); err != nil {
		return 0, err
	}
	// The module ids are the order's deterministic ones (the final state
	// names them only once their step succeeded): a record never made is
	// nothing to compact.
	if err := a.cfg.Modules.CompactReservation(ctx, order.ReservationID(orderID)); err != nil {
		return 0, fmt.Errorf("archiver: %s: %w", orderID, err)
	}
	if err := a.step("reservation"); err != nil {
		return 0, err
	}
	if err := a.cfg.Modules.CompactPayment(ctx, order.PaymentID(orderID)); err != nil {
		return 0, fmt.Errorf("archiver: %s: %w", orderID, err)
	}
	if err := a.step("payment"); err != nil {
		return 0, err
	}
	// The entries in other slots that only the hot keys name go first:
	// the owner's index entry (none once the grain was released, which
	// drops it) and the operations' index entries. Best-effort: a stale
	// one is dropped by whoever reads it, and a missing one for an order
	// still hot (a crash right here) is put back by the reconciler.
	if loc.Owner != "" {
		if err := a.cfg.Locations.Unindex(ctx, loc.Owner, a.cfg.Kind, orderID); err != nil {
			a.cfg.Logger.Warn("owner's index entry of an archived order left", slog.String("order", orderID), slog.Any("error", err))
		}
	}
	c := eventstore.NewCompaction(orderID, now)
	if err := a.cfg.Records.AddCompaction(c); err != nil {
		return 0, fmt.Errorf("archiver: %s: %w", orderID, err)
	}
	if err := a.cfg.Locations.AddForget(c, a.cfg.Kind, orderID); err != nil {
		return 0, fmt.Errorf("archiver: %s: %w", orderID, err)
	}
	ops, err := a.cfg.Relocations.AddForget(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("archiver: %s: %w", orderID, err)
	}
	if err := a.cfg.Relocations.ForgetOperations(ctx, ops); err != nil {
		a.cfg.Logger.Warn("operation index entries of an archived order left", slog.String("order", orderID), slog.Any("error", err))
	}
	if _, err := a.cfg.Events.Compact(ctx, c); err != nil {
		return 0, fmt.Errorf("archiver: compact %s: %w", orderID, err)
	}
	if err := a.step("compact"); err != nil {
		return 0, err
	}
	return Archived, a.forgetFinished(ctx, orderID)
}

// record is the order's archive record, read after the seal (the stream
// no longer moves), and whether its repairs are done.
func (a *Archiver) record(ctx context.Context, orderID string, fence eventstore.Fence) (archive.Record, bool, error) {
	envs, err := a.cfg.Events.Load(ctx, orderID)
	if err != nil {
		return archive.Record{}, false, fmt.Errorf("archiver: load %s: %w", orderID, err)
	}
	fold, err := workflow.Replay(orderID, envs)
	if err != nil {
		return archive.Record{}, false, fmt.Errorf("archiver: replay %s: %w", orderID, err)
	}
	if fold == nil || !readmodel.Terminal(fold.GetStatus()) {
		return archive.Record{}, false, a.notYet(orderID, "the stream is not terminal")
	}
	st, version, err := a.cfg.Records.Get(ctx, orderID)
	switch {
	case errors.Is(err, readmodel.ErrNotFound) || errors.Is(err, readmodel.ErrCorrupt):
		return archive.Record{}, false, a.notYet(orderID, "the projection is missing or damaged")
	case err != nil:
		return archive.Record{}, false, fmt.Errorf("archiver: projection of %s: %w", orderID, err)
	case version != int64(len(envs)) || !proto.Equal(st, fold):
		return archive.Record{}, false, a.notYet(orderID, "the projection is behind its stream")
	}
	m, err := a.cfg.Modules.MappingOf(ctx, orderID)
	switch {
	case errors.Is(err, commerce.ErrNotFound):
		return archive.Record{}, false, a.notYet(orderID, "no idempotency mapping under the order")
	case err != nil:
		return archive.Record{}, false, fmt.Errorf("archiver: mapping of %s: %w", orderID, err)
	case m.Status != commerce.MappingStarted:
		return archive.Record{}, false, a.notYet(orderID, "the idempotency mapping is not marked started")
	}
	final, err := readmodel.EncodeState(fold)
	if err != nil {
		return archive.Record{}, false, err
	}
	return archive.Record{
		OrderID:          orderID,
		Status:           fold.GetStatus().String(),
		Generation:       fence.Generation,
		TerminalAtUnixMs: fold.GetUpdatedAtUnixMs(),
		FinalState:       final,
		Events:           envs,
	}, true, nil
}

// defer_ logs why an order waits for a later pass; the order stays
// sealed and hot, and its repairs still write.
func (a *Archiver) notYet(orderID, why string) error {
	a.cfg.Logger.Info("order not archived yet: "+why, slog.String("order", orderID))
	return nil
}

// forgetFinished drops the order from the finished list, once its slot
// is compacted: last, so a crash before it brings the order back to a
// pass, which finds it compacted and comes here again.
func (a *Archiver) forgetFinished(ctx context.Context, orderID string) error {
	if err := a.step("forget"); err != nil {
		return err
	}
	if err := a.cfg.Records.ForgetFinished(ctx, orderID); err != nil {
		return fmt.Errorf("archiver: forget %s: %w", orderID, err)
	}
	return nil
}

func (a *Archiver) step(name string) error {
	if a.after == nil {
		return nil
	}
	return a.after(name)
}

// sameRecord compares what was written with what was read back.
func sameRecord(a, b archive.Record) bool {
	if a.OrderID != b.OrderID || a.Status != b.Status || a.Generation != b.Generation ||
		a.TerminalAtUnixMs != b.TerminalAtUnixMs || string(a.FinalState) != string(b.FinalState) || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if x.EventID != y.EventID || x.EventType != y.EventType || x.Version != y.Version ||
			x.SourceCommandID != y.SourceCommandID || x.CreatedAtUnixMs != y.CreatedAtUnixMs ||
			string(x.Data) != string(y.Data) || x.Schema != y.Schema ||
			x.FenceGeneration != y.FenceGeneration || x.FenceEpoch != y.FenceEpoch {
			return false
		}
	}
	return true
}
