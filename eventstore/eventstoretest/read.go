package eventstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// Tier is one tier of the event store as the read contract needs it: the
// hot stream (eventstore.Store) or the cold archive. Each keeps an order's
// events its own way; both give them back alike.
type Tier struct {
	// Write records evs, versions 1 to n, as orderID's whole stream,
	// through the tier's own write, failing t if it cannot.
	Write func(t *testing.T, orderID string, evs []eventstore.Envelope)
	// Load is the tier's read of an order's stream.
	Load func(ctx context.Context, orderID string) ([]eventstore.Envelope, error)
}

// RunReadContract runs, as subtests, the part of the Store contract every
// tier holds to, the reads: a stream comes back as it was written, event
// for event and byte for byte, in version order; an order without one
// loads empty, without an error. newTier is called once per subtest.
//
// Bodies are UTF-8 here, as this project's (JSON) are: the archive keeps
// nothing else, where the hot store keeps any bytes.
func RunReadContract(t *testing.T, newTier func(t *testing.T) Tier) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, tr Tier)
	}{
		{"LoadReturnsTheStreamAsWritten", testTierLoad},
		{"UnknownOrderLoadsEmpty", testTierUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newTier(t)) })
	}
}

func tierCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testTierLoad(t *testing.T, tr Tier) {
	o := orderID(t, "tier")
	in := []eventstore.Envelope{
		{EventID: o + "-e1", OrderID: o, EventType: "OrderStartedEvent", Version: 1, SourceCommandID: "cmd-1",
			CreatedAtUnixMs: 1_700_000_000_001, Data: []byte(`{"orderId":"` + o + `",  "amount":12900, "note":"Grüße \"x\""}`), Schema: 1},
		{EventID: o + "-e2", OrderID: o, EventType: "InventoryReservedEvent", Version: 2,
			CreatedAtUnixMs: 1_700_000_000_002, Data: []byte(`{"z":1,"a":[]}`), Schema: 2},
		{EventID: o + "-e3", OrderID: o, EventType: "PaymentAuthorizedEvent", Version: 3, SourceCommandID: "cmd-3",
			CreatedAtUnixMs: 1_700_000_000_003, Data: []byte{}, Schema: 1},
	}
	tr.Write(t, o, in)
	got, err := tr.Load(tierCtx(t), o)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(got) != len(in) {
		t.Fatalf("Load returned %d events, want %d", len(got), len(in))
	}
	for i := range in {
		if !sameEnvelope(got[i], in[i]) || got[i].Schema != in[i].Schema {
			t.Fatalf("event #%d = %+v, want %+v", i+1, got[i], in[i])
		}
	}
}

func testTierUnknown(t *testing.T, tr Tier) {
	got, err := tr.Load(tierCtx(t), orderID(t, "tier-none"))
	if err != nil {
		t.Fatalf("Load(unknown): %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("Load(unknown) = %d events, want none", len(got))
	}
}
