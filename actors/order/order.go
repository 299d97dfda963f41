// Package order owns the order domain of the ShoppingMall sample: the eight
// domain events (docs/contract.md, "Events"), the state an order's stream
// folds into, the next-step decision with its compensation rule
// (docs/contract.md, "Next step" and "Failure and compensation"), the
// commands that turn a step's outcome into the next event, and the
// deterministic ids that make every external effect repeatable.
//
// Everything here is a pure function of its arguments, so replaying the
// same stream always yields the same state and the same next step on any
// node, before and after a relocation. The package must therefore import
// only the standard library, and neither read the clock nor draw random
// numbers: times and ids come in as arguments. It must not import
// protobuf, protoactor, gin, redis or any package of the project; adapters
// translate between these types and the wire contracts.
package order

import (
	"errors"
	"fmt"
)

// Status is the order status of docs/contract.md, "Statuses"; the string is
// the contract's literal value.
type Status string

const (
	StatusCreated           Status = "Created"
	StatusInventoryReserved Status = "InventoryReserved"
	StatusPaymentAuthorized Status = "PaymentAuthorized"
	StatusConfirmed         Status = "Confirmed"
	StatusFailed            Status = "Failed"
)

// Terminal reports whether no event may follow this status.
func (s Status) Terminal() bool {
	return s == StatusConfirmed || s == StatusFailed
}

// Line is one ordered SKU and its quantity.
type Line struct {
	SKU      string
	Quantity int32
}

// State is the fold of one order's stream. The zero value is "no stream":
// Started is false and Decide returns StepNone.
type State struct {
	OrderID string
	// Version is the number of events folded, which is the stream version
	// the state reflects (versions are 1-based and gapless).
	Version int64

	Started bool
	Status  Status

	CartID               string
	ShippingAddressID    string
	Lines                []Line
	Amount               int64
	Currency             string
	StartSourceCommandID string

	ReservationID     string
	ReservationFailed bool

	PaymentID     string
	PaymentFailed bool

	// Released records InventoryReleasedEvent; the status does not change
	// with it.
	Released bool

	// Reason is the failure reason recorded by the failing step (and by
	// OrderFailedEvent); the release reason does not replace it.
	Reason string

	// UpdatedAtUnixMs is the createdAt of the last folded event, as passed
	// to Apply.
	UpdatedAtUnixMs int64
}

var (
	// ErrInvalidTransition is wrapped by every *TransitionError.
	ErrInvalidTransition = errors.New("order: invalid transition")
	// ErrAlreadyStarted is returned by Start for an order whose stream
	// already holds OrderStartedEvent.
	ErrAlreadyStarted = errors.New("order: already started")
	// ErrInvalidCommand is returned when a command's own fields are
	// unusable, whatever the state.
	ErrInvalidCommand = errors.New("order: invalid command")
	// ErrLengthMismatch is returned by Fold when events and timestamps do
	// not pair up.
	ErrLengthMismatch = errors.New("order: events and timestamps differ in length")
)

// TransitionError says why an event cannot follow a state, or why a command
// is not the order's next step.
type TransitionError struct {
	From    Status // status before the event; "" when the order has not started
	Event   string // event type, e.g. "PaymentAuthorizedEvent"
	Version int64  // version of the state the event was applied to
	Why     string
}

func (e *TransitionError) Error() string {
	from := string(e.From)
	if from == "" {
		from = "(not started)"
	}
	return fmt.Sprintf("%v: %s after version %d in status %s: %s", ErrInvalidTransition, e.Event, e.Version, from, e.Why)
}

// Unwrap makes errors.Is(err, ErrInvalidTransition) hold.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

func invalid(s State, eventType, why string) *TransitionError {
	return &TransitionError{From: s.Status, Event: eventType, Version: s.Version, Why: why}
}
