package grain

import (
	"errors"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

var (
	// ErrInternal: the grain failed for a reason the caller cannot act on.
	ErrInternal = errors.New("grain: internal error")
	// ErrFailedPrecondition: the operation cannot run in the order's
	// current situation (e.g. relocation with no other eligible member).
	ErrFailedPrecondition = errors.New("grain: failed precondition")
)

// reasons maps each stable reason code to the sentinel it stands for on
// the caller's side. The order matters for toWire: the first match wins.
var reasons = []struct {
	reason contracts.ErrorReason
	err    error
}{
	{contracts.ErrorReason_ERROR_REASON_NOT_FOUND, workflow.ErrNotFound},
	{contracts.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, workflow.ErrInvalidArgument},
	{contracts.ErrorReason_ERROR_REASON_CONFLICT, workflow.ErrConflict},
	{contracts.ErrorReason_ERROR_REASON_UNAVAILABLE, location.ErrUnavailable},
	{contracts.ErrorReason_ERROR_REASON_TIMEOUT, location.ErrTimeout},
	{contracts.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, ErrFailedPrecondition},
}

// toWire turns an error into the reply that crosses the grain boundary.
func toWire(err error) *contracts.WorkflowError {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return &contracts.WorkflowError{Reason: r.reason, Message: err.Error()}
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
