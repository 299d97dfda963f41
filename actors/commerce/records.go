package commerce

import (
	"context"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The modules' records read by id, for operators (the per-order
// timeline): what an effect's deterministic id stands for, without
// making the effect again.

// ReservationRecords reads the inventory module's record of a reservation.
type ReservationRecords interface {
	// Reservation returns what the module recorded under reservationID:
	// the first Reserve result, the first Release result of the
	// reservation and how often each was called. It has no side effect:
	// it moves no stock and counts no call. It fails with ErrNotFound when
	// no Reserve result is recorded under the id (a Release that came
	// before any Reserve records none), with ErrInvalidArgument for an
	// empty id.
	Reservation(ctx context.Context, reservationID string) (ReservationRecord, error)
}

// ReservationRecord is one reservation as the inventory module recorded it.
type ReservationRecord struct {
	ReservationID string
	// Reserve is the first Reserve result: what every repeat answers.
	Reserve *contracts.ReserveInventoryRes
	// Release is the first Release result of an accepted reservation,
	// what every repeat answers; nil until a Release returned its stock.
	// A rejected reservation has nothing to release and its Release is
	// always nil.
	Release *contracts.ReleaseInventoryRes
	// ReserveCalls and ReleaseCalls count every call with the id,
	// repeats included (Inventory.ReserveCalls, ReleaseCalls).
	ReserveCalls, ReleaseCalls int64
}

// AuthorizationRecords reads the payment module's record of a payment.
type AuthorizationRecords interface {
	// Authorization returns what the module recorded under paymentID:
	// the first Authorize result, the amount it captured and how often
	// Authorize was called with the id. It has no side effect: it charges
	// nothing and counts no call. It fails with ErrNotFound when no result
	// is recorded under the id, with ErrInvalidArgument for an empty id.
	Authorization(ctx context.Context, paymentID string) (AuthorizationRecord, error)
}

// AuthorizationRecord is one payment as the payment module recorded it.
type AuthorizationRecord struct {
	PaymentID string
	// Result is the first Authorize result: what every repeat answers.
	Result *contracts.AuthorizePaymentRes
	// Captured is the amount the first result authorized (Payment.Captured),
	// 0 when it was declined.
	Captured int64
	// Calls counts every Authorize with the id, repeats included.
	Calls int64
}

// RecordScan lists the modules' records by the order each names. Reading
// by id sees only the record under an order's own deterministic id; a
// second reservation or payment under any other id shows up only here,
// which is what a checker counting "at most one per order" needs.
type RecordScan interface {
	// RecordsByOrder reads every reservation and payment record and
	// groups them by the orderId each carries, records of one order in id
	// order. It has no side effect. It walks the whole keyspace (SCAN,
	// on every master of a cluster), so it is for checkers and offline
	// tools, never for a request path. A record that names no order (a
	// Release before any Reserve counts its call and records nothing
	// else) is listed under "".
	RecordsByOrder(ctx context.Context) (map[string]*OrderRecords, error)
}

// OrderRecords is every module record naming one order.
type OrderRecords struct {
	Reservations []ScannedReservation
	Payments     []ScannedPayment
}

// ScannedReservation is one reservation record as the scan read it. An
// undecided one (a Reserve cut between its steps) is listed too, with
// Decided false: it names the order and may hold stock.
type ScannedReservation struct {
	ReservationID string
	Decided       bool
	// Accepted is the first Reserve result; Released is set once a
	// Release returned an accepted reservation's stock.
	Accepted, Released bool
	// Lines are the first Reserve's lines, one per SKU in SKU order.
	Lines                      []*contracts.OrderLine
	ReserveCalls, ReleaseCalls int64
}

// ScannedPayment is one payment record as the scan read it.
type ScannedPayment struct {
	PaymentID string
	// Decided: an Authorize recorded its result; Accepted is it.
	Decided, Accepted bool
	// MethodID, Amount and Currency are what the first Authorize asked.
	MethodID string
	Amount   int64
	Currency string
	Calls    int64
}
