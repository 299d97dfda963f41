// Package commerce owns the CommerceStateStore that CommerceApi and
// OrderWorkflow share: the idempotency mapping, cart snapshots, and the
// seeded inventory and payment modules whose results are keyed by
// deterministic ids.
//
// It must not import actors/workflow, actors/grain, cluster or edge.
package commerce

import (
	"context"
	"errors"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

var (
	// ErrNotFound: no such key, cart, SKU or payment method.
	ErrNotFound = errors.New("commerce: not found")
	// ErrCorrupt: a stored record cannot be decoded.
	ErrCorrupt = errors.New("commerce: corrupt record")
	// ErrInvalidArgument: the request cannot be accepted as given.
	ErrInvalidArgument = errors.New("commerce: invalid argument")
	// ErrUnavailable: the backing store could not be reached or did not
	// answer; the call may or may not have taken effect, and repeating it
	// is safe because every operation is keyed by a deterministic id.
	ErrUnavailable = errors.New("commerce: unavailable")
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

// Idempotency is the IdempotencyKey → OrderId mapping.
type Idempotency interface {
	// Reserve maps key to candidate (status pending) unless the key is
	// already mapped, atomically. It returns the mapping in force and
	// whether this call created it. Of concurrent reservers exactly one
	// wins; the others get the winner's mapping.
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

// Inventory is the seeded inventory module. Results are keyed by
// ReservationId: a repeated call returns the first result and moves no
// stock again. Every call is counted per ReservationId, repeats included,
// so evidence can show how often the workflow called.
type Inventory interface {
	// Reserve takes every line's quantity from stock, all or nothing, in
	// one atomic step, or rejects with a reason if any SKU lacks stock.
	Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error)
	// Release returns the reservation's stock once. Releasing an unknown
	// or rejected reservation answers released=false with a reason.
	Release(ctx context.Context, req *contracts.ReleaseInventoryReq) (*contracts.ReleaseInventoryRes, error)
	// SetStock sets a SKU's available quantity (seeding).
	SetStock(ctx context.Context, sku string, quantity int64) error
	// Stock returns a SKU's available quantity (0 for an unknown SKU).
	Stock(ctx context.Context, sku string) (int64, error)
	// ReserveCalls returns how many times Reserve was called with the id.
	ReserveCalls(ctx context.Context, reservationID string) (int64, error)
	// ReleaseCalls returns how many times Release was called with the id.
	ReleaseCalls(ctx context.Context, reservationID string) (int64, error)
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
	// is declined with reason "unknown payment method".
	Authorize(ctx context.Context, req *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error)
	// PutMethod seeds a payment method.
	PutMethod(ctx context.Context, m PaymentMethod) error
	// GetMethod returns a seeded method or ErrNotFound.
	GetMethod(ctx context.Context, methodID string) (PaymentMethod, error)
	// AuthorizeCalls returns how many times Authorize was called with the id.
	AuthorizeCalls(ctx context.Context, paymentID string) (int64, error)
	// Captured returns the total amount authorized under the id (0 if none
	// or declined), so tests can prove money moved once.
	Captured(ctx context.Context, paymentID string) (int64, error)
}
