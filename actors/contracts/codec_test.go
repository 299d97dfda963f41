package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

func mustMarshal(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := MarshalJSON(m)
	if err != nil {
		t.Fatalf("MarshalJSON(%v): %v", m, err)
	}
	return string(b)
}

func TestMarshalOrderStateOptionalsUnsetAreAbsent(t *testing.T) {
	got := mustMarshal(t, &OrderState{OrderId: "ord-1", Status: OrderStatus_Created, UpdatedAtUnixMs: 1767225600123})
	const want = `{"orderId":"ord-1","status":"Created","updatedAtUnixMs":1767225600123}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}

	dec := json.NewDecoder(strings.NewReader(got))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"shippingAddressId", "reservationId", "paymentId", "amount", "currency", "reason"} {
		if _, ok := obj[k]; ok {
			t.Errorf("unset optional %q is present", k)
		}
	}
	if obj["status"] != "Created" {
		t.Errorf("status = %#v, want \"Created\"", obj["status"])
	}
	n, ok := obj["updatedAtUnixMs"].(json.Number)
	if !ok || n.String() != "1767225600123" {
		t.Errorf("updatedAtUnixMs = %#v, want the JSON number 1767225600123", obj["updatedAtUnixMs"])
	}
}

func TestMarshalOptionalSetToZeroIsPresent(t *testing.T) {
	got := mustMarshal(t, &OrderState{
		OrderId: "ord-1", Status: OrderStatus_Failed, Amount: proto.Int64(0), Reason: proto.String(""),
	})
	const want = `{"orderId":"ord-1","status":"Failed","amount":0,"reason":"","updatedAtUnixMs":0}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
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
		if got := mustMarshal(t, c.msg); got != c.want {
			t.Errorf("%T: got %s, want %s", c.msg, got, c.want)
		}
	}
}

func TestMarshalZeroScalarsAndEmptyListsArePresent(t *testing.T) {
	got := mustMarshal(t, &StartOrderWorkflowReq{OrderId: "ord-1"})
	const want = `{"orderId":"ord-1","cartId":"","shippingAddressId":"","paymentMethodId":"","idempotencyKey":"",` +
		`"sourceCommandId":"","lines":[],"amount":0,"currency":""}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if got := mustMarshal(t, &OrderLine{}); got != `{"sku":"","quantity":0}` {
		t.Fatalf("OrderLine{}: got %s", got)
	}
}

func TestMarshalUnsetNestedMessageIsAbsent(t *testing.T) {
	if got := mustMarshal(t, &GetOrderStateRes{}); got != `{}` {
		t.Errorf("GetOrderStateRes{}: got %s, want {}", got)
	}
	if got := mustMarshal(t, &StartOrderRes{OrderId: "ord-1"}); got != `{"orderId":"ord-1"}` {
		t.Errorf("StartOrderRes without state: got %s", got)
	}
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
		if !strings.Contains(got, frag) {
			t.Errorf("%s lacks %s", got, frag)
		}
	}
	back := &OrderState{}
	if err := UnmarshalJSON([]byte(got), back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("round trip lost precision: %v", back)
	}
}

func TestMarshalStatusIsItsSpecName(t *testing.T) {
	for _, name := range []string{"Created", "InventoryReserved", "PaymentAuthorized", "Confirmed", "Failed"} {
		s := OrderStatus(OrderStatus_value[name])
		if !ValidStatus(s) {
			t.Errorf("ValidStatus(%s) = false", name)
		}
		got := mustMarshal(t, &OrderState{OrderId: "o", Status: s})
		if want := `{"orderId":"o","status":"` + name + `","updatedAtUnixMs":0}`; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

func TestValidStatusRejectsOthers(t *testing.T) {
	for _, s := range []OrderStatus{OrderStatus_ORDER_STATUS_UNSPECIFIED, 6, -1, 99} {
		if ValidStatus(s) {
			t.Errorf("ValidStatus(%d) = true", s)
		}
	}
}

func TestMarshalRejectsWhatTheSpecCannotExpress(t *testing.T) {
	var nilState *OrderState
	cases := map[string]proto.Message{
		"nil interface":          nil,
		"typed nil":              nilState,
		"unset status":           &OrderState{OrderId: "o"},
		"undeclared status":      &OrderState{OrderId: "o", Status: 42},
		"unset status in nested": &GetOrderStateRes{State: &OrderState{OrderId: "o"}},
		"unset error reason":     &WorkflowError{Message: "x"},
		"invalid UTF-8":          &GetOrderStateReq{OrderId: "o\xff"},
		"invalid UTF-8 in list":  &ReserveInventoryReq{Lines: []*OrderLine{{Sku: "\xc3"}}},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := MarshalJSON(m)
			if !errors.Is(err, ErrUnencodable) {
				t.Fatalf("MarshalJSON = %s, %v; want ErrUnencodable", b, err)
			}
			if b != nil {
				t.Fatalf("partial output %q returned with error", b)
			}
		})
	}
}

func TestMarshalEscapesStrings(t *testing.T) {
	m := &PaymentFailedEvent{EventId: "e", OrderId: "o", Reason: "say \"no\"\\ \n\t\x01 <é> & 決済"}
	got := mustMarshal(t, m)
	const want = `{"eventId":"e","orderId":"o","reason":"say \"no\"\\ \n\t\u0001 <é> & 決済"}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Fatalf("not valid JSON: %s", got)
	}
	back := &PaymentFailedEvent{}
	if err := UnmarshalJSON([]byte(got), back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("round trip: got %q", back.GetReason())
	}
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
			err := UnmarshalJSON([]byte(c.in), m)
			if !errors.Is(err, ErrInvalidJSON) {
				t.Fatalf("UnmarshalJSON(%s) = %v; want ErrInvalidJSON", c.in, err)
			}
			if !proto.Equal(m, &OrderState{}) {
				t.Fatalf("target not reset after error: %v", m)
			}
		})
	}
	t.Run("nested missing status", func(t *testing.T) {
		err := UnmarshalJSON([]byte(`{"state":{"orderId":"o"}}`), &GetOrderStateRes{})
		if !errors.Is(err, ErrInvalidJSON) {
			t.Fatalf("got %v; want ErrInvalidJSON", err)
		}
	})
	t.Run("nil target", func(t *testing.T) {
		if err := UnmarshalJSON([]byte(`{}`), nil); !errors.Is(err, ErrInvalidJSON) {
			t.Fatalf("got %v; want ErrInvalidJSON", err)
		}
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
			if err := UnmarshalJSON([]byte(c.in), c.into); err != nil {
				t.Fatalf("UnmarshalJSON(%s): %v", c.in, err)
			}
			if !proto.Equal(c.into, c.want) {
				t.Fatalf("got %v, want %v", c.into, c.want)
			}
		})
	}
	t.Run("null optional really unset", func(t *testing.T) {
		m := &OrderState{}
		if err := UnmarshalJSON([]byte(`{"orderId":"o","status":"Failed","reason":null,"updatedAtUnixMs":1}`), m); err != nil {
			t.Fatal(err)
		}
		if m.Reason != nil {
			t.Fatalf("reason = %q, want unset", *m.Reason)
		}
	})
}

// TestMarshalIsStable guards against anything map-ordered or randomised in
// the encoder: golden files and HTTP clients both rely on identical bytes.
func TestMarshalIsStable(t *testing.T) {
	for name, m := range fixtures() {
		first, err := MarshalJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			again, err := MarshalJSON(proto.Clone(m))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, again) {
				t.Fatalf("%s: output changed between calls:\n%s\n%s", name, first, again)
			}
		}
	}
}

func TestPackageImportsNothingOfTheProject(t *testing.T) {
	const module = "github.com/shoppingmall-go/shoppingmall"
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == module || strings.HasPrefix(path, module+"/") {
				t.Errorf("%s imports project package %s", f, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
