package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

var (
	// ErrConfig: NewRedis was given a Config it cannot work with.
	ErrConfig = errors.New("eventstore: invalid config")
	// ErrVersionConflict: the stream's version is not the expected one.
	ErrVersionConflict = errors.New("eventstore: version conflict")
	// ErrDuplicateCommand: an event with this sourceCommandId is already in
	// the stream; nothing was appended and the caller returns the fold.
	ErrDuplicateCommand = errors.New("eventstore: source command already recorded")
	// ErrFenced: the writer's fence token is no longer the current one (a
	// newer owner activated); nothing was appended.
	ErrFenced = errors.New("eventstore: writer fenced off")
	// ErrPrecondition: a Require companion of a projected append found its
	// key not holding the required value; nothing was written.
	ErrPrecondition = errors.New("eventstore: precondition of the append failed")
	// ErrSealed: the order is sealed for the archive (Redis.Seal): no
	// Open, no append, no unit is taken for it any more. It is an
	// ErrFenced, so a writer that stops when fenced stops here too; it is
	// never a FencedOpenError, so no activation tries a higher generation.
	ErrSealed = fmt.Errorf("%w: the order is sealed for the archive", ErrFenced)
	// ErrNotSealed: a compaction of an order that is not sealed.
	ErrNotSealed = errors.New("eventstore: the order is not sealed")
	// ErrNoStream: the order has no stream and no fence.
	ErrNoStream = errors.New("eventstore: no such stream")
	// ErrCorrupt: a stored entry cannot be decoded into an Envelope.
	ErrCorrupt = errors.New("eventstore: corrupt entry")
	// ErrUnavailable: the store could not be reached.
	ErrUnavailable = errkind.New(errkind.StoreUnavailable, "eventstore: unavailable")
)

// FencedOpenError is Open's ErrFenced: the stream is fenced at Stored,
// a generation above the one asked for. It carries the stored fence so
// that an activation whose generation came from a stale record (a
// Location Store restored from an older snapshot) can move above it.
type FencedOpenError struct {
	OrderID    string
	Generation int64 // the generation Open was asked for
	Stored     Fence // the fence in force
}

func (e *FencedOpenError) Error() string {
	return fmt.Sprintf("%v: open %s with generation %d: stored fence is (%d, %d)", ErrFenced, e.OrderID, e.Generation, e.Stored.Generation, e.Stored.Epoch)
}

// Unwrap makes it ErrFenced.
func (e *FencedOpenError) Unwrap() error { return ErrFenced }

// Envelope is one stored event: the envelope fields (docs/contract.md,
// "Stored envelope") and the event body (the contract event's JSON).
type Envelope struct {
	EventID         string
	OrderID         string
	EventType       string
	Version         int64
	SourceCommandID string
	CreatedAtUnixMs int64
	Data            []byte
	// Schema is the version of Data's schema, as its writer encoded it:
	// a reader that knows that version decodes the body (ignoring fields
	// it does not know), upcasts an older one, and refuses a newer one
	// rather than fold an event with fields missing. The store records
	// it with the entry and does not interpret it. Entries written before
	// the store recorded it load as 1, the first schema; 0 on Append is
	// recorded as 1.
	Schema int

	// FenceGeneration and FenceEpoch are the writer's fence the append was
	// checked against, recorded so that an invariant checker can prove no
	// event was appended under a retired generation. The store sets them;
	// Append ignores them on input. Both are 0 for entries written before
	// the store recorded fences.
	FenceGeneration int64
	FenceEpoch      int64
}

// Fence is an owner's write token. Generation rises on every cold
// activation, Epoch on every activation within a generation (relocation).
// Tokens compare lexicographically (Generation, then Epoch).
type Fence struct {
	Generation int64
	Epoch      int64
}

// Less reports whether f is older than o.
func (f Fence) Less(o Fence) bool {
	if f.Generation != o.Generation {
		return f.Generation < o.Generation
	}
	return f.Epoch < o.Epoch
}

// Store is the OrderEventStore. All methods are safe for concurrent use.
type Store interface {
	// Open makes the caller the stream's current writer and returns the
	// stream, in one atomic step. When the stream exists, or a fence was
	// raised for it (RaiseFence), the fence becomes (generation, previous
	// epoch + 1) if generation equals the stored generation, or
	// (generation, 1) if it is newer; an older generation fails with
	// ErrFenced, as a *FencedOpenError that names the stored fence. When
	// neither stream nor fence exists Open writes nothing
	// and returns (generation, 1) and no events: the first Append
	// establishes the fence.
	Open(ctx context.Context, orderID string, generation int64) (Fence, []Envelope, error)

	// Append adds events after expectedVersion, atomically: either all are
	// added with versions expectedVersion+1.. in order, or none. It fails
	// with ErrFenced if fence is not the stored token (an absent token is
	// established by this append), ErrVersionConflict if the stream's
	// version differs, ErrDuplicateCommand if any non-empty
	// SourceCommandID is already in the stream. The Version field of the
	// given envelopes is ignored and assigned by the store. Returns the new
	// stream version.
	//
	// The checks apply in that order (fence, version, source command), so
	// a fenced writer learns it is fenced before anything else, and a
	// writer at a stale version reloads before it is told about duplicates.
	// Several events of one batch may share a SourceCommandID: one command
	// can produce several events. Appending no events only runs the checks.
	Append(ctx context.Context, orderID string, expectedVersion int64, fence Fence, events []Envelope) (int64, error)

	// Load returns every event of the order in version order, or an empty
	// slice for an unknown order, each with the fence its writer held. An
	// undecodable entry fails with ErrCorrupt.
	Load(ctx context.Context, orderID string) ([]Envelope, error)

	// RaiseFence retires every writer below minGeneration, in one atomic
	// step, whether the stream exists yet or not: a stored fence older
	// than (minGeneration, 0) becomes (minGeneration, 0); one at
	// minGeneration or above is left alone. It returns the fence in force.
	// No writer ever holds epoch 0, so from then on every Append is
	// refused with ErrFenced until an Open at minGeneration or above (which
	// takes epoch 1 or a newer generation). It is the first step of a
	// takeover: the old owner can never append again, even if it is alive
	// and resumes later. Repeating it changes nothing.
	RaiseFence(ctx context.Context, orderID string, minGeneration int64) (Fence, error)
}

// Barrier makes sure an order's stream is on a replicated deployment's
// replicas before a caller acknowledges it without having written it:
// a start answered from its recorded event or its mapping, a continue or
// rebuild with nothing to write. A write in doubt (its WAIT fell short)
// followed by such an answer would otherwise acknowledge state that a
// failover can still lose, since WAIT waits only for its own
// connection's writes and a connection that wrote nothing returns at
// once. Redis implements it; the wiring hands it out only when writes
// wait for replicas, so without replication nothing is added.
type Barrier interface {
	// Barrier returns nil once every write the order's primary took
	// before it is on the configured replicas, or an error: ErrUnavailable
	// (a shortfall is one, like a write's), ErrInvalidOrderID.
	Barrier(ctx context.Context, orderID string) error
}

// SchemaReader tells which event schema an order's stream asks of its
// reader. Redis implements it.
type SchemaReader interface {
	// HighestSchema returns the highest event schema the order's stream
	// holds, which every append raises in its own step: 1 (the base
	// schema, which every build reads) for a stream whose events are all
	// of it, and for no stream at all. It reads one field and no event,
	// so that placement can choose a member that reads the order before
	// activating it. An order id that cannot name a stream fails with
	// ErrInvalidOrderID; an unreachable store with ErrUnavailable.
	HighestSchema(ctx context.Context, orderID string) (int, error)
}

// StreamChecker is the cheap existence check of a stream, kept apart from
// Store so that a caller that needs only it (the HTTP edge, which answers
// a command on an unknown order without activating its grain) is handed
// only it. Redis implements it.
type StreamChecker interface {
	// StreamExists reports whether the order's stream holds at least one
	// event, in one read that loads none of them. A fence raised or an
	// Open made before the first event does not make a stream exist. An
	// order id that cannot name a stream fails with ErrInvalidOrderID;
	// an unreachable store with ErrUnavailable.
	StreamExists(ctx context.Context, orderID string) (bool, error)
	// Presence reports where the order's events are (TierNone, TierHot
	// or TierArchived, the last with the order's sealed record), in one
	// read that loads none of them, with StreamExists' errors.
	Presence(ctx context.Context, orderID string) (Presence, error)
}
