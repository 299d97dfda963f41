package workflow

import (
	"encoding/json"
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
	return eventType, addBuildFields(eventType, data), nil
}

// Upcaster turns one event body of schema From into the shape of schema
// From+1. Up gets the body as its top-level JSON fields and may rename,
// add or remove them; what it leaves is decoded by the next step, the
// last one by the current contract message.
type Upcaster struct {
	From int
	// EventType is the event the step applies to; empty: every event.
	EventType string
	Up        func(body map[string]json.RawMessage) error
}

// Downcaster turns one event body of schema From into the shape of
// schema From-1: what a writer whose build writes From stamps while the
// compatibility level is below it (cluster/compat). A version that adds
// an optional field registers one that removes it, so that the field is
// written only once the level allows it; a version that reshapes a field
// registers one that undoes its Upcaster.
type Downcaster struct {
	From int
	// EventType is the event the step applies to; empty: every event.
	EventType string
	Down      func(body map[string]json.RawMessage) error
}

// Codec decodes stored event bodies of every schema up to Schema: a body
// of an older schema goes through the Upcasters from its version up, one
// of Schema is decoded as it is, and one of a newer schema is refused
// with ErrVersionUnsupported. Within a known schema the reader is
// tolerant: a field it does not know is ignored, which is what lets a
// writer of schema N+1 add an optional field that a reader of N+1 on
// another build may not have. The HTTP edge stays strict about what
// clients send; only stored bodies are read this way.
type Codec struct {
	Schema      int
	Upcasters   []Upcaster
	Downcasters []Downcaster
}

// Events is the codec of this build.
var Events = Codec{Schema: SchemaVersion, Upcasters: buildUpcasters, Downcasters: buildDowncasters}

// DecodeEvent is Events.Decode.
func DecodeEvent(eventType string, schema int, data []byte) (order.Event, error) {
	return Events.Decode(eventType, schema, data)
}

// Decode reads a stored event body of the given type, written under
// schema (0 is the first schema, as entries that predate the version
// carry), back into a domain event. A newer schema than c reads is
// ErrVersionUnsupported, and nothing is decoded; an unknown type or an
// undecodable body is an error wrapping eventstore.ErrCorrupt: the stream
// holds something no build of this workflow wrote.
func (c Codec) Decode(eventType string, schema int, data []byte) (order.Event, error) {
	if schema == 0 {
		schema = 1
	}
	switch {
	case schema > c.Schema:
		return nil, fmt.Errorf("%w: %s of schema %d, this build reads up to %d", ErrVersionUnsupported, eventType, schema, c.Schema)
	case schema < 1:
		return nil, fmt.Errorf("%w: %s of schema %d", eventstore.ErrCorrupt, eventType, schema)
	case schema < c.Schema:
		up, err := c.upcast(eventType, schema, data)
		if err != nil {
			return nil, err
		}
		data = up
	}
	if err := checkBuildFields(c.Schema, eventType, data); err != nil {
		return nil, fmt.Errorf("%w: decode %s: %w", eventstore.ErrCorrupt, eventType, err)
	}
	unmarshal := func(m proto.Message) error {
		if err := contracts.UnmarshalStoredJSON(data, m); err != nil {
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

// Encode is EncodeEvent written as schema: the event in this build's
// shape (c.Schema), taken down through the Downcasters from c.Schema to
// schema. A schema above c.Schema or below 1 is ErrInvalidArgument: a
// build writes no schema it does not read.
func (c Codec) Encode(e order.Event, schema int) (eventType string, data []byte, err error) {
	if schema < 1 || schema > c.Schema {
		return "", nil, fmt.Errorf("%w: cannot write schema %d, this build writes 1 to %d", ErrInvalidArgument, schema, c.Schema)
	}
	if eventType, data, err = EncodeEvent(e); err != nil || schema == c.Schema {
		return eventType, data, err
	}
	var steps []reshape
	for v := c.Schema; v > schema; v-- {
		for _, d := range c.Downcasters {
			if d.From == v && (d.EventType == "" || d.EventType == eventType) {
				steps = append(steps, reshape{from: v, fn: d.Down})
			}
		}
	}
	if data, err = reshapeBody(eventType, data, steps); err != nil {
		return "", nil, fmt.Errorf("%w: writing %s as schema %d: %w", ErrInvalidArgument, eventType, schema, err)
	}
	return eventType, data, nil
}

// upcast runs the upcasters from schema up to c.Schema over data. A step
// with no upcaster for the type leaves the body as it is: that version
// only added fields.
func (c Codec) upcast(eventType string, schema int, data []byte) ([]byte, error) {
	var steps []reshape
	for v := schema; v < c.Schema; v++ {
		for _, u := range c.Upcasters {
			if u.From == v && (u.EventType == "" || u.EventType == eventType) {
				steps = append(steps, reshape{from: v, fn: u.Up})
			}
		}
	}
	out, err := reshapeBody(eventType, data, steps)
	if err != nil {
		return nil, fmt.Errorf("%w: upcasting %s from schema %d: %w", eventstore.ErrCorrupt, eventType, schema, err)
	}
	return out, nil
}

// reshape is one up- or downcasting step, from the schema it reads.
type reshape struct {
	from int
	fn   func(body map[string]json.RawMessage) error
}

// reshapeBody runs steps over data as a JSON object, in order; none
// leaves data as it is.
func reshapeBody(eventType string, data []byte, steps []reshape) ([]byte, error) {
	if len(steps) == 0 {
		return data, nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(data, &body); err != nil || body == nil {
		return nil, fmt.Errorf("%s is not a JSON object: %v", eventType, err)
	}
	for _, st := range steps {
		if err := st.fn(body); err != nil {
			return nil, fmt.Errorf("the step from schema %d: %w", st.from, err)
		}
	}
	return json.Marshal(body)
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

// EncodeEnvelope is the stored form of a first activation envelope (the
// Relocation Store keeps it as opaque bytes): the request's protobuf
// encoding.
func EncodeEnvelope(req *contracts.StartOrderWorkflowReq) ([]byte, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: encode first envelope of order %s: %w", ErrInvalidArgument, req.GetOrderId(), err)
	}
	return b, nil
}

// DecodeEnvelope reads what EncodeEnvelope stored for orderID.
func DecodeEnvelope(orderID string, b []byte) (*contracts.StartOrderWorkflowReq, error) {
	req := &contracts.StartOrderWorkflowReq{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("first activation envelope of %s: %w", orderID, err)
	}
	return req, nil
}
