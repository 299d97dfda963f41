// Package commerce owns the CommerceStateStore that CommerceApi and
// OrderWorkflow share: the idempotency mapping, cart snapshots, the
// seeded inventory and payment modules whose results are keyed by
// deterministic ids, and the inventory's per-SKU stock ledger.
//
// # Stock spread over slots
//
// Stock, its ledger and each reservation's line on a SKU live under the
// SKU's hash tag; a reservation's progress record under its own id's tag
// (keys). No script spans two tags, so a multi-SKU Reserve is a sequence
// of single-slot steps, each atomic and idempotent:
//
//  1. begin (reservation record): count the call; a decided reservation
//     answers its first result; otherwise record the first call's lines
//     and order once. Every later call works on those lines, sorted by SKU.
//  2. hold, per line in SKU order (SKU slot): the line's first step decides
//     it, held (stock taken, a reserve movement) or refused (too little; a
//     refuse movement), and writes a hold record; every later step of the
//     line answers the record.
//  3. all lines held: finish accepted (reservation record).
//     A line refused (or found returned): mark the reservation
//     compensating with that line's reason (first reason wins), give every
//     held line back (a compensate movement, the hold record returned),
//     then finish refused.
//
// Why it holds. A line's outcome is written once, so every caller sees
// the same outcome per line; callers walk the same lines in the same
// order and stop at the first refused one, so no caller ever holds a line
// after it, and every line before it is held. Hence "every line held" and
// "some line refused" exclude each other for all callers: the decision is
// a function of the records, and a retry, a concurrent repeat or the
// caller after a crash derives the same one. Compensation starts only
// once the record says compensating, which finish-accepted refuses, and
// it runs to the end on every call until the refusal is recorded, so a
// refused reservation holds nothing once Reserve answers. A caller that
// stops between steps (crash, timeout) leaves an undecided reservation:
// Reservation reads ErrNotFound and Release answers unknown, as before
// any reservation, and the next Reserve with the id (the workflow retries
// until it records a result) resumes at the step that was cut. Stock is
// taken and returned only by scripts that check it, so it never goes
// below zero; a reservation refused only because another order
// transiently held units it then gave back is the price of going SKU by
// SKU, counted by TransientRefusals.
//
// Release runs the same way: begin (count; an undecided reservation is
// unknown and records nothing; a refused one records its answer; an
// accepted one is marked releasing), give each line back once (a release
// movement), finish released.
//
// On a single Redis server, where no key is ever in another slot, Reserve
// and Authorize run as one script each (redis_oneslot.go): the whole
// protocol above without interruption, so no other caller can see a
// partial hold. A reservation the stepped protocol began and did not
// decide (an earlier call cut between steps) is left to that protocol.
//
// Every stock change appends its movement to the SKU's ledger in the same
// script, seeding included, so initial stock + the sum of movements =
// available stock at every instant (StockLedger).
//
// It must not import actors/workflow, actors/grain, cluster (but the leaf
// cluster/retry, the backoff of ApplySeedRetrying) or edge.
package commerce

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
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
// endpoint or placement choice (docs/contract.md,
// "Nobody chooses the owner").
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
//
// A key's mapping is filed under the OrderId the key derives
// (order.OrderIDFor): every method takes that OrderId with the key (the
// candidate's, MarkStarted's, Forget's m), and the caller always derives
// it the same way. A mapping made before that layout may name another
// OrderId (one minted before OrderIds were derived); it is found by the
// key alone.
type Idempotency interface {
	// Reserve maps key to candidate (status pending, whatever the
	// candidate's) unless the key is already mapped, atomically. It
	// returns the mapping in force and whether this call created it. Of
	// concurrent reservers exactly one wins; the others get the winner's
	// mapping.
	Reserve(ctx context.Context, key string, candidate Mapping) (Mapping, bool, error)
	// Get returns key's mapping, filed under orderID (the OrderId key
	// derives), or ErrNotFound.
	Get(ctx context.Context, key, orderID string) (Mapping, error)
	// MarkStarted sets the status to started if the key maps to orderID.
	// It is idempotent; a key mapped to another order is ErrNotFound.
	MarkStarted(ctx context.Context, key, orderID string) error
	// AddStartedMark adds MarkStarted(key, u's order) to u, the unit of
	// work that records the order's start, and returns its position in
	// u: the committed unit tells whether it wrote, and not written means
	// no mapping the write could reach names the order (MarkStarted then
	// says why). Nothing is written until u is committed.
	AddStartedMark(u Unit, key string) (int, error)
	// Forget deletes key's mapping if, and only if, it is still m and
	// pending, atomically, and reports whether it did: the caller that
	// reserved m gives it back after the order refused the request (a
	// reused key whose earlier mapping was lost). A started mapping, or
	// one for another order or fingerprint, is never deleted.
	Forget(ctx context.Context, key string, m Mapping) (bool, error)
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
