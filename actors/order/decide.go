package order

import (
	"fmt"
	"slices"
	"strconv"
)

// Step is the next thing the workflow must do for an order.
type Step int

const (
	StepNone Step = iota
	StepReserveInventory
	StepAuthorizePayment
	StepConfirm
	StepReleaseInventory
	StepFail
)

func (s Step) String() string {
	switch s {
	case StepNone:
		return "None"
	case StepReserveInventory:
		return "ReserveInventory"
	case StepAuthorizePayment:
		return "AuthorizePayment"
	case StepConfirm:
		return "Confirm"
	case StepReleaseInventory:
		return "ReleaseInventory"
	case StepFail:
		return "Fail"
	}
	return "Step(" + strconv.Itoa(int(s)) + ")"
}

// Decide returns the next step for s; it is a function of the folded state
// only, so a replayed order resumes exactly where its stream stops and never
// repeats a step whose outcome is already recorded.
//
// Compensation rule (docs/contract.md, "Next step" and
// "Failure and compensation"):
//   - inventory failure: payment is never attempted; the order fails;
//   - payment failure: the reservation already recorded is released first,
//     and only then does the order fail, so stock is never left held by a
//     failed order.
func Decide(s State) Step {
	if !s.Started || s.Status.Terminal() {
		return StepNone
	}
	switch s.Status {
	case StatusCreated:
		if s.ReservationFailed {
			return StepFail
		}
		return StepReserveInventory
	case StatusInventoryReserved:
		switch {
		case s.PaymentFailed && !s.Released:
			return StepReleaseInventory
		case s.PaymentFailed:
			return StepFail
		default:
			return StepAuthorizePayment
		}
	case StatusPaymentAuthorized:
		return StepConfirm
	}
	return StepNone
}

// StartOrder is the command that opens an order's stream.
type StartOrder struct {
	OrderID, CartID, ShippingAddressID, SourceCommandID string
	Lines                                               []Line
	// Amount is in the currency's minor unit.
	Amount   int64
	Currency string
}

// Start returns the OrderStartedEvent for c. It fails with ErrAlreadyStarted
// (also a *TransitionError) when s is started, and with ErrInvalidCommand
// when c is incomplete.
func Start(s State, c StartOrder) (Event, error) {
	if s.Started {
		return nil, fmt.Errorf("%w: %w", ErrAlreadyStarted, invalid(s, TypeOrderStarted, "order already started"))
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return OrderStarted{
		EventID:           EventID(c.OrderID, s.Version+1),
		OrderID:           c.OrderID,
		CartID:            c.CartID,
		ShippingAddressID: c.ShippingAddressID,
		Lines:             slices.Clone(c.Lines),
		Amount:            c.Amount,
		Currency:          c.Currency,
		SourceCommandID:   c.SourceCommandID,
	}, nil
}

func (c StartOrder) validate() error {
	// A fixed order keeps the error for a given command deterministic.
	for _, f := range []struct{ name, v string }{
		{"orderId", c.OrderID},
		{"cartId", c.CartID},
		{"shippingAddressId", c.ShippingAddressID},
		{"sourceCommandId", c.SourceCommandID},
		{"currency", c.Currency},
	} {
		if f.v == "" {
			return fmt.Errorf("%w: %s is empty", ErrInvalidCommand, f.name)
		}
	}
	if len(c.Lines) == 0 {
		return fmt.Errorf("%w: no lines", ErrInvalidCommand)
	}
	for i, l := range c.Lines {
		if l.SKU == "" {
			return fmt.Errorf("%w: line %d has no sku", ErrInvalidCommand, i)
		}
		if l.Quantity < 1 {
			return fmt.Errorf("%w: line %d (%s) has quantity %d", ErrInvalidCommand, i, l.SKU, l.Quantity)
		}
	}
	if c.Amount < 0 {
		return fmt.Errorf("%w: negative amount %d", ErrInvalidCommand, c.Amount)
	}
	return nil
}

// Default reasons keep a failed order explainable when a module rejects
// without saying why.
const (
	defaultReservationReason = "inventory reservation rejected"
	defaultPaymentReason     = "payment authorization rejected"
)

// ReservationResult records the inventory module's answer for
// ReservationID(s.OrderID).
func ReservationResult(s State, accepted bool, reason string) (Event, error) {
	if accepted {
		if err := expect(s, StepReserveInventory, TypeInventoryReserved); err != nil {
			return nil, err
		}
		return InventoryReserved{EventID: nextEventID(s), OrderID: s.OrderID, ReservationID: ReservationID(s.OrderID)}, nil
	}
	if err := expect(s, StepReserveInventory, TypeInventoryReservationFailed); err != nil {
		return nil, err
	}
	return InventoryReservationFailed{EventID: nextEventID(s), OrderID: s.OrderID, Reason: orDefault(reason, defaultReservationReason)}, nil
}

// PaymentResult records the payment module's answer for
// PaymentID(s.OrderID).
func PaymentResult(s State, accepted bool, reason string) (Event, error) {
	if accepted {
		if err := expect(s, StepAuthorizePayment, TypePaymentAuthorized); err != nil {
			return nil, err
		}
		return PaymentAuthorized{EventID: nextEventID(s), OrderID: s.OrderID, PaymentID: PaymentID(s.OrderID)}, nil
	}
	if err := expect(s, StepAuthorizePayment, TypePaymentFailed); err != nil {
		return nil, err
	}
	return PaymentFailed{EventID: nextEventID(s), OrderID: s.OrderID, Reason: orDefault(reason, defaultPaymentReason)}, nil
}

// Released records that the reservation recorded in s was given back. An
// empty reason repeats the payment failure's reason.
func Released(s State, reason string) (Event, error) {
	if err := expect(s, StepReleaseInventory, TypeInventoryReleased); err != nil {
		return nil, err
	}
	return InventoryReleased{
		EventID:       nextEventID(s),
		OrderID:       s.OrderID,
		ReservationID: s.ReservationID,
		Reason:        orDefault(reason, s.Reason),
	}, nil
}

// Confirm concludes an order whose payment is authorized.
func Confirm(s State, atUnixMs int64) (Event, error) {
	if err := expect(s, StepConfirm, TypeOrderConfirmed); err != nil {
		return nil, err
	}
	return OrderConfirmed{EventID: nextEventID(s), OrderID: s.OrderID, ConfirmedAtUnixMs: atUnixMs}, nil
}

// Fail concludes a failed order with the reason its failing step recorded.
func Fail(s State, atUnixMs int64) (Event, error) {
	if err := expect(s, StepFail, TypeOrderFailed); err != nil {
		return nil, err
	}
	return OrderFailed{EventID: nextEventID(s), OrderID: s.OrderID, Reason: s.Reason, FailedAtUnixMs: atUnixMs}, nil
}

// expect refuses a command that is not the order's next step, so a
// workflow cannot record an outcome twice or out of order.
func expect(s State, want Step, eventType string) error {
	if got := Decide(s); got != want {
		return invalid(s, eventType, fmt.Sprintf("next step is %s, not %s", got, want))
	}
	return nil
}

func nextEventID(s State) string { return EventID(s.OrderID, s.Version+1) }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
