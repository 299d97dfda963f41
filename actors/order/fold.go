package order

import (
	"fmt"
	"slices"
)

// Apply folds one event into s and returns the new state; s itself is not
// changed. An event that cannot follow s (wrong order, another order's
// event, anything after a terminal status, a missing id the later steps
// depend on) is a *TransitionError, and the returned state is s.
//
// The preconditions are exactly the ones Decide and the commands follow,
// so a stream written through this package always folds, and a stream
// that does not fold was not.
func Apply(s State, e Event, atUnixMs int64) (State, error) {
	ev, ok := value(e)
	if !ok {
		return s, invalid(s, "<nil>", "nil event")
	}
	if err := precheck(s, ev); err != nil {
		return s, err
	}

	next := s
	switch ev := ev.(type) {
	case OrderStarted:
		if s.Started {
			return s, invalid(s, ev.Type(), "order already started")
		}
		next = State{
			OrderID:              ev.OrderID,
			Started:              true,
			Status:               StatusCreated,
			CartID:               ev.CartID,
			ShippingAddressID:    ev.ShippingAddressID,
			Lines:                slices.Clone(ev.Lines),
			Amount:               ev.Amount,
			Currency:             ev.Currency,
			StartSourceCommandID: ev.SourceCommandID,
		}

	case InventoryReserved:
		if err := awaitingReservation(s, ev); err != nil {
			return s, err
		}
		if ev.ReservationID == "" {
			return s, invalid(s, ev.Type(), "empty reservationId")
		}
		next.Status = StatusInventoryReserved
		next.ReservationID = ev.ReservationID

	case InventoryReservationFailed:
		if err := awaitingReservation(s, ev); err != nil {
			return s, err
		}
		// The status stays Created: the order never held inventory, and
		// OrderFailedEvent follows.
		next.ReservationFailed = true
		next.Reason = ev.Reason

	case PaymentAuthorized:
		if err := awaitingPayment(s, ev); err != nil {
			return s, err
		}
		if ev.PaymentID == "" {
			return s, invalid(s, ev.Type(), "empty paymentId")
		}
		next.Status = StatusPaymentAuthorized
		next.PaymentID = ev.PaymentID

	case PaymentFailed:
		if err := awaitingPayment(s, ev); err != nil {
			return s, err
		}
		// The status stays InventoryReserved until the compensation and
		// OrderFailedEvent are recorded.
		next.PaymentFailed = true
		next.Reason = ev.Reason

	case InventoryReleased:
		switch {
		case s.ReservationID == "":
			return s, invalid(s, ev.Type(), "no reservation recorded")
		case !s.PaymentFailed:
			return s, invalid(s, ev.Type(), "release only compensates a payment failure")
		case s.Released:
			return s, invalid(s, ev.Type(), "reservation already released")
		case ev.ReservationID != s.ReservationID:
			return s, invalid(s, ev.Type(), fmt.Sprintf("releases reservation %q, recorded is %q", ev.ReservationID, s.ReservationID))
		}
		// Compensation is recorded, not undone: the status does not revert.
		next.Released = true

	case OrderConfirmed:
		if s.Status != StatusPaymentAuthorized {
			return s, invalid(s, ev.Type(), "payment not authorized")
		}
		next.Status = StatusConfirmed

	case OrderFailed:
		failureConcluded := s.ReservationFailed || (s.PaymentFailed && s.Released)
		if !failureConcluded {
			return s, invalid(s, ev.Type(), "no failure to conclude, or the reservation is not yet released")
		}
		next.Status = StatusFailed
		next.Reason = ev.Reason

	default:
		return s, invalid(s, ev.Type(), fmt.Sprintf("unknown event %T", ev))
	}

	next.Version = s.Version + 1
	next.UpdatedAtUnixMs = atUnixMs
	return next, nil
}

// precheck holds the rules shared by every event: the stream starts with
// OrderStartedEvent, belongs to one order, and ends at a terminal status.
func precheck(s State, ev Event) error {
	if ev.ID() == "" {
		return invalid(s, ev.Type(), "empty eventId")
	}
	if ev.Order() == "" {
		return invalid(s, ev.Type(), "empty orderId")
	}
	if !s.Started {
		if _, ok := ev.(OrderStarted); !ok {
			return invalid(s, ev.Type(), "stream must begin with "+TypeOrderStarted)
		}
		return nil
	}
	if ev.Order() != s.OrderID {
		return invalid(s, ev.Type(), fmt.Sprintf("event of order %q applied to order %q", ev.Order(), s.OrderID))
	}
	if s.Status.Terminal() {
		return invalid(s, ev.Type(), "order is terminal")
	}
	return nil
}

func awaitingReservation(s State, ev Event) error {
	if s.Status != StatusCreated || s.ReservationFailed {
		return invalid(s, ev.Type(), "reservation outcome already recorded")
	}
	return nil
}

func awaitingPayment(s State, ev Event) error {
	switch {
	case s.Status == StatusCreated:
		return invalid(s, ev.Type(), "inventory not reserved")
	case s.Status != StatusInventoryReserved || s.PaymentFailed:
		return invalid(s, ev.Type(), "payment outcome already recorded")
	}
	return nil
}

// Fold replays a stream: events[i] was recorded at atUnixMs[i]. It stops at
// the first event that does not apply and returns the state folded so far
// together with that error.
func Fold(events []Event, atUnixMs []int64) (State, error) {
	if len(events) != len(atUnixMs) {
		return State{}, fmt.Errorf("%w: %d events, %d timestamps", ErrLengthMismatch, len(events), len(atUnixMs))
	}
	var s State
	for i, e := range events {
		next, err := Apply(s, e, atUnixMs[i])
		if err != nil {
			return s, fmt.Errorf("fold event %d: %w", i+1, err)
		}
		s = next
	}
	return s, nil
}
