package relocation

import (
	"context"
	"errors"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

var (
	// ErrConfig: NewRedis was given a Config it cannot work with.
	ErrConfig = errors.New("relocation: invalid config")
	// ErrNotFound: no envelope or operation is stored under that id.
	ErrNotFound = errkind.New(errkind.NotFound, "relocation: not found")
	// ErrConflict: the write would rewrite history — a final operation
	// changing state, or an operation id reused for another order.
	ErrConflict = errors.New("relocation: conflict")
	// ErrInvalidID: an order or operation id is empty or contains a brace,
	// which would break the Redis Cluster hash tag.
	ErrInvalidID = errkind.New(errkind.InvalidArgument, "relocation: invalid id")
	// ErrInvalidArgument: a value other than an id is malformed (empty
	// envelope, unknown state, negative generation).
	ErrInvalidArgument = errors.New("relocation: invalid argument")
	// ErrUnavailable: Redis failed or the context ended; the operation may
	// be repeated.
	ErrUnavailable = errkind.New(errkind.StoreUnavailable, "relocation: store unavailable")
)

// OpState is the stage of a relocation operation. The strings equal the
// Location Store's move stages so logs and records read the same, but they
// are declared here so this store depends on nothing.
type OpState string

const (
	OpMoving          OpState = "moving"
	OpTargetActivated OpState = "target-activated"
	OpCommitted       OpState = "committed"
	OpAborted         OpState = "aborted"
	// OpFenced: a takeover raised the order's fence and is recorded, but
	// its Location record may not be reset yet; repeating the takeover
	// with the same operation id finishes it (then OpCommitted).
	OpFenced OpState = "fenced"
)

// Final reports whether the operation has ended; a final record is frozen.
func (s OpState) Final() bool { return s == OpCommitted || s == OpAborted }

func (s OpState) valid() bool {
	switch s {
	case OpMoving, OpTargetActivated, OpCommitted, OpAborted, OpFenced:
		return true
	}
	return false
}

// OpKind tells what an operation did to its order.
type OpKind string

const (
	// KindRelocation: a planned relocation of a live order, same
	// generation. It is the zero value, so records written before kinds
	// existed read as relocations.
	KindRelocation OpKind = ""
	// KindTakeover: an operator (or the takeover policy) retired a lost
	// owner's authority: fence raised past Generation, Location record
	// reset to Missing at NewGeneration.
	KindTakeover OpKind = "takeover"
)

func (k OpKind) valid() bool { return k == KindRelocation || k == KindTakeover }

// Operation is one planned relocation, or one takeover, of one order.
type Operation struct {
	ID      string
	OrderID string
	Kind    OpKind
	// Source and Target are node names (e.g. workflow-a), never addresses,
	// so a record stays meaningful after processes restart. A takeover
	// names the old owner's node as Source and no Target: the next
	// command picks the new owner.
	Source string
	Target string
	// Generation is the generation the operation found; a relocation
	// keeps it, a takeover retires it.
	Generation int64
	// NewGeneration is a takeover's generation after it: the fence and the
	// Location record stand there, and the next activation is above it.
	NewGeneration int64
	// Member is the member id (incarnation) of the owner a takeover
	// retired; Caller says who asked for the operation.
	Member string
	Caller string
	State  OpState
	Error  string
	// StartedAtUnixMs is fixed by the first write; later writes cannot
	// change it, so the order of Operations is stable.
	StartedAtUnixMs int64
	UpdatedAtUnixMs int64
}

// Store is the Relocation Store. All methods are safe for concurrent use
// and honour ctx. Unless a method says otherwise, a store that cannot be
// reached fails with ErrUnavailable (the call may be repeated), and an
// order or operation id that is empty or holds a brace with ErrInvalidID.
type Store interface {
	Envelopes
	OperationLog
}

// Envelopes keeps each order's first activation envelope as opaque bytes.
type Envelopes interface {
	// SaveFirst records envelope as the order's first activation envelope
	// unless one is already stored. A later save keeps the first and is
	// not an error: every activation may offer its envelope, and the
	// first one wins. An empty envelope fails with ErrInvalidArgument.
	SaveFirst(ctx context.Context, orderID string, envelope []byte) error
	// AddFirstEnvelope adds SaveFirst(u's order, envelope) to u, the unit
	// of work that records the order's start, to be written when u is
	// committed, with the same first-write-wins rule.
	AddFirstEnvelope(u Unit, envelope []byte) error
	// LoadFirst returns the order's first activation envelope, byte for
	// byte, or ErrNotFound.
	LoadFirst(ctx context.Context, orderID string) ([]byte, error)
}

// OperationLog keeps the records of each order's operations: planned
// relocations and takeovers. A record that reached a final state is
// frozen, so the log never rewrites history.
type OperationLog interface {
	// PutOperation creates op or updates the stored record with its
	// fields. StartedAtUnixMs is taken from the first write. It fails
	// with ErrConflict when the operation id already belongs to another
	// order, when op would change the operation's kind, or when the
	// stored record is final and op would change its state (or its
	// source, target or generation); repeating a final write unchanged
	// succeeds, so a retried commit is harmless. An unknown state or
	// kind, or a negative generation, fails with ErrInvalidArgument.
	PutOperation(ctx context.Context, op Operation) error
	// GetOperation returns the operation with that id, or ErrNotFound.
	GetOperation(ctx context.Context, id string) (Operation, error)
	// Operations returns every operation of the order, oldest first (by
	// StartedAtUnixMs, ties by id). An order without operations gives
	// none.
	Operations(ctx context.Context, orderID string) ([]Operation, error)
	// OpenOperation returns the order's latest operation that is not
	// final, of any kind, so an interrupted relocation or takeover can be
	// found and repeated to completion. ok is false when every operation
	// has ended or there is none.
	OpenOperation(ctx context.Context, orderID string) (op Operation, ok bool, err error)
}
