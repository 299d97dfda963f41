package workflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// A stored body is read tolerantly within a schema the reader knows, and
// refused, never half-read, when its schema is newer than the reader's.
func TestStoredBodiesAreReadByTheirSchemaVersion(t *testing.T) {
	confirmed := order.OrderConfirmed{EventID: "e", OrderID: "o", ConfirmedAtUnixMs: 7}
	for _, tc := range []struct {
		name   string
		schema int
		body   string
		want   order.Event
		err    error
	}{
		{"this build's schema", workflow.SchemaVersion, `{"eventId":"e","orderId":"o","confirmedAtUnixMs":7}`, confirmed, nil},
		{"an entry that predates the version is schema 1", 0, `{"eventId":"e","orderId":"o","confirmedAtUnixMs":7}`, confirmed, nil},
		{"a field this build does not know, in a schema it knows", workflow.SchemaVersion,
			`{"eventId":"e","orderId":"o","confirmedAtUnixMs":7,"deliveryWindow":{"from":1,"to":2}}`, confirmed, nil},
		{"a newer schema is refused", workflow.SchemaVersion + 1, `{"eventId":"e","orderId":"o","confirmedAtUnixMs":7}`, nil, workflow.ErrVersionUnsupported},
		{"a malformed body is corrupt", workflow.SchemaVersion, `{"eventId":"e","orderId":"o","confirmedAtUnixMs":"soon"}`, nil, eventstore.ErrCorrupt},
		{"a negative schema is corrupt", -1, `{}`, nil, eventstore.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := workflow.DecodeEvent(order.TypeOrderConfirmed, tc.schema, []byte(tc.body))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Nil(t, got, "nothing is decoded from a body that is refused")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := workflow.DecodeEvent(order.TypeOrderConfirmed, workflow.SchemaVersion+1, []byte(`{}`))
	require.Equal(t, errkind.VersionUnsupported, errkind.Of(err), "a newer schema is an outage of this build (503 VERSION_UNSUPPORTED), not a corrupt order")
}

// The upcaster chain: schema 1 of a test-only history named
// OrderFailedEvent's reason "why" and had no failedAtUnixMs; schema 2
// renamed it to today's "reason", and schema 3 only added an optional
// field (no upcaster). A body of each version decodes to the same event.
func TestUpcastersTurnOlderSchemasIntoTheCurrentShape(t *testing.T) {
	rename := func(from, to string) func(map[string]json.RawMessage) error {
		return func(b map[string]json.RawMessage) error {
			v, ok := b[from]
			if !ok {
				return errors.New("no " + from)
			}
			delete(b, from)
			b[to] = v
			return nil
		}
	}
	c := workflow.Codec{Schema: 3, Upcasters: []workflow.Upcaster{
		{From: 1, EventType: order.TypeOrderFailed, Up: rename("why", "reason")},
		{From: 1, EventType: order.TypeOrderFailed, Up: func(b map[string]json.RawMessage) error {
			if _, ok := b["failedAtUnixMs"]; !ok {
				b["failedAtUnixMs"] = json.RawMessage("0")
			}
			return nil
		}},
	}}
	want := order.OrderFailed{EventID: "e", OrderID: "o", Reason: "declined"}
	for schema, body := range map[int]string{
		1: `{"eventId":"e","orderId":"o","why":"declined"}`,
		2: `{"eventId":"e","orderId":"o","reason":"declined","failedAtUnixMs":0}`,
		3: `{"eventId":"e","orderId":"o","reason":"declined","failedAtUnixMs":0,"retryable":false}`,
	} {
		got, err := c.Decode(order.TypeOrderFailed, schema, []byte(body))
		require.NoError(t, err, "schema %d", schema)
		require.Equal(t, want, got, "schema %d", schema)
	}
	// The chain applies to its event type only: another event of schema 1
	// is decoded as it is.
	got, err := c.Decode(order.TypeOrderConfirmed, 1, []byte(`{"eventId":"e","orderId":"o","confirmedAtUnixMs":7}`))
	require.NoError(t, err)
	require.Equal(t, order.OrderConfirmed{EventID: "e", OrderID: "o", ConfirmedAtUnixMs: 7}, got)
	// A step that cannot apply is corrupt, not a silent default.
	_, err = c.Decode(order.TypeOrderFailed, 1, []byte(`{"eventId":"e","orderId":"o","reason":"declined"}`))
	require.ErrorIs(t, err, eventstore.ErrCorrupt)
	_, err = c.Decode(order.TypeOrderFailed, 4, []byte(`{}`))
	require.ErrorIs(t, err, workflow.ErrVersionUnsupported)
}

// A writer below its build's schema takes the body down through the
// Downcasters of its event type, newest first, to the schema it stamps;
// a schema it does not read, or none, is refused.
func TestDowncastersWriteTheSchemaTheLevelAllows(t *testing.T) {
	var steps []string
	drop := func(field string, from int) func(map[string]json.RawMessage) error {
		return func(b map[string]json.RawMessage) error {
			steps = append(steps, fmt.Sprintf("%d:%s", from, field))
			if _, ok := b[field]; !ok {
				return errors.New("no " + field)
			}
			delete(b, field)
			return nil
		}
	}
	c := workflow.Codec{Schema: 3, Downcasters: []workflow.Downcaster{
		{From: 2, EventType: order.TypeOrderFailed, Down: drop("failedAtUnixMs", 2)},
		{From: 3, EventType: order.TypeOrderFailed, Down: drop("reason", 3)},
		{From: 3, EventType: order.TypeOrderConfirmed, Down: drop("confirmedAtUnixMs", 3)},
	}}
	e := order.OrderFailed{EventID: "e", OrderID: "o", Reason: "declined", FailedAtUnixMs: 7}

	typ, body, err := c.Encode(e, 3)
	require.NoError(t, err)
	require.Equal(t, order.TypeOrderFailed, typ)
	require.JSONEq(t, `{"eventId":"e","orderId":"o","reason":"declined","failedAtUnixMs":7}`, string(body))
	require.Empty(t, steps, "the build's own schema is written as it is")

	_, body, err = c.Encode(e, 1)
	require.NoError(t, err)
	require.JSONEq(t, `{"eventId":"e","orderId":"o"}`, string(body))
	require.Equal(t, []string{"3:reason", "2:failedAtUnixMs"}, steps, "newest first, this event's only")

	steps = nil
	_, body, err = c.Encode(order.OrderConfirmed{EventID: "e", OrderID: "o", ConfirmedAtUnixMs: 7}, 2)
	require.NoError(t, err)
	require.JSONEq(t, `{"eventId":"e","orderId":"o"}`, string(body))
	require.Equal(t, []string{"3:confirmedAtUnixMs"}, steps)

	for _, schema := range []int{0, 4} {
		_, _, err = c.Encode(e, schema)
		require.ErrorIs(t, err, workflow.ErrInvalidArgument, "schema %d", schema)
	}
	// A step that cannot apply refuses the write instead of stamping an
	// older schema on a body of the newer shape.
	bad := workflow.Codec{Schema: 2, Downcasters: []workflow.Downcaster{{From: 2, Down: drop("absent", 2)}}}
	_, _, err = bad.Encode(e, 1)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
}

// The first activation envelope crosses builds: one a newer build saved,
// with a field this build does not declare, is read with every field it
// knows, so an order started on a newer member continues on an older one
// (at a level both read).
func TestAFirstEnvelopeOfANewerBuildIsRead(t *testing.T) {
	req := &contracts.StartOrderWorkflowReq{OrderId: "o1", CartId: "c1", ShippingAddressId: "a1", PaymentMethodId: "pm",
		SourceCommandId: "cmd", Amount: 12900, Currency: "EUR", Lines: []*contracts.OrderLine{{Sku: "s", Quantity: 2}}}
	b, err := workflow.EncodeEnvelope(req)
	require.NoError(t, err)
	// Field 99, a varint: what a newer request's extra field encodes to.
	b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 1)
	got, err := workflow.DecodeEnvelope("o1", b)
	require.NoError(t, err)
	require.Equal(t, req.GetPaymentMethodId(), got.GetPaymentMethodId())
	require.Equal(t, req.GetAmount(), got.GetAmount())
	require.Equal(t, req.GetLines()[0].GetQuantity(), got.GetLines()[0].GetQuantity())
	require.Equal(t, req.GetSourceCommandId(), got.GetSourceCommandId())
}
