package edge

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
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
	// CodeUnauthenticated: an admin-listener request without the admin
	// bearer token (never on the public order API).
	CodeUnauthenticated = "UNAUTHENTICATED"
	// CodeMethodNotAllowed: the path is a route, but not for the
	// request's method; the reply's Allow header lists the methods it has.
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
)

// Reasons of the public contract: why a 503 or 504 happened, so a client
// can tell "retry soon" from "this order's owner is gone". Every 503 and
// 504 from httpError carries one and a Retry-After header; other replies
// carry none. They never change meaning.
const (
	// ReasonOwnerGone: the order's Ready owner has left the topology. No
	// failover: the order stays Unavailable until an operator acts, so a
	// retry only makes sense much later.
	ReasonOwnerGone = "OWNER_GONE"
	// ReasonStoreUnavailable: a store the order needs could not be
	// reached; the owner is fine and the same request may succeed soon.
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	// ReasonNoEligibleMember: no live order-workflow member can take the
	// order; it takes a member (re)joining, which takes seconds.
	ReasonNoEligibleMember = "NO_ELIGIBLE_MEMBER"
	// ReasonRelocationRolledBack: a relocation of the order failed and
	// its previous owner is Ready again; a retry reaches it.
	ReasonRelocationRolledBack = "RELOCATION_ROLLED_BACK"
	// ReasonDeadlineExceeded: the request's time ran out before the order
	// or a store answered; whether the command took effect is unknown, and
	// retrying it is safe (commands are idempotent).
	ReasonDeadlineExceeded = "DEADLINE_EXCEEDED"
	// ReasonCanceled: the request was canceled (the client went away or
	// the server is stopping) before it completed.
	ReasonCanceled = "CANCELED"
	// ReasonStarting: this API process is still waiting for its stores or
	// for its cluster member to join; it answers every route so that
	// clients retry instead of failing on a refused connection.
	ReasonStarting = "STARTING"
	// ReasonOverloaded: the process that answered had no room for the
	// request (this API's in-flight budget, or the owner's mailbox or
	// hosting cap); nothing was done, so a retry after the Retry-After
	// pause is safe. Shed at once, never after a wait.
	ReasonOverloaded = "OVERLOADED"
	// ReasonStoreFull: a store refused a write at its memory limit
	// (Redis' OOM under noeviction); nothing of the write was applied.
	// Retrying helps only once an operator frees or adds memory.
	ReasonStoreFull = "STORE_FULL"
	// ReasonOwnerUnreachable: the order's owner is still a member of the
	// cluster, but this API cannot reach it; another API may, and the
	// owner is not gone.
	ReasonOwnerUnreachable = "OWNER_UNREACHABLE"
	// ReasonVersionUnsupported: the order holds an event of a newer schema
	// than the members that were asked can read (a rolling upgrade or a
	// rollback in progress); nothing was done, and the order is served
	// again once a member of a build that reads it runs.
	ReasonVersionUnsupported = "VERSION_UNSUPPORTED"
)

// Retry-After values, in seconds. A store blip or a timeout is worth a
// quick retry; a member needs seconds to (re)join; a dead owner is not
// coming back by itself, so clients are asked not to hammer it.
const (
	retryAfterSoon     = 1
	retryAfterNoMember = 5
	retryAfterGone     = 30
)

// retryAfterOverloaded spreads shed clients over 1–3 s, so that a burst
// that was shed does not come back as one burst.
func retryAfterOverloaded() int { return 1 + rand.IntN(3) }

var (
	// ErrInvalidArgument: the request is malformed; a *FieldError names the
	// field.
	ErrInvalidArgument = errkind.New(errkind.InvalidArgument, "edge: invalid argument")
	// ErrPayloadTooLarge: the body exceeds MaxBody.
	ErrPayloadTooLarge = errors.New("edge: request body too large")
	// ErrIdempotencyKeyReused: the key already stands for a different
	// request (cart, shipping address or payment method).
	ErrIdempotencyKeyReused = errkind.New(errkind.KeyReused, "edge: idempotency key reused with a different request")
	// ErrNotFound: the edge itself found nothing (unknown route, an order
	// without a stream in the evidence hooks).
	ErrNotFound = errkind.New(errkind.NotFound, "edge: not found")
	// ErrFailedPrecondition: the operation cannot run in the order's
	// current situation.
	ErrFailedPrecondition = errkind.New(errkind.FailedPrecondition, "edge: failed precondition")
	// ErrUnauthenticated: an admin request without the right bearer token.
	ErrUnauthenticated = errors.New("edge: unauthenticated")

	// errNoRoute: no handler for the method and path (including hooks
	// that are disabled); it is a kind of ErrNotFound.
	errNoRoute = fmt.Errorf("%w: no such route", ErrNotFound)
	// errMethodNotAllowed: the path has a handler, for other methods only.
	// Not a kind of ErrNotFound: the route exists.
	errMethodNotAllowed = errors.New("edge: method not allowed")
	// errUnknownSKU: a stock report of a SKU never stocked; it is a kind
	// of ErrNotFound, answered as a SKU, not an order.
	errUnknownSKU = fmt.Errorf("%w: sku never stocked", ErrNotFound)
)

// FieldError is an invalid argument that names the offending field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

// Is makes every FieldError match ErrInvalidArgument and so its kind.
func (e *FieldError) Is(target error) bool {
	return errors.Is(ErrInvalidArgument, target)
}

func invalidField(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// apiError is one public error: what httpError decides and writeError
// sends as a problem details reply (problem), and the object the admin
// reports embed as is, {"code","message","field"?,"reason"?} (a field of
// a 200 body, not a reply of its own).
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// retryAfter is the Retry-After header in seconds (0: none). It rides
	// with the body so the status, reason and header are decided in one
	// place; it is not part of the body.
	retryAfter int
}

// ContentTypeProblem is the media type of every error reply (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// ProblemTypePrefix starts the problem type URN of every code: the type
// of a code's replies is ProblemTypePrefix followed by the code as is,
// e.g. urn:shoppingmall:problem:UNAVAILABLE. Types never change, like the
// codes they name.
const ProblemTypePrefix = "urn:shoppingmall:problem:"

// ProblemTypeBlank is the type of a reply whose code has no type of its
// own (RFC 9457's default); every code of the contract has one.
const ProblemTypeBlank = "about:blank"

// problemKind is what every reply of one code says alike.
type problemKind struct {
	Type   string
	Title  string
	Status int
}

// problemKinds lists the problem type, title and status of every code.
var problemKinds = map[string]problemKind{
	CodeInvalidArgument:      {ProblemTypePrefix + CodeInvalidArgument, "Invalid argument", http.StatusBadRequest},
	CodeNotFound:             {ProblemTypePrefix + CodeNotFound, "Not found", http.StatusNotFound},
	CodeIdempotencyKeyReused: {ProblemTypePrefix + CodeIdempotencyKeyReused, "Idempotency key reused", http.StatusUnprocessableEntity},
	CodeUnavailable:          {ProblemTypePrefix + CodeUnavailable, "Unavailable", http.StatusServiceUnavailable},
	CodeTimeout:              {ProblemTypePrefix + CodeTimeout, "Timeout", http.StatusGatewayTimeout},
	CodePayloadTooLarge:      {ProblemTypePrefix + CodePayloadTooLarge, "Payload too large", http.StatusRequestEntityTooLarge},
	CodeFailedPrecondition:   {ProblemTypePrefix + CodeFailedPrecondition, "Failed precondition", http.StatusConflict},
	CodeInternal:             {ProblemTypePrefix + CodeInternal, "Internal error", http.StatusInternalServerError},
	CodeUnauthenticated:      {ProblemTypePrefix + CodeUnauthenticated, "Unauthenticated", http.StatusUnauthorized},
	CodeMethodNotAllowed:     {ProblemTypePrefix + CodeMethodNotAllowed, "Method not allowed", http.StatusMethodNotAllowed},
}

// ProblemType is the problem type URN of code, ProblemTypeBlank for a
// code outside the contract.
func ProblemType(code string) string {
	if k, ok := problemKinds[code]; ok {
		return k.Type
	}
	return ProblemTypeBlank
}

// problem is the body of every error reply, an RFC 9457 problem details
// object: type, title, status and detail, with the contract's code,
// reason and field as extension members.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Reason string `json:"reason,omitempty"`
	Field  string `json:"field,omitempty"`
}

// newProblem is the reply body of e answered with status. A code outside
// the contract is about:blank, titled by its status.
func newProblem(status int, e apiError) problem {
	p := problem{Type: ProblemTypeBlank, Title: http.StatusText(status), Status: status, Detail: e.Message,
		Code: e.Code, Reason: e.Reason, Field: e.Field}
	if k, ok := problemKinds[e.Code]; ok {
		p.Type, p.Title = k.Type, k.Title
	}
	return p
}

// WriteProblem writes an error reply outside a Server (a process still
// starting), in the edge's one shape: a problem details body of code,
// reason and detail, and Retry-After when retryAfter > 0.
func WriteProblem(w http.ResponseWriter, status int, code, reason, detail string, retryAfter int) {
	writeProblem(w, status, apiError{Code: code, Reason: reason, Message: detail, retryAfter: retryAfter})
}

// writeProblem writes e as a problem details reply with status.
func writeProblem(w http.ResponseWriter, status int, e apiError) {
	// httpError decides Retry-After with the status; headers must be set
	// before the status line.
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	b, err := json.Marshal(newProblem(status, e))
	if err != nil { // strings and an int: never
		status, b = http.StatusInternalServerError, []byte(internalProblem)
	}
	writeBody(w, status, ContentTypeProblem, b)
}

// internalProblem is the reply when a reply cannot be encoded.
const internalProblem = `{"type":"` + ProblemTypePrefix + CodeInternal + `","title":"Internal error","status":500,` +
	`"detail":"internal error","code":"` + CodeInternal + `"}`

// httpError is the one place that turns an error into a status and a
// public error. The edge's own refusals are its sentinels; every other
// error is classified by its kind alone (errkind.Of), which the package
// that raised it gave its sentinel, so the edge needs no other package's
// sentinels. Messages are fixed per class or written by this package, so
// no internal detail (addresses, member ids, store errors) leaves the
// process; the caller logs err itself.
func httpError(err error) (int, apiError) {
	var fe *FieldError
	var sr *schemaRefused
	switch {
	case err == nil:
		return http.StatusInternalServerError, apiError{Code: CodeInternal, Message: "internal error"}
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized, apiError{Code: CodeUnauthenticated, Message: "the admin bearer token is missing or wrong"}
	case errors.Is(err, ErrPayloadTooLarge):
		return http.StatusRequestEntityTooLarge, apiError{Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("request body exceeds %d bytes", MaxBody)}
	case errors.As(err, &fe):
		return http.StatusBadRequest, apiError{Code: CodeInvalidArgument, Message: fe.Error(), Field: fe.Field}
	case errors.Is(err, errNoRoute):
		return http.StatusNotFound, apiError{Code: CodeNotFound, Message: "no such route"}
	case errors.Is(err, errMethodNotAllowed):
		return http.StatusMethodNotAllowed, apiError{Code: CodeMethodNotAllowed,
			Message: "the route does not answer this method; the Allow header lists the methods it does"}
	case errors.As(err, &sr):
		return http.StatusConflict, apiError{Code: CodeFailedPrecondition, Message: sr.msg}
	case errors.Is(err, errUnknownSKU):
		return http.StatusNotFound, apiError{Code: CodeNotFound, Message: "sku not found: it was never stocked"}
	case errors.Is(err, errOrderArchived):
		return http.StatusConflict, apiError{Code: CodeFailedPrecondition,
			Message: "the order is archived: nothing owns it and nothing activates it again; its state and history answer from its sealed record and the archive"}
	case errors.Is(err, errNoArchive):
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonStoreUnavailable,
			Message: "the order is archived: its history is in the archive, which this API is not configured with", retryAfter: retryAfterSoon}
	case errors.Is(err, errArchiveUnavailable) && errkind.Of(err) == errkind.StoreUnavailable:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonStoreUnavailable,
			Message: "the order is archived and the archive holding its history is unavailable; retry later", retryAfter: retryAfterSoon}
	}
	// Of picks one kind when err carries several: a deadline before the
	// store that wrapped it, a refusal before the outage behind it, a
	// cancellation before the store that wrapped it (the store was not at
	// fault), a dead owner before the other outages.
	switch errkind.Of(err) {
	case errkind.Timeout:
		return http.StatusGatewayTimeout, apiError{Code: CodeTimeout, Reason: ReasonDeadlineExceeded,
			Message: "the order workflow did not answer in time", retryAfter: retryAfterSoon}
	case errkind.NotFound:
		return http.StatusNotFound, apiError{Code: CodeNotFound, Message: "order not found"}
	case errkind.InvalidArgument:
		return http.StatusBadRequest, apiError{Code: CodeInvalidArgument, Message: "the request was refused as invalid"}
	case errkind.KeyReused:
		return http.StatusUnprocessableEntity, apiError{Code: CodeIdempotencyKeyReused,
			Message: "the idempotency key was already used with a different cart, shipping address or payment method"}
	case errkind.Conflict, errkind.FailedPrecondition:
		return http.StatusConflict, apiError{Code: CodeFailedPrecondition,
			Message: "the operation cannot run in the order's current situation"}
	// The outage kinds. Every one is 503 UNAVAILABLE (the spec's code for
	// a dead owner stays); the reason tells them apart.
	case errkind.Canceled:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonCanceled,
			Message: "the request was canceled before it completed", retryAfter: retryAfterSoon}
	case errkind.OwnerGone:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonOwnerGone,
			Message: "the order's owner is gone; it is not moved elsewhere automatically", retryAfter: retryAfterGone}
	case errkind.StoreFull:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonStoreFull,
			Message: "a store the order needs is full; nothing was done, retry once it has room", retryAfter: retryAfterSoon}
	case errkind.StoreUnavailable:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonStoreUnavailable,
			Message: "a store the order needs is unavailable; retry later", retryAfter: retryAfterSoon}
	case errkind.NoEligibleMember:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonNoEligibleMember,
			Message: "no order workflow member can take the order; retry later", retryAfter: retryAfterNoMember}
	case errkind.OwnerUnreachable:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonOwnerUnreachable,
			Message: "the order's owner cannot be reached from this API; retry, possibly through another API", retryAfter: retryAfterSoon}
	case errkind.Overloaded:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonOverloaded,
			Message: "the service is overloaded; nothing was done, retry after the Retry-After pause", retryAfter: retryAfterOverloaded()}
	case errkind.VersionUnsupported:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonVersionUnsupported,
			Message: "the order was written by a newer version than the running members read; nothing was done, retry once a newer member runs", retryAfter: retryAfterNoMember}
	case errkind.RelocationRolledBack:
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonRelocationRolledBack,
			Message: "a relocation of the order rolled back; retry", retryAfter: retryAfterSoon}
	default:
		return http.StatusInternalServerError, apiError{Code: CodeInternal, Message: "internal error"}
	}
}
