package check

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
)

// fate is how a test order ends.
type fate int

const (
	confirmed fate = iota
	outOfStock
	declined
)

var lines = []order.Line{{SKU: "sku-a", Quantity: 2}, {SKU: "sku-b", Quantity: 1}}

func events(id string, f fate) []order.Event {
	rsv, pay := order.ReservationID(id), order.PaymentID(id)
	ev := func(v int64) string { return order.EventID(id, v) }
	es := []order.Event{order.OrderStarted{EventID: ev(1), OrderID: id, CartID: "cart-" + id, ShippingAddressID: "addr-1",
		Lines: lines, Amount: 300, Currency: "JPY", SourceCommandID: order.StartSourceCommandID("key-" + id)}}
	switch f {
	case confirmed:
		es = append(es,
			order.InventoryReserved{EventID: ev(2), OrderID: id, ReservationID: rsv},
			order.PaymentAuthorized{EventID: ev(3), OrderID: id, PaymentID: pay},
			order.OrderConfirmed{EventID: ev(4), OrderID: id, ConfirmedAtUnixMs: 1004})
	case outOfStock:
		es = append(es,
			order.InventoryReservationFailed{EventID: ev(2), OrderID: id, Reason: "OUT_OF_STOCK"},
			order.OrderFailed{EventID: ev(3), OrderID: id, Reason: "OUT_OF_STOCK", FailedAtUnixMs: 1003})
	case declined:
		es = append(es,
			order.InventoryReserved{EventID: ev(2), OrderID: id, ReservationID: rsv},
			order.PaymentFailed{EventID: ev(3), OrderID: id, Reason: "DECLINED"},
			order.InventoryReleased{EventID: ev(4), OrderID: id, ReservationID: rsv, Reason: "DECLINED"},
			order.OrderFailed{EventID: ev(5), OrderID: id, Reason: "DECLINED", FailedAtUnixMs: 1005})
	}
	return es
}

func envelopes(t *testing.T, es []order.Event, gen int64) []Envelope {
	t.Helper()
	out := make([]Envelope, len(es))
	for i, e := range es {
		typ, data, err := workflow.EncodeEvent(e)
		require.NoError(t, err)
		out[i] = Envelope{Version: int64(i + 1), EventID: e.ID(), EventType: typ, CreatedAtUnixMs: 1000 + int64(i+1),
			Data: string(data), FenceGeneration: gen, FenceEpoch: 1}
	}
	return out
}

// projected is the read model's OrderState for st in contract JSON,
// written by the contract's own encoder.
func projected(t *testing.T, st order.State) json.RawMessage {
	t.Helper()
	v := &contracts.OrderState{OrderId: st.OrderID, UpdatedAtUnixMs: st.UpdatedAtUnixMs,
		Status: contracts.OrderStatus(contracts.OrderStatus_value[string(st.Status)])}
	if st.ShippingAddressID != "" {
		v.ShippingAddressId = proto.String(st.ShippingAddressID)
	}
	if st.ReservationID != "" {
		v.ReservationId = proto.String(st.ReservationID)
	}
	if st.PaymentID != "" {
		v.PaymentId = proto.String(st.PaymentID)
	}
	v.Amount = proto.Int64(st.Amount)
	v.Currency = proto.String(st.Currency)
	if st.Reason != "" {
		v.Reason = proto.String(st.Reason)
	}
	b, err := contracts.MarshalJSON(v)
	require.NoError(t, err)
	return b
}

func addOrder(t *testing.T, h *History, id string, f fate) {
	t.Helper()
	es := events(id, f)
	stream := envelopes(t, es, 1)
	at := make([]int64, len(stream))
	for i, e := range stream {
		at[i] = e.CreatedAtUnixMs
	}
	st, err := order.Fold(es, at)
	require.NoError(t, err)
	h.Orders[id] = &OrderRecord{
		Stream:             stream,
		ReadModel:          &ReadModel{Status: string(st.Status), Version: st.Version, State: projected(t, st)},
		Ownership:          []OwnershipEvent{{Kind: OwnActivation, Member: "wf-1", Generation: 1, AtUnixMs: 1000}},
		LocationGeneration: 1,
	}
	key := "key-" + id
	h.Idempotency[key] = &IdempotencyRecord{OrderIDs: []string{id}, Status: IdemStarted}
	m := &ModuleRecord{Reservations: 1, Lines: []Line{{"sku-a", 2}, {"sku-b", 1}}, ReserveCalls: 1}
	switch f {
	case confirmed:
		m.Reserved, m.Authorizations, m.Authorized, m.PaymentCalled = true, 1, true, true
		m.PaymentID, m.PaymentAmount, m.PaymentCurrency = order.PaymentID(id), 300, "JPY"
	case outOfStock:
		m.Reservations, m.ReservationFailed, m.Lines = 0, true, nil
	case declined:
		m.Reserved, m.Released, m.Authorizations, m.PaymentCalled = true, true, 1, true
	}
	h.Modules[id] = m
	final := string(st.Status)
	h.Client = append(h.Client,
		Attempt{Key: key, API: "api-1", Op: OpStart, CartID: "cart-" + id, StatusCode: 0, AtUnixMs: 1000},
		Attempt{Key: key, API: "api-2", Op: OpStart, CartID: "cart-" + id, StatusCode: 201, OrderID: id, OrderStatus: "Created", AtUnixMs: 1001},
		Attempt{API: "api-1", Op: OpGet, StatusCode: 200, OrderID: id, OrderStatus: final, AtUnixMs: 2000},
	)
	if f == confirmed {
		for sku, q := range map[string]int64{"sku-a": 2, "sku-b": 1} {
			h.Stock[sku].Remaining -= q
		}
	}
}

// validHistory has one order of each fate, retries, a takeover and a Redis
// kill; it keeps every invariant.
func validHistory(t *testing.T) *History {
	t.Helper()
	h := &History{Seed: 42, Orders: map[string]*OrderRecord{}, Idempotency: map[string]*IdempotencyRecord{},
		Modules: map[string]*ModuleRecord{}, Stock: map[string]*StockRecord{
			"sku-a": {Initial: 10, Remaining: 10}, "sku-b": {Initial: 5, Remaining: 5}}}
	addOrder(t, h, "o-ok", confirmed)
	addOrder(t, h, "o-oos", outOfStock)
	addOrder(t, h, "o-dec", declined)
	// o-ok was taken over after its start: later events carry the new
	// generation.
	rec := h.Orders["o-ok"]
	rec.Ownership = append(rec.Ownership, OwnershipEvent{Kind: OwnTakeover, Member: "wf-2", Generation: 2, AtUnixMs: 1001})
	for i := 1; i < len(rec.Stream); i++ {
		rec.Stream[i].FenceGeneration = 2
	}
	rec.LocationGeneration = 2
	h.Faults = []Fault{{Kind: "kill-redis", Target: "redis", AtUnixMs: 1500, Effect: "STORE_UNAVAILABLE seen"}}
	return h
}

func TestValidHistoryPasses(t *testing.T) {
	rep := Check(validHistory(t))
	t.Log("\n" + rep.String())
	require.True(t, rep.OK())
	require.Len(t, rep.Results, len(invariantOrder))
}

func TestBrokenHistoriesAreReported(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, h *History)
		inv    string
		order  string // offending order id, "" when the offender is a key or SKU
	}{
		{"double reservation", func(t *testing.T, h *History) {
			h.Modules["o-ok"].Reservations = 2
		}, InvOneReservation, "o-ok"},
		{"double authorization", func(t *testing.T, h *History) {
			h.Modules["o-dec"].Authorizations = 2
		}, InvOneAuthorization, "o-dec"},
		{"lost order: acknowledged, no stream", func(t *testing.T, h *History) {
			h.Client = append(h.Client, Attempt{Key: "key-lost", Op: OpStart, StatusCode: 201, OrderID: "o-lost", OrderStatus: "Created", AtUnixMs: 3000})
		}, InvNoLostOrder, "o-lost"},
		{"lost order: stream emptied", func(t *testing.T, h *History) {
			h.Orders["o-ok"].Stream = nil
		}, InvNoLostOrder, "o-ok"},
		{"lost order: key marked started, no stream", func(t *testing.T, h *History) {
			h.Idempotency["key-o-gone"] = &IdempotencyRecord{OrderIDs: []string{"o-gone"}, Status: IdemStarted}
		}, InvNoLostOrder, "o-gone"},
		{"two OrderStartedEvents", func(t *testing.T, h *History) {
			rec := h.Orders["o-oos"]
			dup := rec.Stream[0]
			dup.Version = 4
			rec.Stream = append(rec.Stream, dup)
		}, InvOneStart, "o-oos"},
		{"stuck order", func(t *testing.T, h *History) {
			rec := h.Orders["o-ok"]
			rec.Stream = rec.Stream[:2]
			rec.ReadModel = &ReadModel{Status: "InventoryReserved", Version: 2}
		}, InvAllTerminal, "o-ok"},
		{"gap in versions", func(t *testing.T, h *History) {
			rec := h.Orders["o-dec"]
			rec.Stream = append(rec.Stream[:2:2], rec.Stream[3:]...)
		}, InvStreamFolds, "o-dec"},
		{"undecodable event", func(t *testing.T, h *History) {
			h.Orders["o-dec"].Stream[2].Data = "{not json"
		}, InvStreamFolds, "o-dec"},
		{"stale-generation append after takeover", func(t *testing.T, h *History) {
			// The old owner wrote the last event after the takeover.
			h.Orders["o-ok"].Stream[3].FenceGeneration = 1
		}, InvGenerations, "o-ok"},
		{"retired generation after a takeover, stream monotonic", func(t *testing.T, h *History) {
			// Every event stayed at generation 1 though a takeover to 2 preceded the last ones.
			for i := range h.Orders["o-ok"].Stream {
				h.Orders["o-ok"].Stream[i].FenceGeneration = 1
			}
		}, InvGenerations, "o-ok"},
		{"old generation writes after a cold re-activation", func(t *testing.T, h *History) {
			rec := h.Orders["o-dec"]
			rec.Ownership = append(rec.Ownership, OwnershipEvent{Kind: OwnActivation, Member: "wf-3", Generation: 3, AtUnixMs: 1003})
			for i := range rec.Stream {
				rec.Stream[i].FenceGeneration = 1
			}
			rec.LocationGeneration = 3
		}, InvGenerations, "o-dec"},
		{"event under a generation the Location record never issued", func(t *testing.T, h *History) {
			h.Orders["o-oos"].Stream[2].FenceGeneration = 7
		}, InvGenerations, "o-oos"},
		{"ownership generation goes down", func(t *testing.T, h *History) {
			rec := h.Orders["o-oos"]
			rec.Ownership = append(rec.Ownership, OwnershipEvent{Kind: OwnRelocation, Member: "wf-3", Generation: 0, AtUnixMs: 5000})
		}, InvGenerations, "o-oos"},
		{"release event in a confirmed order", func(t *testing.T, h *History) {
			rec := h.Orders["o-ok"]
			rel := envelopes(t, []order.Event{order.InventoryReleased{EventID: "rel", OrderID: "o-ok", ReservationID: order.ReservationID("o-ok"), Reason: "x"}}, 2)[0]
			rel.Version = 5
			rec.Stream = append(rec.Stream, rel)
		}, InvReleaseOnlyOnFailure, "o-ok"},
		{"stock released for a confirmed order", func(t *testing.T, h *History) {
			h.Modules["o-ok"].Released = true
		}, InvReleaseOnlyOnFailure, "o-ok"},
		{"stock released for a confirmed order breaks the hold", func(t *testing.T, h *History) {
			h.Modules["o-ok"].Released = true
		}, InvStockHeld, "o-ok"},
		{"declined order keeps its hold", func(t *testing.T, h *History) {
			h.Modules["o-dec"].Released = false
		}, InvStockHeld, "o-dec"},
		{"hold for an order with no stream", func(t *testing.T, h *History) {
			h.Modules["o-ghost"] = &ModuleRecord{Reservations: 1, Reserved: true, Lines: []Line{{"sku-a", 1}}}
		}, InvStockHeld, "o-ghost"},
		{"key maps to two orders (client)", func(t *testing.T, h *History) {
			h.Client = append(h.Client, Attempt{Key: "key-o-ok", Op: OpStart, StatusCode: 200, OrderID: "o-dec", OrderStatus: "Failed", AtUnixMs: 4000})
		}, InvKeyOneOrder, ""},
		{"key maps to two orders (redis)", func(t *testing.T, h *History) {
			h.Idempotency["key-o-oos"].OrderIDs = append(h.Idempotency["key-o-oos"].OrderIDs, "o-other")
		}, InvKeyOneOrder, ""},
		{"payment called after inventory failure", func(t *testing.T, h *History) {
			h.Modules["o-oos"].PaymentCalled = true
		}, InvNoPaymentAfterInvErr, "o-oos"},
		{"payment event after inventory failure", func(t *testing.T, h *History) {
			rec := h.Orders["o-oos"]
			pf := envelopes(t, []order.Event{order.PaymentFailed{EventID: "pf", OrderID: "o-oos", Reason: "x"}}, 1)[0]
			pf.Version = 3
			rec.Stream = append(rec.Stream[:2:2], pf, rec.Stream[2])
			rec.Stream[3].Version = 4
		}, InvNoPaymentAfterInvErr, "o-oos"},
		{"stock not conserved", func(t *testing.T, h *History) {
			h.Stock["sku-b"].Remaining--
		}, InvStockConserved, ""},
		{"stream authorized, no accepted payment record", func(t *testing.T, h *History) {
			m := h.Modules["o-ok"]
			m.Authorized, m.PaymentID, m.PaymentAmount, m.PaymentCurrency = false, "", 0, ""
		}, InvPaymentMatches, "o-ok"},
		{"accepted payment record, stream holds no authorization", func(t *testing.T, h *History) {
			m := h.Modules["o-dec"]
			m.Authorized, m.PaymentID, m.PaymentAmount, m.PaymentCurrency = true, order.PaymentID("o-dec"), 300, "JPY"
		}, InvPaymentMatches, "o-dec"},
		{"accepted payment for an order with no stream", func(t *testing.T, h *History) {
			h.Modules["o-ghost"] = &ModuleRecord{Authorizations: 1, Authorized: true, PaymentCalled: true, PaymentID: "pay-o-ghost", PaymentAmount: 5, PaymentCurrency: "JPY"}
		}, InvPaymentMatches, "o-ghost"},
		{"payment authorized for another amount", func(t *testing.T, h *History) {
			h.Modules["o-ok"].PaymentAmount = 299
		}, InvPaymentMatches, "o-ok"},
		{"payment authorized in another currency", func(t *testing.T, h *History) {
			h.Modules["o-ok"].PaymentCurrency = "EUR"
		}, InvPaymentMatches, "o-ok"},
		{"accepted payment under another id than the stream's", func(t *testing.T, h *History) {
			h.Modules["o-ok"].PaymentID = "pay-other"
		}, InvPaymentMatches, "o-ok"},
		{"failed order with an accepted payment", func(t *testing.T, h *History) {
			m := h.Modules["o-dec"]
			m.Authorized, m.PaymentID, m.PaymentAmount, m.PaymentCurrency = true, order.PaymentID("o-dec"), 300, "JPY"
		}, InvFailedUnpaid, "o-dec"},
		{"confirmed order without its payment record", func(t *testing.T, h *History) {
			m := h.Modules["o-ok"]
			m.Authorizations, m.Authorized, m.PaymentID, m.PaymentAmount, m.PaymentCurrency = 0, false, "", 0, ""
		}, InvConfirmedPaid, "o-ok"},
		{"confirmed order paid under another id", func(t *testing.T, h *History) {
			h.Modules["o-ok"].PaymentID = "pay-other"
		}, InvConfirmedPaid, "o-ok"},
		{"read model differs in one field only", func(t *testing.T, h *History) {
			rm := h.Orders["o-dec"].ReadModel
			rm.State = json.RawMessage(strings.Replace(string(rm.State), `"reason":"DECLINED"`, `"reason":"OUT_OF_STOCK"`, 1))
		}, InvReadModelIsFold, "o-dec"},
		{"read model lacks a field", func(t *testing.T, h *History) {
			rm := h.Orders["o-ok"].ReadModel
			rm.State = json.RawMessage(strings.Replace(string(rm.State), `"paymentId":"pay-o-ok",`, ``, 1))
		}, InvReadModelIsFold, "o-ok"},
		{"read model has a field the fold does not", func(t *testing.T, h *History) {
			rm := h.Orders["o-oos"].ReadModel
			rm.State = json.RawMessage(strings.Replace(string(rm.State), `"orderId":"o-oos",`, `"orderId":"o-oos","paymentId":"pay-o-oos",`, 1))
		}, InvReadModelIsFold, "o-oos"},
		{"read model updated at another time", func(t *testing.T, h *History) {
			rm := h.Orders["o-ok"].ReadModel
			rm.State = json.RawMessage(strings.Replace(string(rm.State), `"updatedAtUnixMs":1004`, `"updatedAtUnixMs":1003`, 1))
		}, InvReadModelIsFold, "o-ok"},
		{"read model without its state", func(t *testing.T, h *History) {
			h.Orders["o-ok"].ReadModel.State = nil
		}, InvReadModelIsFold, "o-ok"},
		{"read model differs from fold", func(t *testing.T, h *History) {
			h.Orders["o-dec"].ReadModel = &ReadModel{Status: "InventoryReserved", Version: 2}
		}, InvReadModelIsFold, "o-dec"},
		{"read model missing", func(t *testing.T, h *History) {
			h.Orders["o-dec"].ReadModel = nil
		}, InvReadModelIsFold, "o-dec"},
		{"client status goes backwards", func(t *testing.T, h *History) {
			h.Client = append(h.Client, Attempt{Op: OpGet, StatusCode: 200, OrderID: "o-ok", OrderStatus: "PaymentAuthorized", AtUnixMs: 2500})
		}, InvClientMonotonic, "o-ok"},
		{"client status goes backwards after the answer (sent times)", func(t *testing.T, h *History) {
			h.Client = append(h.Client, Attempt{Op: OpGet, StatusCode: 200, OrderID: "o-dec", OrderStatus: "Created", SentAtUnixMs: 2001, AtUnixMs: 2002})
		}, InvClientMonotonic, "o-dec"},
		{"an acknowledged terminal status the stream does not end in", func(t *testing.T, h *History) {
			// o-dec ends Failed; a failover does not excuse an acknowledgement.
			h.Faults = append(h.Faults, Fault{Kind: "redis-failover", Target: "redis primary", AtUnixMs: 4500})
			h.Client = append(h.Client, Attempt{Op: OpContinue, StatusCode: 200, OrderID: "o-dec", OrderStatus: "Confirmed", SentAtUnixMs: 3999, AtUnixMs: 4000})
		}, InvAckNotLost, "o-dec"},
		{"an acknowledged status the stream never reached", func(t *testing.T, h *History) {
			h.Orders["o-ok"].Stream = h.Orders["o-ok"].Stream[:2]
			h.Client = append(h.Client, Attempt{Op: OpStart, StatusCode: 200, OrderID: "o-ok", OrderStatus: "Confirmed", SentAtUnixMs: 3999, AtUnixMs: 4000})
		}, InvAckNotLost, "o-ok"},
		{"client told a terminal status the stream does not end in", func(t *testing.T, h *History) {
			h.Client[len(h.Client)-1].OrderStatus = "Confirmed" // o-dec ends Failed
		}, InvClientMonotonic, "o-dec"},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.inv] = true
	}
	for _, inv := range invariantOrder {
		require.True(t, covered[inv], "no broken history proves invariant %s can fail", inv)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := validHistory(t)
			tc.mutate(t, h)
			rep := Check(h)
			t.Log("\n" + rep.String())
			require.False(t, rep.OK())
			res := rep.Get(tc.inv)
			require.Positive(t, res.Violations, "invariant %s not reported", tc.inv)
			if tc.order != "" {
				require.Contains(t, rep.OffendingOrders(), tc.order)
				found := false
				for _, o := range res.Offenders {
					found = found || o.OrderID == tc.order
				}
				require.True(t, found, "invariant %s does not name %s", tc.inv, tc.order)
			}
		})
	}
}

// Overlapping requests may be answered out of order: an older status
// whose request was sent before the newer answer arrived is not a
// violation.
func TestClientViewAllowsOverlappingAnswers(t *testing.T) {
	h := validHistory(t)
	// Sent at 1500, before the Confirmed answer at 2000, answered late.
	h.Client = append(h.Client, Attempt{Op: OpGet, StatusCode: 200, OrderID: "o-ok", OrderStatus: "PaymentAuthorized", SentAtUnixMs: 1500, AtUnixMs: 2600})
	rep := Check(h)
	t.Log("\n" + rep.String())
	require.True(t, rep.OK())

	// The same answer to a request sent after 2000 is a violation.
	h.Client[len(h.Client)-1].SentAtUnixMs = 2100
	require.Equal(t, 1, Check(h).Get(InvClientMonotonic).Violations)
}

func TestSaveLoadRoundTripChecksTheSame(t *testing.T) {
	h := validHistory(t)
	h.Modules["o-ok"].Reservations = 2
	path := filepath.Join(t.TempDir(), "history.json")
	require.NoError(t, h.Save(path))
	got, err := LoadHistory(path)
	require.NoError(t, err)
	require.Equal(t, h, got)
	require.Equal(t, Check(h), Check(got))
	require.Equal(t, 1, Check(got).Get(InvOneReservation).Violations)

	d := got.Describe("o-ok")
	t.Log(d)
	require.Contains(t, d, "v4  OrderConfirmedEvent")
	require.Contains(t, d, "owner takeover")
	require.Contains(t, d, "records 2")
}

// The failover window: a read answered from the primary may show state
// that a Redis kill or failover injected after it was sent then loses; a
// later, earlier status is then no violation. Without such a fault in
// between, it is.
func TestClientViewReadsMayShowWhatAFailoverLoses(t *testing.T) {
	h := validHistory(t)
	h.Client = append(h.Client,
		Attempt{Op: OpGet, StatusCode: 200, OrderID: "o-ok", OrderStatus: "PaymentAuthorized", SentAtUnixMs: 2300, AtUnixMs: 2301})
	require.Equal(t, 1, Check(h).Get(InvClientMonotonic).Violations, "no fault between the reads")

	h.Faults = append(h.Faults, Fault{Kind: "redis-failover", Target: "redis primary", AtUnixMs: 2200})
	rep := Check(h)
	t.Log("\n" + rep.String())
	require.Zero(t, rep.Get(InvClientMonotonic).Violations, "the Confirmed read at 2000 may have been lost by the failover at 2200")
	require.Zero(t, rep.Get(InvAckNotLost).Violations)

	h.Faults[len(h.Faults)-1].Kind = "store-stall"
	require.Equal(t, 1, Check(h).Get(InvClientMonotonic).Violations, "a stall loses nothing")
}
