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
