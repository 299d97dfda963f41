package contracts

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// goldenDir holds one hand-written JSON file per message of the .proto,
// transcribed from docs/contract.md, "Wire form", not produced by
// MarshalJSON.
const goldenDir = "testdata"

func fullState(status OrderStatus) *OrderState {
	return &OrderState{
		OrderId:           "ord-5e2b",
		Status:            status,
		ShippingAddressId: proto.String("addr-home-1"),
		ReservationId:     proto.String("rsv-ord-5e2b"),
		PaymentId:         proto.String("pay-ord-5e2b"),
		Amount:            proto.Int64(12900),
		Currency:          proto.String("EUR"),
		Reason:            proto.String("card declined"),
		UpdatedAtUnixMs:   1767225600123,
	}
}

func lines() []*OrderLine {
	return []*OrderLine{
		{Sku: "SKU-TEE-BLK-M", Quantity: 2},
		{Sku: "SKU-MUG-WHT", Quantity: 1},
	}
}

// fixtures returns one fully populated instance of every message, keyed by
// message name. Every field is set, optional ones included, so the golden
// files pin the JSON form of every field.
func fixtures() map[string]proto.Message {
	return map[string]proto.Message{
		"OrderLine": &OrderLine{Sku: "SKU-TEE-BLK-M", Quantity: 2},
		"StartOrderReq": &StartOrderReq{
			CartId:            "cart-1001",
			ShippingAddressId: "addr-home-1",
			PaymentMethodId:   "pm-visa-4242",
			IdempotencyKey:    "idem-7c1f0e",
		},
		"StartOrderRes":    &StartOrderRes{OrderId: "ord-5e2b", State: fullState(OrderStatus_Created)},
		"GetOrderStateReq": &GetOrderStateReq{OrderId: "ord-5e2b"},
		"GetOrderStateRes": &GetOrderStateRes{State: fullState(OrderStatus_Confirmed)},
		"OrderState":       fullState(OrderStatus_Failed),
		"StartOrderWorkflowReq": &StartOrderWorkflowReq{
			OrderId:           "ord-5e2b",
			CartId:            "cart-1001",
			ShippingAddressId: "addr-home-1",
			PaymentMethodId:   "pm-visa-4242",
			IdempotencyKey:    "idem-7c1f0e",
			SourceCommandId:   "start-4f2c9a",
			Lines:             lines(),
			Amount:            12900,
			Currency:          "EUR",
		},
		"StartOrderWorkflowRes":     &StartOrderWorkflowRes{State: fullState(OrderStatus_Created)},
		"ContinueOrderWorkflowReq":  &ContinueOrderWorkflowReq{OrderId: "ord-5e2b", SourceCommandId: "continue-01"},
		"ContinueOrderWorkflowRes":  &ContinueOrderWorkflowRes{State: fullState(OrderStatus_PaymentAuthorized)},
		"RebuildOrderProjectionReq": &RebuildOrderProjectionReq{OrderId: "ord-5e2b", SourceCommandId: "rebuild-01"},
		"RebuildOrderProjectionRes": &RebuildOrderProjectionRes{State: fullState(OrderStatus_InventoryReserved)},
		"ReserveInventoryReq": &ReserveInventoryReq{
			OrderId:       "ord-5e2b",
			ReservationId: "rsv-ord-5e2b",
			Lines:         lines(),
		},
		"ReserveInventoryRes": &ReserveInventoryRes{Accepted: true, Reason: proto.String("reserved")},
		"ReleaseInventoryReq": &ReleaseInventoryReq{
			OrderId:       "ord-5e2b",
			ReservationId: "rsv-ord-5e2b",
			Reason:        "card declined",
		},
		"ReleaseInventoryRes": &ReleaseInventoryRes{Released: true, Reason: proto.String("released")},
		"AuthorizePaymentReq": &AuthorizePaymentReq{
			OrderId:         "ord-5e2b",
			PaymentId:       "pay-ord-5e2b",
			PaymentMethodId: "pm-visa-4242",
			Amount:          12900,
			Currency:        "EUR",
		},
		"AuthorizePaymentRes": &AuthorizePaymentRes{Accepted: true, Reason: proto.String("authorized")},
		"OrderStartedEvent": &OrderStartedEvent{
			EventId:           "evt-ord-5e2b-1",
			OrderId:           "ord-5e2b",
			CartId:            "cart-1001",
			ShippingAddressId: "addr-home-1",
			Lines:             lines(),
			Amount:            12900,
			Currency:          "EUR",
			SourceCommandId:   "start-4f2c9a",
		},
		"InventoryReservedEvent": &InventoryReservedEvent{
			EventId:       "evt-ord-5e2b-2",
			OrderId:       "ord-5e2b",
			ReservationId: "rsv-ord-5e2b",
		},
		"InventoryReservationFailedEvent": &InventoryReservationFailedEvent{
			EventId: "evt-ord-5e2b-2",
			OrderId: "ord-5e2b",
			Reason:  "out of stock: SKU-MUG-WHT",
		},
		"PaymentAuthorizedEvent": &PaymentAuthorizedEvent{
			EventId:   "evt-ord-5e2b-3",
			OrderId:   "ord-5e2b",
			PaymentId: "pay-ord-5e2b",
		},
		"PaymentFailedEvent": &PaymentFailedEvent{
			EventId: "evt-ord-5e2b-3",
			OrderId: "ord-5e2b",
			Reason:  "card declined",
		},
		"InventoryReleasedEvent": &InventoryReleasedEvent{
			EventId:       "evt-ord-5e2b-4",
			OrderId:       "ord-5e2b",
			ReservationId: "rsv-ord-5e2b",
			Reason:        "card declined",
		},
		"OrderConfirmedEvent": &OrderConfirmedEvent{
			EventId:           "evt-ord-5e2b-4",
			OrderId:           "ord-5e2b",
			ConfirmedAtUnixMs: 1767225600456,
		},
		"OrderFailedEvent": &OrderFailedEvent{
			EventId:        "evt-ord-5e2b-5",
			OrderId:        "ord-5e2b",
			Reason:         "card declined",
			FailedAtUnixMs: 1767225600789,
		},
		"WorkflowError": &WorkflowError{
			Reason:  ErrorReason_ERROR_REASON_CONFLICT,
			Message: "expected version 3, stream is at 4",
		},
	}
}

func declaredMessages() []protoreflect.MessageDescriptor {
	msgs := File_actors_contracts_shoppingmall_proto.Messages()
	out := make([]protoreflect.MessageDescriptor, 0, msgs.Len())
	for i := range msgs.Len() {
		out = append(out, msgs.Get(i))
	}
	return out
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(goldenDir, name+".json"))
	require.NoError(t, err, "golden file for %s", name)
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, raw), "golden file for %s is not JSON", name)
	return compact.Bytes()
}

func indent(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func TestGoldenJSON(t *testing.T) {
	for name, msg := range fixtures() {
		t.Run(name, func(t *testing.T) {
			want := readGolden(t, name)
			got, err := MarshalJSON(msg)
			require.NoError(t, err)
			require.Equal(t, indent(want), indent(got), "MarshalJSON differs from %s/%s.json", goldenDir, name)
			require.Equal(t, string(want), string(got), "MarshalJSON differs from %s/%s.json in layout", goldenDir, name)

			// The hand-written file must also be readable as that message,
			// so the decoder agrees with the spec text too.
			back := msg.ProtoReflect().New().Interface()
			require.NoError(t, UnmarshalJSON(want, back), "UnmarshalJSON(golden)")
			require.True(t, proto.Equal(back, msg), "golden decodes to %v, want %v", back, msg)
		})
	}
}

// TestGoldenCoversEveryMessage fails when the .proto gains a message (or a
// field) that the golden set does not pin, and when a golden file no
// longer matches any message.
func TestGoldenCoversEveryMessage(t *testing.T) {
	fx := fixtures()
	declared := map[string]bool{}
	for _, md := range declaredMessages() {
		name := string(md.Name())
		declared[name] = true
		assert.FileExists(t, filepath.Join(goldenDir, name+".json"), "message %s has no golden file", name)
		msg, ok := fx[name]
		if !assert.True(t, ok, "message %s has no populated fixture", name) {
			continue
		}
		assertFullyPopulated(t, name, msg.ProtoReflect())
	}
	for name := range fx {
		assert.True(t, declared[name], "fixture %s is not a message of the .proto", name)
	}
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no golden files found")
	sort.Strings(files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		assert.True(t, declared[name], "golden file %s matches no message of the .proto", f)
	}
}

// assertFullyPopulated checks that every field of m (recursively) holds a
// non-default value, so a golden file cannot silently skip a field.
func assertFullyPopulated(t *testing.T, path string, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		fpath := path + "." + string(fd.Name())
		if !assert.True(t, m.Has(fd), "fixture field %s is not set", fpath) {
			continue
		}
		if fd.Kind() != protoreflect.MessageKind {
			continue
		}
		if fd.IsList() {
			list := m.Get(fd).List()
			for j := range list.Len() {
				assertFullyPopulated(t, fpath, list.Get(j).Message())
			}
			continue
		}
		assertFullyPopulated(t, fpath, m.Get(fd).Message())
	}
}

func TestRoundTripEveryMessage(t *testing.T) {
	sparse := map[string]proto.Message{
		"OrderState":          &OrderState{OrderId: "o", Status: OrderStatus_Created},
		"ReserveInventoryRes": &ReserveInventoryRes{},
		"StartOrderRes":       &StartOrderRes{OrderId: "o"},
		"ReserveInventoryReq": &ReserveInventoryReq{OrderId: "o"},
		"OrderLine":           &OrderLine{},
		"OptionalEmptyString": &OrderState{OrderId: "o", Status: OrderStatus_Failed, Reason: proto.String("")},
	}
	cases := map[string]proto.Message{}
	for name, m := range fixtures() {
		cases["full/"+name] = m
	}
	for name, m := range sparse {
		cases["sparse/"+name] = m
	}
	for name, msg := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := MarshalJSON(msg)
			require.NoError(t, err)
			back := msg.ProtoReflect().New().Interface()
			require.NoError(t, UnmarshalJSON(b, back), "UnmarshalJSON(%s)", b)
			require.True(t, proto.Equal(back, msg), "round trip of %s gave %v, want %v", b, back, msg)
		})
	}
}
