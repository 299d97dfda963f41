package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Error codes of the public contract. They never change meaning.
const (
	CodeInvalidArgument      = "INVALID_ARGUMENT"
	CodeNotFound             = "NOT_FOUND"
	CodeIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"
	CodeUnavailable          = "UNAVAILABLE"
	CodeTimeout              = "TIMEOUT"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeFailedPrecondition   = "FAILED_PRECONDITION"
	CodeInternal             = "INTERNAL"
)

var (
	// ErrInvalidArgument: the request is malformed; a *FieldError names the
	// field.
	ErrInvalidArgument = errors.New("edge: invalid argument")
	// ErrPayloadTooLarge: the body exceeds MaxBody.
	ErrPayloadTooLarge = errors.New("edge: request body too large")
	// ErrIdempotencyKeyReused: the key already stands for a different
	// request (cart, shipping address or payment method).
	ErrIdempotencyKeyReused = errors.New("edge: idempotency key reused with a different request")
	// ErrNotFound: the edge itself found nothing (unknown route, an order
	// without a stream in the evidence hooks).
	ErrNotFound = errors.New("edge: not found")
	// ErrFailedPrecondition: the operation cannot run in the order's
	// current situation.
	ErrFailedPrecondition = errors.New("edge: failed precondition")

	// errNoRoute: no handler for the method and path (including hooks
	// that are disabled); it is a kind of ErrNotFound.
	errNoRoute = fmt.Errorf("%w: no such route", ErrNotFound)
)

// FieldError is an invalid argument that names the offending field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

// Is makes every FieldError match ErrInvalidArgument.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidArgument }

func invalidField(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// apiError is the body of every error reply:
// {"error":{"code","message","field"}}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

// httpError is the one place that turns an error into a status and a
// public error. Messages are fixed per class or written by this package,
// so no internal detail (addresses, member ids, store errors) leaves the
// process; the caller logs err itself.
func httpError(err error) (int, apiError) {
	var fe *FieldError
	switch {
	case err == nil:
		return http.StatusInternalServerError, apiError{Code: CodeInternal, Message: "internal error"}
	case errors.Is(err, ErrPayloadTooLarge):
		return http.StatusRequestEntityTooLarge, apiError{Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("request body exceeds %d bytes", MaxBody)}
	case errors.As(err, &fe):
		return http.StatusBadRequest, apiError{Code: CodeInvalidArgument, Message: fe.Error(), Field: fe.Field}
	case errors.Is(err, ErrIdempotencyKeyReused):
		return http.StatusUnprocessableEntity, apiError{Code: CodeIdempotencyKeyReused,
			Message: "the idempotency key was already used with a different cart, shipping address or payment method"}
	// A deadline is checked before the store classes: the stores wrap an
	// expired context in their own Unavailable too.
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, location.ErrTimeout):
		return http.StatusGatewayTimeout, apiError{Code: CodeTimeout, Message: "the order workflow did not answer in time"}
	case errors.Is(err, errNoRoute):
		return http.StatusNotFound, apiError{Code: CodeNotFound, Message: "no such route"}
	case isAny(err, ErrNotFound, workflow.ErrNotFound, readmodel.ErrNotFound, commerce.ErrNotFound, relocation.ErrNotFound):
		return http.StatusNotFound, apiError{Code: CodeNotFound, Message: "order not found"}
	case isAny(err, ErrInvalidArgument, workflow.ErrInvalidArgument, commerce.ErrInvalidArgument,
		readmodel.ErrInvalidOrderID, eventstore.ErrInvalidOrderID, location.ErrInvalidIdentity, relocation.ErrInvalidID):
		return http.StatusBadRequest, apiError{Code: CodeInvalidArgument, Message: "the request was refused as invalid"}
	case isAny(err, ErrFailedPrecondition, grain.ErrFailedPrecondition, workflow.ErrConflict):
		return http.StatusConflict, apiError{Code: CodeFailedPrecondition,
			Message: "the operation cannot run in the order's current situation"}
	case isAny(err, location.ErrUnavailable, location.ErrStoreUnavailable, location.ErrNoMember,
		location.ErrMoveRolledBack, commerce.ErrUnavailable, readmodel.ErrUnavailable,
		eventstore.ErrUnavailable, relocation.ErrUnavailable, context.Canceled):
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Message: "the order or a store it needs is unavailable; retry later"}
	default:
		return http.StatusInternalServerError, apiError{Code: CodeInternal, Message: "internal error"}
	}
}

func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
