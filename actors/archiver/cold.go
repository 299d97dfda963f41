package archiver

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// SealedRecords is the event store's part of an archived order's answers
// (eventstore.Redis): its sealed record, and the rewrite of what it kept.
type SealedRecords interface {
	// Sealed returns the order's sealed record, or ErrNotSealed.
	Sealed(ctx context.Context, orderID string) (eventstore.SealedRecord, error)
	readmodel.KeptWriter
}

// Cold answers the questions about an archived order that need its
// history, which only the archive holds once the order is compacted: the
// history itself (an operator's timeline) and the final state replayed
// from it (rebuild-projection). It writes nothing but the sealed record's
// kept state, and that only when the replay disagrees with it: an
// archived order never gets its hot keys back, and nothing activates it.
type Cold struct {
	events  SealedRecords
	archive archive.Store
}

// ErrNotArchived: the order is not compacted; its history is still in
// Redis and its grain answers for it. Its kind is the event store's
// ErrNotSealed's.
var ErrNotArchived = fmt.Errorf("%w (not archived)", eventstore.ErrNotSealed)

// ErrArchiveDisagrees: the archive's history of an order does not end at
// the version its sealed record names (a row from another order, or a
// record compacted from a stream the archive does not hold); nothing was
// rewritten.
var ErrArchiveDisagrees = errors.New("archiver: the archive's history disagrees with the sealed record")

// NewCold returns the cold tier's answers over events and the archive.
func NewCold(events SealedRecords, arch archive.Store) (*Cold, error) {
	if events == nil || arch == nil {
		return nil, fmt.Errorf("%w: the sealed records and the archive are required", ErrConfig)
	}
	return &Cold{events: events, archive: arch}, nil
}

// History returns an archived order's sealed record and its events from
// the archive, in version order. An order that is not compacted is
// ErrNotArchived; an archive that does not answer is
// archive.ErrUnavailable (503 STORE_UNAVAILABLE at the API).
func (c *Cold) History(ctx context.Context, orderID string) (eventstore.SealedRecord, []eventstore.Envelope, error) {
	rec, err := c.compacted(ctx, orderID)
	if err != nil {
		return eventstore.SealedRecord{}, nil, err
	}
	r, err := c.archive.Get(ctx, orderID)
	if err != nil {
		return eventstore.SealedRecord{}, nil, fmt.Errorf("archived history of %s: %w", orderID, err)
	}
	if r.Version() != rec.Version {
		return eventstore.SealedRecord{}, nil, fmt.Errorf("%w: %s: the archive ends at version %d, the sealed record at %d",
			ErrArchiveDisagrees, orderID, r.Version(), rec.Version)
	}
	return rec, r.Events, nil
}

// Rebuild re-derives an archived order's final state from the archive's
// events (workflow.Replay, the same fold as the hot stream's) and makes
// it the state the sealed record keeps, rewriting that only when it
// differs; rewrote reports whether it did. Nothing else is written.
// Errors are History's, and a history that does not fold.
func (c *Cold) Rebuild(ctx context.Context, orderID string) (state *contracts.OrderState, rewrote bool, err error) {
	rec, events, err := c.History(ctx, orderID)
	if err != nil {
		return nil, false, err
	}
	state, err = workflow.Replay(orderID, events)
	if err != nil {
		return nil, false, fmt.Errorf("replay archived order %s: %w", orderID, err)
	}
	if kept, _, err := readmodel.KeptState(rec); err == nil && proto.Equal(kept, state) {
		return state, false, nil
	}
	rewrote, err = readmodel.RewriteKeptState(ctx, c.events, orderID, state)
	if err != nil {
		return nil, false, fmt.Errorf("rewrite the kept state of %s: %w", orderID, err)
	}
	return state, rewrote, nil
}

func (c *Cold) compacted(ctx context.Context, orderID string) (eventstore.SealedRecord, error) {
	rec, err := c.events.Sealed(ctx, orderID)
	switch {
	case errors.Is(err, eventstore.ErrNotSealed):
		return eventstore.SealedRecord{}, fmt.Errorf("%w: %s", ErrNotArchived, orderID)
	case err != nil:
		return eventstore.SealedRecord{}, err
	case !rec.Compacted():
		return eventstore.SealedRecord{}, fmt.Errorf("%w: %s is sealed, not compacted yet", ErrNotArchived, orderID)
	}
	return rec, nil
}
