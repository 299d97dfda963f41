// Package archive is the order event store's cold tier: a finished
// order's whole history and final state, one PostgreSQL row per order,
// written once and read back exactly as written.
//
// It owns the archive's schema (versioned migrations, embedded, applied
// when a store is opened) and its errors. What it keeps is opaque to it,
// as the hot store's bodies are: it must not import the actors, the
// cluster, the edge, the read model or the runners.
package archive

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Errors of the archive, checked with errors.Is.
var (
	// ErrNotFound: the order is not archived.
	ErrNotFound = errors.New("archive: order not archived")
	// ErrConflict: the order is archived with another record; nothing
	// was changed.
	ErrConflict = errors.New("archive: order archived with another history")
	// ErrUnavailable: the archive did not answer (unreachable, stalled
	// past the call's timeout, shutting down); the call may or may not
	// have been applied, and repeating it is safe.
	// Its kind is errkind.StoreUnavailable: an API answers it 503
	// STORE_UNAVAILABLE.
	ErrUnavailable = errkind.New(errkind.StoreUnavailable, "archive: unavailable")
	// ErrInvalidArgument: the record or id is malformed; nothing was sent.
	ErrInvalidArgument = errors.New("archive: invalid argument")
	// ErrConfig: Open was given a Config it cannot use, or the database's
	// schema is not one this build knows.
	ErrConfig = errors.New("archive: invalid config")
)

// Record is an archived order: everything the hot store held of it that
// answers for it once it has left Redis.
type Record struct {
	OrderID string
	// Status is the terminal status, as the read model names it.
	Status string
	// Generation is the owner's generation when the order was archived.
	Generation int64
	// TerminalAtUnixMs is when the order reached its terminal status.
	TerminalAtUnixMs int64
	// FinalState is the read model's encoded record of the final fold.
	FinalState []byte
	// Events is the whole stream, versions 1 to n in order, each as
	// Load returned it (its fence included). Data must be valid UTF-8
	// (the bodies are JSON).
	Events []eventstore.Envelope
}

// Version is the stream's last version.
func (r Record) Version() int64 {
	if len(r.Events) == 0 {
		return 0
	}
	return r.Events[len(r.Events)-1].Version
}

// Store keeps archived orders.
type Store interface {
	// Put archives r unless its order is archived. Writing the same
	// record again is nil and leaves the one row; a different record for
	// an archived order is ErrConflict and changes nothing. Of concurrent
	// Puts of one order, one row results: each returns nil if its record
	// is that row's, ErrConflict otherwise. A malformed record is
	// ErrInvalidArgument.
	Put(ctx context.Context, r Record) error
	// Get returns the order's record exactly as Put wrote it, or
	// ErrNotFound.
	Get(ctx context.Context, orderID string) (Record, error)
	// Load is the read the hot store has too (eventstore.Store.Load): the
	// order's events in version order as Get returns them, and none, with
	// no error, for an order not archived.
	Load(ctx context.Context, orderID string) ([]eventstore.Envelope, error)
}

// check refuses a record that could not answer for its order.
func (r Record) check() error {
	var bad []string
	if r.OrderID == "" {
		bad = append(bad, "orderId is empty")
	}
	if r.Status == "" {
		bad = append(bad, "status is empty")
	}
	if r.Generation < 0 {
		bad = append(bad, fmt.Sprintf("generation %d is negative", r.Generation))
	}
	if r.TerminalAtUnixMs <= 0 {
		bad = append(bad, "terminal time is not set")
	}
	if len(r.FinalState) == 0 {
		bad = append(bad, "final state is empty")
	}
	if len(r.Events) == 0 {
		bad = append(bad, "no events")
	}
	for i, e := range r.Events {
		if e.Version != int64(i+1) {
			bad = append(bad, fmt.Sprintf("event %d has version %d", i+1, e.Version))
			break
		}
		if e.EventID == "" || e.EventType == "" {
			bad = append(bad, fmt.Sprintf("event %d lacks its id or type", i+1))
			break
		}
		if e.OrderID != "" && e.OrderID != r.OrderID {
			bad = append(bad, fmt.Sprintf("event %d is of order %q", i+1, e.OrderID))
			break
		}
		if !utf8.Valid(e.Data) {
			bad = append(bad, fmt.Sprintf("event %d's body is not UTF-8", i+1))
			break
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: order %q: %v", ErrInvalidArgument, r.OrderID, bad)
	}
	return nil
}
