package order

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// Deterministic ids. Each is a pure function of its inputs so that a
// replayed or relocated order calls the inventory and payment modules, and
// appends its events, with exactly the ids the first attempt used; the
// modules answer a repeated id with their first result and the event store
// refuses a repeated sourceCommandId, which together make every step
// idempotent.
//
// Scheme:
//
//	OrderIDFor(secret, k)       "ord-" + first 32 hex digits of HMAC-SHA256(secret, k)
//	ReservationID(o)            "rsv-" + o
//	PaymentID(o)                "pay-" + o
//	EventID(o, v)               "evt-" + o + "-" + v (decimal version)
//	StartSourceCommandID(k)     "start-" + first 32 hex digits of sha256(k)
//	StepSourceCommandID(o, s)   o + ":" + step name, e.g. "ord-1:reserve-inventory"
//
// OrderIds are short, server-derived values and stay readable in the
// ids; idempotency keys come from clients and may be long or contain any
// character, so they are hashed. The prefixes keep ids of different stages
// distinct for the same order, and EventID's version (1-based, so never
// negative) is the part after the last "-", so different (order, version)
// pairs never collide.

// OrderIDLen is the length of every OrderId OrderIDFor derives: the
// prefix and 128 bits of the MAC in lowercase hex.
const OrderIDLen = len(orderIDPrefix) + 32

const orderIDPrefix = "ord-"

// OrderIDFor is the OrderId of the order a client's idempotency key
// starts: a function of the key, so that a retry whose idempotency
// mapping was lost still reaches the order it started, and never a
// second one. It is a keyed MAC, not a bare hash: keys are the clients'
// own and may be guessable, and whoever could compute another client's
// OrderId from its key could read that order. The secret is the
// cluster's, shared by every API process and never rotated: under a new
// secret every retry of an earlier key would name a new order. 128 bits
// keep the ids unguessable without the secret.
func OrderIDFor(secret []byte, idempotencyKey string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(idempotencyKey))
	return orderIDPrefix + hex.EncodeToString(mac.Sum(nil))[:OrderIDLen-len(orderIDPrefix)]
}

// ReservationID is the inventory reservation id of an order.
func ReservationID(orderID string) string { return "rsv-" + orderID }

// PaymentID is the payment authorization id of an order.
func PaymentID(orderID string) string { return "pay-" + orderID }

// EventID is the eventId of the event recorded at version (1-based) of an
// order's stream.
func EventID(orderID string, version int64) string {
	return "evt-" + orderID + "-" + strconv.FormatInt(version, 10)
}

// StartSourceCommandID is the sourceCommandId of the OrderStartedEvent
// created for a client's idempotency key; a repeated start with the same
// key therefore cannot record a second start.
func StartSourceCommandID(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return "start-" + hex.EncodeToString(sum[:])[:32]
}

// StepSourceCommandID is the envelope sourceCommandId of the event that
// records step's outcome for an order. Both outcomes of a step (e.g.
// InventoryReserved and InventoryReservationFailed) share it, so a step is
// recorded at most once whatever its result. StepNone and unknown steps
// record nothing and yield "".
func StepSourceCommandID(orderID string, step Step) string {
	var name string
	switch step {
	case StepReserveInventory:
		name = "reserve-inventory"
	case StepAuthorizePayment:
		name = "authorize-payment"
	case StepConfirm:
		name = "confirm"
	case StepReleaseInventory:
		name = "release-inventory"
	case StepFail:
		name = "fail"
	default:
		return ""
	}
	return orderID + ":" + name
}
