package grain

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

var (
	// ErrInternal: the grain failed for a reason the caller cannot act on.
	ErrInternal = errors.New("grain: internal error")
	// ErrFailedPrecondition: the operation cannot run in the order's
	// current situation (e.g. relocation with no other eligible member).
	ErrFailedPrecondition = errors.New("grain: failed precondition")
	// ErrStoreUnavailable: a store the grain needs could not be reached
	// while its owner is alive. The caller cannot tell which store, and
	// need not: the answer is the same (retry soon), unlike a dead owner.
	ErrStoreUnavailable = errors.New("grain: a store the order needs is unavailable")
)

// reasons maps each stable reason code to the sentinel it stands for on
// the caller's side (err) and the grain-side errors it stands for (also).
// Order matters for toWire, the first match wins: a deadline is a timeout
// even when a store wrapped it in its own Unavailable (as the HTTP edge
// decides), and a failed precondition (a relocation rolled back for want
// of a member or a store) keeps its 409 instead of becoming an outage.
var reasons = []struct {
	reason contracts.ErrorReason
	err    error
	also   []error
}{
	{reason: contracts.ErrorReason_ERROR_REASON_NOT_FOUND, err: workflow.ErrNotFound},
	{reason: contracts.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, err: workflow.ErrInvalidArgument},
	{reason: contracts.ErrorReason_ERROR_REASON_CONFLICT, err: workflow.ErrConflict},
	{reason: contracts.ErrorReason_ERROR_REASON_UNAVAILABLE, err: location.ErrUnavailable},
	{reason: contracts.ErrorReason_ERROR_REASON_TIMEOUT, err: location.ErrTimeout,
		also: []error{context.DeadlineExceeded}},
	{reason: contracts.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, err: ErrFailedPrecondition},
	{reason: contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, err: ErrStoreUnavailable,
		also: []error{eventstore.ErrUnavailable, readmodel.ErrUnavailable, commerce.ErrUnavailable,
			relocation.ErrUnavailable, fixture.ErrUnavailable, location.ErrStoreUnavailable}},
	{reason: contracts.ErrorReason_ERROR_REASON_NO_ELIGIBLE_MEMBER, err: location.ErrNoMember},
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

// fromWire turns a reply's reason code back into a sentinel-wrapping error.
func fromWire(e *contracts.WorkflowError) error {
	for _, r := range reasons {
		if r.reason == e.GetReason() {
			return fmt.Errorf("%w: %s", r.err, e.GetMessage())
		}
	}
	return fmt.Errorf("%w: %s", ErrInternal, e.GetMessage())
}
