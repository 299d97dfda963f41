package contracts

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// The workflow writes one event per step and every API answer is an
// OrderState: these two shapes are the codec's hot path.
func BenchmarkMarshalJSON(b *testing.B) {
	for _, bc := range []struct {
		name string
		m    proto.Message
	}{
		{"OrderStartedEvent", &OrderStartedEvent{
			EventId: "evt-ord-5e2b-1", OrderId: "ord-5e2b", CartId: "cart-1001", ShippingAddressId: "addr-home-1",
			Lines: lines(), Amount: 12900, Currency: "EUR", SourceCommandId: "cmd-7c1f0e",
		}},
		{"OrderState", fullState(OrderStatus_Confirmed)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := MarshalJSON(bc.m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUnmarshalJSON(b *testing.B) {
	data, err := MarshalJSON(fullState(OrderStatus_Confirmed))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var s OrderState
		if err := UnmarshalJSON(data, &s); err != nil {
			b.Fatal(err)
		}
	}
}
