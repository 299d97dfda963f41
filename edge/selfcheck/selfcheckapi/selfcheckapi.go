// Package selfcheckapi is the wire of the runner-only /self-check/ hooks
// (edge/selfcheck): their paths and their request and reply bodies. The
// hooks and the runner (runner/smoke) both import it, so neither copies
// the other's types.
//
// It imports only the standard library, and must stay so: through it the
// runner links neither the HTTP edge, gin, the actor framework nor any
// store.
package selfcheckapi

import (
	"encoding/json"
	"net/url"
)

// Paths of the hooks on the API's admin listener. The per-order ones are
// built by ProjectionPath, EvidencePath and RepeatEffectsPath; the Route
// patterns are what the hooks register ({orderId} is a path value).
const (
	// Prefix starts every hook path.
	Prefix = "/self-check/"

	PendingMappingPath         = Prefix + "pending-mapping"
	GatesPath                  = Prefix + "gates"
	GatesReleasePath           = Prefix + "gates/release"
	SkipTerminalProjectionPath = Prefix + "skip-terminal-projection"

	ProjectionRoute    = Prefix + "orders/{orderId}/projection"
	EvidenceRoute      = Prefix + "orders/{orderId}/evidence"
	RepeatEffectsRoute = Prefix + "orders/{orderId}/repeat-effects"
)

func orderPath(orderID, what string) string {
	return Prefix + "orders/" + url.PathEscape(orderID) + "/" + what
}

// ProjectionPath is DELETE: remove the order's projection.
func ProjectionPath(orderID string) string { return orderPath(orderID, "projection") }

// EvidencePath is GET: the order's Evidence.
func EvidencePath(orderID string) string { return orderPath(orderID, "evidence") }

// RepeatEffectsPath is POST: repeat the order's module calls (RepeatEffects).
func RepeatEffectsPath(orderID string) string { return orderPath(orderID, "repeat-effects") }

// PendingMappingRequest is the body of POST PendingMappingPath: a public
// StartOrderReq. The hook reserves a pending idempotency mapping with a
// fresh OrderId and does not start the order, as if a start had crashed
// between the reservation and the grain call.
type PendingMappingRequest struct {
	IdempotencyKey    string `json:"idempotencyKey"`
	CartID            string `json:"cartId"`
	ShippingAddressID string `json:"shippingAddressId"`
	PaymentMethodID   string `json:"paymentMethodId"`
}

// PendingMappingReply is its reply.
type PendingMappingReply struct {
	OrderID string `json:"orderId"`
}

// Gate modes of a GateRequest.
const (
	// GateStop: the background continuation stops at InventoryReserved;
	// only an explicit continue proceeds (docs/contract.md,
	// "Continue resumes from payment").
	GateStop = "stop"
	// GateHold: it parks there until GatesReleasePath (docs/contract.md,
	// "Planned relocation resumes at payment").
	GateHold = "hold"
)

// GateRequest is the body of POST GatesPath: arm Mode for the order the
// idempotency key will start. The reply is an empty object.
type GateRequest struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Mode           string `json:"mode"`
}

// ReleaseRequest is the body of POST GatesReleasePath: remove the gate and
// resume the order wherever it lives now.
type ReleaseRequest struct {
	IdempotencyKey string `json:"idempotencyKey"`
	OrderID        string `json:"orderId"`
}

// ReleaseReply is its reply: the order's contract OrderState as JSON
// (decode it with the contract codec).
type ReleaseReply struct {
	State json.RawMessage `json:"state"`
}

// SkipTerminalProjectionRequest is the body of POST
// SkipTerminalProjectionPath: the terminal event of the order the key
// starts is recorded without its projection, once (docs/contract.md,
// "Continue repairs a terminal projection"). The reply is an empty object.
type SkipTerminalProjectionRequest struct {
	IdempotencyKey string `json:"idempotencyKey"`
}

// EvidenceEvent is one stream entry in an Evidence reply.
type EvidenceEvent struct {
	EventID         string `json:"eventId"`
	EventType       string `json:"eventType"`
	Version         int64  `json:"version"`
	SourceCommandID string `json:"sourceCommandId"`
	CreatedAtUnixMs int64  `json:"createdAtUnixMs"`
}

// RelocationView is one relocation operation in an Evidence reply.
type RelocationView struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	Target     string `json:"target"`
	Generation int64  `json:"generation"`
	State      string `json:"state"`
}

// Evidence is the reply of GET EvidencePath: the real stream, the
// authority record (Authority "Missing" when there is none) and the
// module call counts, read from the stores. 404 when the order has no
// stream.
type Evidence struct {
	OrderID        string           `json:"orderId"`
	Events         []EvidenceEvent  `json:"events"`
	Generation     int64            `json:"generation"`
	OwnerNode      string           `json:"ownerNode"`
	OwnerMember    string           `json:"ownerMember"`
	Authority      string           `json:"authority"`
	ReservationID  string           `json:"reservationId"`
	PaymentID      string           `json:"paymentId"`
	ReserveCalls   int64            `json:"reserveCalls"`
	ReleaseCalls   int64            `json:"releaseCalls"`
	AuthorizeCalls int64            `json:"authorizeCalls"`
	Relocations    []RelocationView `json:"relocations"`
}

// EffectResult is one module answer in a RepeatEffects reply.
type EffectResult struct {
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
}

// ReservationRepeat compares the recorded reservation outcome with a
// repeated Reserve call, and the stock around it.
type ReservationRepeat struct {
	First       EffectResult     `json:"first"`
	Repeat      EffectResult     `json:"repeat"`
	StockBefore map[string]int64 `json:"stockBefore"`
	StockAfter  map[string]int64 `json:"stockAfter"`
}

// PaymentRepeat compares the recorded payment outcome with a repeated
// Authorize call, and the captured amount around it.
type PaymentRepeat struct {
	First          EffectResult `json:"first"`
	Repeat         EffectResult `json:"repeat"`
	CapturedBefore int64        `json:"capturedBefore"`
	CapturedAfter  int64        `json:"capturedAfter"`
}

// RepeatEffects is the reply of POST RepeatEffectsPath. Payment is absent
// when the stream records no payment outcome (an inventory failure):
// repeating it would be a first call, not a repeat.
type RepeatEffects struct {
	Reservation  *ReservationRepeat `json:"reservation"`
	Payment      *PaymentRepeat     `json:"payment,omitempty"`
	SameResults  bool               `json:"sameResults"`
	NothingMoved bool               `json:"nothingMoved"`
}
