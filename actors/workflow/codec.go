package workflow

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// EncodeEvent turns a domain event into the stream's eventType and body:
// the contract event message in the contract JSON codec, so every language
// reads the same bytes.
func EncodeEvent(e order.Event) (eventType string, data []byte, err error) {
	e = eventValue(e)
	if e == nil {
		return "", nil, fmt.Errorf("%w: nil event", ErrInvalidArgument)
	}
	var m proto.Message
	switch e := e.(type) {
	case order.OrderStarted:
		m, eventType = &contracts.OrderStartedEvent{
			EventId: e.EventID, OrderId: e.OrderID, CartId: e.CartID,
			ShippingAddressId: e.ShippingAddressID, Lines: contractLines(e.Lines),
			Amount: e.Amount, Currency: e.Currency, SourceCommandId: e.SourceCommandID,
		}, order.TypeOrderStarted
	case order.InventoryReserved:
		m, eventType = &contracts.InventoryReservedEvent{
			EventId: e.EventID, OrderId: e.OrderID, ReservationId: e.ReservationID,
		}, order.TypeInventoryReserved
	case order.InventoryReservationFailed:
		m, eventType = &contracts.InventoryReservationFailedEvent{
			EventId: e.EventID, OrderId: e.OrderID, Reason: e.Reason,
		}, order.TypeInventoryReservationFailed
	case order.PaymentAuthorized:
		m, eventType = &contracts.PaymentAuthorizedEvent{
			EventId: e.EventID, OrderId: e.OrderID, PaymentId: e.PaymentID,
		}, order.TypePaymentAuthorized
	case order.PaymentFailed:
		m, eventType = &contracts.PaymentFailedEvent{
			EventId: e.EventID, OrderId: e.OrderID, Reason: e.Reason,
		}, order.TypePaymentFailed
	case order.InventoryReleased:
		m, eventType = &contracts.InventoryReleasedEvent{
			EventId: e.EventID, OrderId: e.OrderID, ReservationId: e.ReservationID, Reason: e.Reason,
		}, order.TypeInventoryReleased
	case order.OrderConfirmed:
		m, eventType = &contracts.OrderConfirmedEvent{
			EventId: e.EventID, OrderId: e.OrderID, ConfirmedAtUnixMs: e.ConfirmedAtUnixMs,
		}, order.TypeOrderConfirmed
	case order.OrderFailed:
		m, eventType = &contracts.OrderFailedEvent{
			EventId: e.EventID, OrderId: e.OrderID, Reason: e.Reason, FailedAtUnixMs: e.FailedAtUnixMs,
		}, order.TypeOrderFailed
	default:
		return "", nil, fmt.Errorf("%w: cannot encode event %T", ErrInvalidArgument, e)
	}
	data, err = contracts.MarshalJSON(m)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s: %w", eventType, err)
	}
	return eventType, data, nil
}

// DecodeEvent reads a stored event body of the given type back into a
// domain event. An unknown type or an undecodable body is an error wrapping
// eventstore.ErrCorrupt: the stream holds something this code never wrote.
func DecodeEvent(eventType string, data []byte) (order.Event, error) {
	unmarshal := func(m proto.Message) error {
		if err := contracts.UnmarshalJSON(data, m); err != nil {
			return fmt.Errorf("%w: decode %s: %w", eventstore.ErrCorrupt, eventType, err)
		}
		return nil
	}
	switch eventType {
	case order.TypeOrderStarted:
		var m contracts.OrderStartedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.OrderStarted{
			EventID: m.EventId, OrderID: m.OrderId, CartID: m.CartId,
			ShippingAddressID: m.ShippingAddressId, Lines: domainLines(m.Lines),
			Amount: m.Amount, Currency: m.Currency, SourceCommandID: m.SourceCommandId,
		}, nil
	case order.TypeInventoryReserved:
		var m contracts.InventoryReservedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.InventoryReserved{EventID: m.EventId, OrderID: m.OrderId, ReservationID: m.ReservationId}, nil
	case order.TypeInventoryReservationFailed:
		var m contracts.InventoryReservationFailedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.InventoryReservationFailed{EventID: m.EventId, OrderID: m.OrderId, Reason: m.Reason}, nil
	case order.TypePaymentAuthorized:
		var m contracts.PaymentAuthorizedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.PaymentAuthorized{EventID: m.EventId, OrderID: m.OrderId, PaymentID: m.PaymentId}, nil
	case order.TypePaymentFailed:
		var m contracts.PaymentFailedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.PaymentFailed{EventID: m.EventId, OrderID: m.OrderId, Reason: m.Reason}, nil
	case order.TypeInventoryReleased:
		var m contracts.InventoryReleasedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.InventoryReleased{EventID: m.EventId, OrderID: m.OrderId, ReservationID: m.ReservationId, Reason: m.Reason}, nil
	case order.TypeOrderConfirmed:
		var m contracts.OrderConfirmedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.OrderConfirmed{EventID: m.EventId, OrderID: m.OrderId, ConfirmedAtUnixMs: m.ConfirmedAtUnixMs}, nil
	case order.TypeOrderFailed:
		var m contracts.OrderFailedEvent
		if err := unmarshal(&m); err != nil {
			return nil, err
		}
		return order.OrderFailed{EventID: m.EventId, OrderID: m.OrderId, Reason: m.Reason, FailedAtUnixMs: m.FailedAtUnixMs}, nil
	}
	return nil, fmt.Errorf("%w: unknown event type %q", eventstore.ErrCorrupt, eventType)
}

func contractLines(ls []order.Line) []*contracts.OrderLine {
	out := make([]*contracts.OrderLine, len(ls))
	for i, l := range ls {
		out[i] = &contracts.OrderLine{Sku: l.SKU, Quantity: l.Quantity}
	}
	return out
}

func domainLines(ls []*contracts.OrderLine) []order.Line {
	out := make([]order.Line, len(ls))
	for i, l := range ls {
		out[i] = order.Line{SKU: l.GetSku(), Quantity: l.GetQuantity()}
	}
	return out
}

// eventValue turns a pointer event into its value (the domain accepts
// both), and a nil pointer into nil.
func eventValue(e order.Event) order.Event {
	switch p := e.(type) {
	case *order.OrderStarted:
		return deref(p)
	case *order.InventoryReserved:
		return deref(p)
	case *order.InventoryReservationFailed:
		return deref(p)
	case *order.PaymentAuthorized:
		return deref(p)
	case *order.PaymentFailed:
		return deref(p)
	case *order.InventoryReleased:
		return deref(p)
	case *order.OrderConfirmed:
		return deref(p)
	case *order.OrderFailed:
		return deref(p)
	}
	return e
}

func deref[T order.Event](p *T) order.Event {
	if p == nil {
		return nil
	}
	return *p
}
