// Package commerce owns the CommerceStateStore that CommerceApi and
// OrderWorkflow share: the idempotency mapping, cart snapshots, and the
// seeded inventory and payment modules whose results are keyed by
// deterministic ids.
//
// It must not import actors/workflow, actors/grain, cluster or edge.
package commerce

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts/errkind"
)

var (
	// ErrConfig: NewRedis was given a Config it cannot work with.
	ErrConfig = errors.New("commerce: invalid config")
	// ErrNotFound: no such key, cart, SKU or payment method.
	ErrNotFound = errkind.New(errkind.NotFound, "commerce: not found")
	// ErrCorrupt: a stored record cannot be decoded.
	ErrCorrupt = errors.New("commerce: corrupt record")
	// ErrInvalidArgument: the request cannot be accepted as given.
	ErrInvalidArgument = errkind.New(errkind.InvalidArgument, "commerce: invalid argument")
	// ErrUnavailable: the backing store could not be reached or did not
	// answer; the call may or may not have taken effect, and repeating it
	// is safe because every operation is keyed by a deterministic id.
	ErrUnavailable = errkind.New(errkind.StoreUnavailable, "commerce: unavailable")
)

// MappingStatus is the life of an idempotency mapping.
type MappingStatus string

const (
	// MappingPending: the OrderId is chosen but OrderStartedEvent may not
	// be recorded yet. Never a success to report.
	MappingPending MappingStatus = "pending"
	// MappingStarted: OrderStartedEvent and the Created projection exist.
	MappingStarted MappingStatus = "started"
)

// Mapping is what an IdempotencyKey stands for. It carries no owner node,
// endpoint or placement choice (spec §9.3-4).
type Mapping struct {
	OrderID string
	Status  MappingStatus
	// Fingerprint identifies the request (cart, address, payment method),
	// so a replay can be told from a reuse of the key.
	Fingerprint string
}

// Fingerprint identifies a StartOrderReq by its cart, shipping address and
// payment method. Each field is length-prefixed before hashing so that
// ("ab","c") and ("a","bc") cannot produce the same digest.
func Fingerprint(cartID, shippingAddressID, paymentMethodID string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range []string{cartID, shippingAddressID, paymentMethodID} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Idempotency is the IdempotencyKey → OrderId mapping.
type Idempotency interface {
	// Reserve maps key to candidate (status pending, whatever the
	// candidate's) unless the key is already mapped, atomically. It
	// returns the mapping in force and whether this call created it. Of
	// concurrent reservers exactly one wins; the others get the winner's
	// mapping.
	Reserve(ctx context.Context, key string, candidate Mapping) (Mapping, bool, error)
	// Get returns the mapping or ErrNotFound.
	Get(ctx context.Context, key string) (Mapping, error)
	// MarkStarted sets the status to started if the key maps to orderID.
	// It is idempotent; a key mapped to another order is ErrNotFound.
	MarkStarted(ctx context.Context, key, orderID string) error
}

// Cart is a cart snapshot. Amount is in the currency's minor unit.
type Cart struct {
	CartID   string
	Lines    []*contracts.OrderLine
	Amount   int64
	Currency string
}

// Carts holds cart snapshots.
type Carts interface {
	// GetCart returns the snapshot or ErrNotFound.
	GetCart(ctx context.Context, cartID string) (Cart, error)
	// PutCart stores (replaces) a snapshot.
	PutCart(ctx context.Context, cart Cart) error
}

// Reasons the modules answer with. They are part of the evidence a run
// prints, so they are fixed strings and part of the modules' contracts.
const (
	ReasonUnknownPaymentMethod = "unknown payment method"
	// ReasonPaymentDeclined is used when a declining method was seeded
	// without a reason of its own.
	ReasonPaymentDeclined        = "payment declined"
	ReasonUnknownReservation     = "unknown reservation"
	ReasonReservationNotAccepted = "reservation was not accepted"
)

// Inventory is the seeded inventory module. Results are keyed by
// ReservationId: a repeated call returns the first result and moves no
// stock again. Every call is counted per ReservationId, repeats included,
// so evidence can show how often the workflow called.
type Inventory interface {
	// Reserve takes every line's quantity from stock, all or nothing, in
	// one atomic step (lines naming one SKU count by their total), or
	// rejects with a reason naming a SKU that lacks stock. A request
	// without a ReservationId or lines, or with a line without a SKU or a
	// positive quantity, is ErrInvalidArgument and is not counted.
	Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error)
	// Release returns the reservation's stock once. Releasing an unknown
	// reservation answers released=false with ReasonUnknownReservation and
	// records nothing, so the reservation can still be made and released
	// later; a rejected one answers ReasonReservationNotAccepted. A
	// request without a ReservationId is ErrInvalidArgument.
	Release(ctx context.Context, req *contracts.ReleaseInventoryReq) (*contracts.ReleaseInventoryRes, error)
	// SetStock sets a SKU's available quantity (seeding). An empty SKU or
	// a negative quantity is ErrInvalidArgument.
	SetStock(ctx context.Context, sku string, quantity int64) error
	// Stock returns a SKU's available quantity (0 for an unknown SKU).
	Stock(ctx context.Context, sku string) (int64, error)
	// ReserveCalls returns how many times Reserve was called with the id.
	ReserveCalls(ctx context.Context, reservationID string) (int64, error)
	// ReleaseCalls returns how many times Release was called with the id.
	ReleaseCalls(ctx context.Context, reservationID string) (int64, error)
	ReservationRecords
}

// PaymentMethod is a seeded payment method: it approves, or declines with
// Reason.
type PaymentMethod struct {
	MethodID string
	Approve  bool
	Reason   string
}

// Payment is the seeded payment module. Results are keyed by PaymentId:
// a repeated call returns the first result and never charges twice.
type Payment interface {
	// Authorize decides by the payment method's seed, records the result
	// under the PaymentId and the captured amount once. An unknown method
	// is declined with ReasonUnknownPaymentMethod, a declining method
	// without a reason of its own with ReasonPaymentDeclined. A request
	// without a PaymentId or a PaymentMethodId, or with a negative amount,
	// is ErrInvalidArgument and is not counted.
	Authorize(ctx context.Context, req *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error)
	// PutMethod seeds (replaces) a payment method. One without an id, or
	// one that approves and has a decline reason, is ErrInvalidArgument.
	PutMethod(ctx context.Context, m PaymentMethod) error
	// GetMethod returns a seeded method or ErrNotFound.
	GetMethod(ctx context.Context, methodID string) (PaymentMethod, error)
	// AuthorizeCalls returns how many times Authorize was called with the id.
	AuthorizeCalls(ctx context.Context, paymentID string) (int64, error)
	// Captured returns the total amount authorized under the id (0 if none
	// or declined), so tests can prove money moved once.
	Captured(ctx context.Context, paymentID string) (int64, error)
	AuthorizationRecords
}
