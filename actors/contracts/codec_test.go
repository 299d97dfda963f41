package contracts

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func mustMarshal(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := MarshalJSON(m)
	require.NoError(t, err, "MarshalJSON(%v)", m)
	return string(b)
}

func TestMarshalOrderStateOptionalsUnsetAreAbsent(t *testing.T) {
	got := mustMarshal(t, &OrderState{OrderId: "ord-1", Status: OrderStatus_Created, UpdatedAtUnixMs: 1767225600123})
	const want = `{"orderId":"ord-1","status":"Created","updatedAtUnixMs":1767225600123}`
	require.Equal(t, want, got)

	dec := json.NewDecoder(strings.NewReader(got))
	dec.UseNumber()
	var obj map[string]any
	require.NoError(t, dec.Decode(&obj))
	for _, k := range []string{"shippingAddressId", "reservationId", "paymentId", "amount", "currency", "reason"} {
		assert.NotContains(t, obj, k, "an unset optional is absent")
	}
	assert.Equal(t, "Created", obj["status"])
	assert.Equal(t, json.Number("1767225600123"), obj["updatedAtUnixMs"], "updatedAtUnixMs is a JSON number")
}

func TestMarshalOptionalSetToZeroIsPresent(t *testing.T) {
	got := mustMarshal(t, &OrderState{
		OrderId: "ord-1", Status: OrderStatus_Failed, Amount: proto.Int64(0), Reason: proto.String(""),
	})
	const want = `{"orderId":"ord-1","status":"Failed","amount":0,"reason":"","updatedAtUnixMs":0}`
	require.Equal(t, want, got)
}

func TestMarshalFalseBoolsAreWritten(t *testing.T) {
	cases := []struct {
		msg  proto.Message
		want string
	}{
		{&ReserveInventoryRes{Accepted: false}, `{"accepted":false}`},
		{&ReserveInventoryRes{Accepted: false, Reason: proto.String("out of stock")}, `{"accepted":false,"reason":"out of stock"}`},
		{&AuthorizePaymentRes{}, `{"accepted":false}`},
		{&ReleaseInventoryRes{}, `{"released":false}`},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, mustMarshal(t, c.msg), "%T", c.msg)
	}
}

func TestMarshalZeroScalarsAndEmptyListsArePresent(t *testing.T) {
	got := mustMarshal(t, &StartOrderWorkflowReq{OrderId: "ord-1"})
	const want = `{"orderId":"ord-1","cartId":"","shippingAddressId":"","paymentMethodId":"","idempotencyKey":"",` +
		`"sourceCommandId":"","lines":[],"amount":0,"currency":""}`
	require.Equal(t, want, got)
	require.Equal(t, `{"sku":"","quantity":0}`, mustMarshal(t, &OrderLine{}))
}

func TestMarshalUnsetNestedMessageIsAbsent(t *testing.T) {
	assert.Equal(t, `{}`, mustMarshal(t, &GetOrderStateRes{}))
	assert.Equal(t, `{"orderId":"ord-1"}`, mustMarshal(t, &StartOrderRes{OrderId: "ord-1"}), "StartOrderRes without state")
}

func TestMarshalInt64ExtremesAreExactNumbers(t *testing.T) {
	m := &OrderState{
		OrderId: "ord-1", Status: OrderStatus_Confirmed,
		Amount: proto.Int64(math.MaxInt64), UpdatedAtUnixMs: math.MinInt64,
	}
	got := mustMarshal(t, m)
	for _, frag := range []string{
		`"amount":` + strconv.FormatInt(math.MaxInt64, 10) + `,`,
		`"updatedAtUnixMs":` + strconv.FormatInt(math.MinInt64, 10) + `}`,
	} {
		assert.Contains(t, got, frag)
	}
	back := &OrderState{}
	require.NoError(t, UnmarshalJSON([]byte(got), back))
	require.True(t, proto.Equal(back, m), "round trip lost precision: %v", back)
}

func TestMarshalStatusIsItsSpecName(t *testing.T) {
	for _, name := range []string{"Created", "InventoryReserved", "PaymentAuthorized", "Confirmed", "Failed"} {
		s := OrderStatus(OrderStatus_value[name])
		assert.True(t, ValidStatus(s), "ValidStatus(%s)", name)
		assert.Equal(t, `{"orderId":"o","status":"`+name+`","updatedAtUnixMs":0}`, mustMarshal(t, &OrderState{OrderId: "o", Status: s}))
	}
}

func TestValidStatusRejectsOthers(t *testing.T) {
	for _, s := range []OrderStatus{OrderStatus_ORDER_STATUS_UNSPECIFIED, 6, -1, 99} {
		assert.False(t, ValidStatus(s), "ValidStatus(%d)", s)
	}
}

func TestMarshalRejectsWhatTheSpecCannotExpress(t *testing.T) {
	var nilState *OrderState
	cases := map[string]struct {
		m proto.Message
		// at is where the error says the value is.
		at string
	}{
		"nil interface":          {nil, "nil message"},
		"typed nil":              {nilState, "nil shoppingmall.contracts.v1.OrderState"},
		"unset status":           {&OrderState{OrderId: "o"}, "OrderState.status: enum OrderStatus is unset"},
		"undeclared status":      {&OrderState{OrderId: "o", Status: 42}, "OrderState.status: enum OrderStatus has no value 42"},
		"unset status in nested": {&GetOrderStateRes{State: &OrderState{OrderId: "o"}}, "GetOrderStateRes.state.status: enum OrderStatus is unset"},
		"unset error reason":     {&WorkflowError{Message: "x"}, "WorkflowError.reason: enum"},
		"invalid UTF-8":          {&GetOrderStateReq{OrderId: "o\xff"}, "GetOrderStateReq.orderId: invalid UTF-8"},
		"invalid UTF-8 in list": {&ReserveInventoryReq{Lines: []*OrderLine{{Sku: "a"}, {Sku: "\xc3"}}},
			"ReserveInventoryReq.lines[1].sku: invalid UTF-8"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := MarshalJSON(c.m)
			require.ErrorIs(t, err, ErrUnencodable, "output %s", b)
			require.ErrorContains(t, err, c.at)
			require.Nil(t, b, "no partial output with the error")
		})
	}
}

func TestMarshalEscapesStrings(t *testing.T) {
	m := &PaymentFailedEvent{EventId: "e", OrderId: "o", Reason: "say \"no\"\\ \n\t\x01 <é> & 決済"}
	got := mustMarshal(t, m)
	const want = `{"eventId":"e","orderId":"o","reason":"say \"no\"\\ \n\t\u0001 <é> & 決済"}`
	require.Equal(t, want, got)
	require.True(t, json.Valid([]byte(got)), "not valid JSON: %s", got)
	back := &PaymentFailedEvent{}
	require.NoError(t, UnmarshalJSON([]byte(got), back))
	require.True(t, proto.Equal(back, m), "round trip: got %q", back.GetReason())
}

func TestUnmarshalRejects(t *testing.T) {
	cases := []struct {
		name, in string
	}{
		{"empty input", ``},
		{"not an object", `[]`},
		{"unknown field", `{"orderId":"o","status":"Created","updatedAtUnixMs":1,"extra":1}`},
		{"trailing object", `{"orderId":"o","status":"Created","updatedAtUnixMs":1}{}`},
		{"trailing garbage", `{"orderId":"o","status":"Created","updatedAtUnixMs":1} x`},
		{"trailing comma", `{"orderId":"o","status":"Created","updatedAtUnixMs":1},`},
		{"truncated", `{"orderId":"o","status":"Created"`},
		{"duplicate field", `{"orderId":"o","orderId":"p","status":"Created","updatedAtUnixMs":1}`},
		{"missing status", `{"orderId":"o","updatedAtUnixMs":1}`},
		{"placeholder status", `{"orderId":"o","status":"ORDER_STATUS_UNSPECIFIED","updatedAtUnixMs":1}`},
		{"status of wrong case", `{"orderId":"o","status":"created","updatedAtUnixMs":1}`},
		{"undeclared status number", `{"orderId":"o","status":42,"updatedAtUnixMs":1}`},
		{"fractional int64", `{"orderId":"o","status":"Created","updatedAtUnixMs":1.5}`},
		{"number for string field", `{"orderId":1,"status":"Created","updatedAtUnixMs":1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &OrderState{OrderId: "stale", Status: OrderStatus_Confirmed}
			require.ErrorIs(t, UnmarshalJSON([]byte(c.in), m), ErrInvalidJSON, "UnmarshalJSON(%s)", c.in)
			require.True(t, proto.Equal(m, &OrderState{}), "target not reset after error: %v", m)
		})
	}
	t.Run("nested missing status", func(t *testing.T) {
		err := UnmarshalJSON([]byte(`{"state":{"orderId":"o"}}`), &GetOrderStateRes{})
		require.ErrorIs(t, err, ErrInvalidJSON)
		require.ErrorContains(t, err, "GetOrderStateRes.state.status: OrderStatus missing, unset or undeclared")
	})
	t.Run("nil target", func(t *testing.T) {
		require.ErrorIs(t, UnmarshalJSON([]byte(`{}`), nil), ErrInvalidJSON)
	})
}

func TestUnmarshalAccepts(t *testing.T) {
	cases := []struct {
		name, in string
		want     proto.Message
		into     proto.Message
	}{
		{
			"trailing whitespace", "{\"orderId\":\"o\",\"status\":\"Created\",\"updatedAtUnixMs\":7}\r\n \t",
			&OrderState{OrderId: "o", Status: OrderStatus_Created, UpdatedAtUnixMs: 7}, &OrderState{},
		},
		{
			"null optional is absent", `{"orderId":"o","status":"Failed","reason":null,"amount":null,"updatedAtUnixMs":7}`,
			&OrderState{OrderId: "o", Status: OrderStatus_Failed, UpdatedAtUnixMs: 7}, &OrderState{},
		},
		{
			"missing bool reads as false", `{}`,
			&ReserveInventoryRes{}, &ReserveInventoryRes{},
		},
		{
			"false bool with reason", `{"accepted":false,"reason":"out of stock"}`,
			&ReserveInventoryRes{Reason: proto.String("out of stock")}, &ReserveInventoryRes{},
		},
		{
			"empty lines", `{"orderId":"o","reservationId":"r","lines":[]}`,
			&ReserveInventoryReq{OrderId: "o", ReservationId: "r"}, &ReserveInventoryReq{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, UnmarshalJSON([]byte(c.in), c.into), "UnmarshalJSON(%s)", c.in)
			require.True(t, proto.Equal(c.into, c.want), "got %v, want %v", c.into, c.want)
		})
	}
	t.Run("null optional really unset", func(t *testing.T) {
		m := &OrderState{}
		require.NoError(t, UnmarshalJSON([]byte(`{"orderId":"o","status":"Failed","reason":null,"updatedAtUnixMs":1}`), m))
		require.Nil(t, m.Reason, "a null reason stays unset")
	})
}

// TestMarshalIsStable guards against anything map-ordered or randomised in
// the encoder: golden files and HTTP clients both rely on identical bytes.
func TestMarshalIsStable(t *testing.T) {
	for name, m := range fixtures() {
		first, err := MarshalJSON(m)
		require.NoError(t, err, name)
		for range 20 {
			again, err := MarshalJSON(proto.Clone(m))
			require.NoError(t, err, name)
			require.Equal(t, string(first), string(again), "%s: output changed between calls", name)
		}
	}
}
