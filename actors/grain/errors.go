package grain

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

var (
	// ErrInternal: the grain failed for a reason the caller cannot act on.
	ErrInternal = errkind.New(errkind.Internal, "grain: internal error")
	// ErrFailedPrecondition: the operation cannot run in the order's
	// current situation (e.g. relocation with no other eligible member).
	ErrFailedPrecondition = errkind.New(errkind.FailedPrecondition, "grain: failed precondition")
	// ErrStoreUnavailable: a store the grain needs could not be reached
	// while its owner is alive. The caller cannot tell which store, and
	// need not: the answer is the same (retry soon), unlike a dead owner.
	ErrStoreUnavailable = errkind.New(errkind.StoreUnavailable, "grain: a store the order needs is unavailable")
	// ErrStoreFull: a store the grain needs refused a write at its memory
	// limit. It is also ErrStoreUnavailable, so a caller that only asks
	// "retry later?" needs no new case; its kind is StoreFull, so the
	// edge tells the operator what to fix.
	ErrStoreFull = fmt.Errorf("grain: a store the order needs is full: %w: %w", ErrStoreUnavailable, errkind.StoreFull)
)

// reasons maps each stable reason code to its error kind, to the sentinel
// it stands for on the caller's side (err, which carries that kind, so the
// caller's edge classifies a grain's error by kind alone), and to the
// grain-side errors it stands for (also).
//
// Only the sentinels listed here cross as their reason: a store's "not
// found" or "invalid id" inside a step is the grain's failure, not the
// caller's, and crosses as INTERNAL. Every store's outage carries the kind
// StoreUnavailable and crosses as STORE_UNAVAILABLE.
//
// Order matters for toWire, the first match wins: a deadline is a timeout
// even when a store wrapped it in its own Unavailable (as the HTTP edge
// decides), and a failed precondition (a relocation rolled back for want
// of a member or a store) keeps its 409 instead of becoming an outage.
var reasons = []struct {
	reason contracts.ErrorReason
	kind   errkind.Kind
	err    error
	also   []error
}{
	{reason: contracts.ErrorReason_ERROR_REASON_NOT_FOUND, kind: errkind.NotFound, err: workflow.ErrNotFound},
	{reason: contracts.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, kind: errkind.InvalidArgument, err: workflow.ErrInvalidArgument},
	{reason: contracts.ErrorReason_ERROR_REASON_KEY_REUSED, kind: errkind.KeyReused, err: workflow.ErrKeyReused},
	{reason: contracts.ErrorReason_ERROR_REASON_CONFLICT, kind: errkind.Conflict, err: workflow.ErrConflict},
	{reason: contracts.ErrorReason_ERROR_REASON_UNAVAILABLE, kind: errkind.OwnerGone, err: placement.ErrUnavailable},
	{reason: contracts.ErrorReason_ERROR_REASON_TIMEOUT, kind: errkind.Timeout, err: location.ErrTimeout,
		also: []error{context.DeadlineExceeded}},
	{reason: contracts.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, kind: errkind.FailedPrecondition, err: ErrFailedPrecondition},
	{reason: contracts.ErrorReason_ERROR_REASON_STORE_FULL, kind: errkind.StoreFull, err: ErrStoreFull,
		also: []error{errkind.StoreFull}},
	{reason: contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, kind: errkind.StoreUnavailable, err: ErrStoreUnavailable,
		also: []error{errkind.StoreUnavailable}},
	{reason: contracts.ErrorReason_ERROR_REASON_NO_ELIGIBLE_MEMBER, kind: errkind.NoEligibleMember, err: placement.ErrNoMember},
	{reason: contracts.ErrorReason_ERROR_REASON_OVERLOADED, kind: errkind.Overloaded, err: placement.ErrOverloaded,
		also: []error{errkind.Overloaded}},
	{reason: contracts.ErrorReason_ERROR_REASON_VERSION_UNSUPPORTED, kind: errkind.VersionUnsupported, err: workflow.ErrVersionUnsupported,
		also: []error{errkind.VersionUnsupported}},
}

// toWire turns an error into the reply that crosses the grain boundary.
func toWire(err error) *contracts.WorkflowError {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return &contracts.WorkflowError{Reason: r.reason, Message: err.Error()}
		}
		for _, e := range r.also {
			if errors.Is(err, e) {
				return &contracts.WorkflowError{Reason: r.reason, Message: err.Error()}
			}
		}
	}
	return &contracts.WorkflowError{Reason: contracts.ErrorReason_ERROR_REASON_INTERNAL, Message: err.Error()}
}

// fromWire turns a reply's reason code back into an error that wraps the
// reason's caller-side sentinel and so carries the reason's kind.
func fromWire(e *contracts.WorkflowError) error {
	for _, r := range reasons {
		if r.reason == e.GetReason() {
			return fmt.Errorf("%w: %s", r.err, e.GetMessage())
		}
	}
	if r := e.GetReason(); r != contracts.ErrorReason_ERROR_REASON_INTERNAL && r != contracts.ErrorReason_ERROR_REASON_UNSPECIFIED {
		// A reason this build does not know comes from a member of a
		// newer build (a rolling upgrade): the command failed, but how is
		// that build's business. It is an outage of this build, as an
		// event of a newer schema is, so the client gets a well-formed
		// 503 VERSION_UNSUPPORTED, never success and never a 500.
		return fmt.Errorf("%w: reason %d from a newer peer: %s", ErrUnknownReason, int32(r), e.GetMessage())
	}
	return fmt.Errorf("%w: %s", ErrInternal, e.GetMessage())
}

// ErrUnknownReason: a grain answered with a reason code this build does
// not know (a newer build's). It is errkind.VersionUnsupported.
var ErrUnknownReason = errkind.New(errkind.VersionUnsupported, "grain: reason code of a newer build")
