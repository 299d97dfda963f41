package order

// Event type names, exactly as docs/contract.md, "Events", names them; they
// are also the eventType recorded in the stream envelope.
const (
	TypeOrderStarted               = "OrderStartedEvent"
	TypeInventoryReserved          = "InventoryReservedEvent"
	TypeInventoryReservationFailed = "InventoryReservationFailedEvent"
	TypePaymentAuthorized          = "PaymentAuthorizedEvent"
	TypePaymentFailed              = "PaymentFailedEvent"
	TypeInventoryReleased          = "InventoryReleasedEvent"
	TypeOrderConfirmed             = "OrderConfirmedEvent"
	TypeOrderFailed                = "OrderFailedEvent"
)

// Event is one of the eight domain events. The set is closed (the
// unexported method) so that Apply's switch is exhaustive. Events are
// values; Apply also accepts pointers to them.
type Event interface {
	// Type is the spec's event name, e.g. "OrderStartedEvent".
	Type() string
	// ID is the event's eventId.
	ID() string
	// Order is the OrderId of the stream the event belongs to.
	Order() string
	isEvent()
}

type OrderStarted struct {
	EventID, OrderID, CartID, ShippingAddressID string
	Lines                                       []Line
	Amount                                      int64
	Currency, SourceCommandID                   string
}

type InventoryReserved struct {
	EventID, OrderID, ReservationID string
}

type InventoryReservationFailed struct {
	EventID, OrderID, Reason string
}

type PaymentAuthorized struct {
	EventID, OrderID, PaymentID string
}

type PaymentFailed struct {
	EventID, OrderID, Reason string
}

// InventoryReleased records the compensation of a payment failure: the
// reservation was given back. It does not change the status.
type InventoryReleased struct {
	EventID, OrderID, ReservationID, Reason string
}

type OrderConfirmed struct {
	EventID, OrderID  string
	ConfirmedAtUnixMs int64
}

type OrderFailed struct {
	EventID, OrderID, Reason string
	FailedAtUnixMs           int64
}

func (OrderStarted) Type() string               { return TypeOrderStarted }
func (InventoryReserved) Type() string          { return TypeInventoryReserved }
func (InventoryReservationFailed) Type() string { return TypeInventoryReservationFailed }
func (PaymentAuthorized) Type() string          { return TypePaymentAuthorized }
func (PaymentFailed) Type() string              { return TypePaymentFailed }
func (InventoryReleased) Type() string          { return TypeInventoryReleased }
func (OrderConfirmed) Type() string             { return TypeOrderConfirmed }
func (OrderFailed) Type() string                { return TypeOrderFailed }

func (e OrderStarted) ID() string               { return e.EventID }
func (e InventoryReserved) ID() string          { return e.EventID }
func (e InventoryReservationFailed) ID() string { return e.EventID }
func (e PaymentAuthorized) ID() string          { return e.EventID }
func (e PaymentFailed) ID() string              { return e.EventID }
func (e InventoryReleased) ID() string          { return e.EventID }
func (e OrderConfirmed) ID() string             { return e.EventID }
func (e OrderFailed) ID() string                { return e.EventID }

func (e OrderStarted) Order() string               { return e.OrderID }
func (e InventoryReserved) Order() string          { return e.OrderID }
func (e InventoryReservationFailed) Order() string { return e.OrderID }
func (e PaymentAuthorized) Order() string          { return e.OrderID }
func (e PaymentFailed) Order() string              { return e.OrderID }
func (e InventoryReleased) Order() string          { return e.OrderID }
func (e OrderConfirmed) Order() string             { return e.OrderID }
func (e OrderFailed) Order() string                { return e.OrderID }

func (OrderStarted) isEvent()               {}
func (InventoryReserved) isEvent()          {}
func (InventoryReservationFailed) isEvent() {}
func (PaymentAuthorized) isEvent()          {}
func (PaymentFailed) isEvent()              {}
func (InventoryReleased) isEvent()          {}
func (OrderConfirmed) isEvent()             {}
func (OrderFailed) isEvent()                {}

// value turns a pointer event into its value so that Apply has one case
// per event; ok is false for a nil event or nil pointer.
func value(e Event) (ev Event, ok bool) {
	switch p := e.(type) {
	case nil:
		return nil, false
	case *OrderStarted:
		return deref(p)
	case *InventoryReserved:
		return deref(p)
	case *InventoryReservationFailed:
		return deref(p)
	case *PaymentAuthorized:
		return deref(p)
	case *PaymentFailed:
		return deref(p)
	case *InventoryReleased:
		return deref(p)
	case *OrderConfirmed:
		return deref(p)
	case *OrderFailed:
		return deref(p)
	}
	return e, true
}

func deref[T Event](p *T) (Event, bool) {
	if p == nil {
		return nil, false
	}
	return *p, true
}
