package order

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const oid = "ord-1"

func startCmd() StartOrder {
	return StartOrder{
		OrderID:           oid,
		CartID:            "cart-1",
		ShippingAddressID: "addr-1",
		SourceCommandID:   StartSourceCommandID("idem-1"),
		Lines:             []Line{{SKU: "SKU-TEE", Quantity: 2}, {SKU: "SKU-MUG", Quantity: 1}},
		Amount:            12900,
		Currency:          "EUR",
	}
}

// The events for order oid (docs/contract.md, "Event order"), each with the
// id of the version it is recorded at on its branch.
var (
	evStarted = OrderStarted{
		EventID: EventID(oid, 1), OrderID: oid, CartID: "cart-1", ShippingAddressID: "addr-1",
		Lines:  []Line{{SKU: "SKU-TEE", Quantity: 2}, {SKU: "SKU-MUG", Quantity: 1}},
		Amount: 12900, Currency: "EUR", SourceCommandID: StartSourceCommandID("idem-1"),
	}
	evReserved          = InventoryReserved{EventID: EventID(oid, 2), OrderID: oid, ReservationID: ReservationID(oid)}
	evReserveFailed     = InventoryReservationFailed{EventID: EventID(oid, 2), OrderID: oid, Reason: "out of stock"}
	evPayAuthorized     = PaymentAuthorized{EventID: EventID(oid, 3), OrderID: oid, PaymentID: PaymentID(oid)}
	evPayFailed         = PaymentFailed{EventID: EventID(oid, 3), OrderID: oid, Reason: "card declined"}
	evReleased          = InventoryReleased{EventID: EventID(oid, 4), OrderID: oid, ReservationID: ReservationID(oid), Reason: "card declined"}
	evConfirmed         = OrderConfirmed{EventID: EventID(oid, 4), OrderID: oid, ConfirmedAtUnixMs: 4000}
	evFailedAfterStock  = OrderFailed{EventID: EventID(oid, 3), OrderID: oid, Reason: "out of stock", FailedAtUnixMs: 3000}
	evFailedAfterRefund = OrderFailed{EventID: EventID(oid, 5), OrderID: oid, Reason: "card declined", FailedAtUnixMs: 5000}
)

// The three branches of docs/contract.md, "Event order".
var (
	successPath        = []Event{evStarted, evReserved, evPayAuthorized, evConfirmed}
	inventoryFailPath  = []Event{evStarted, evReserveFailed, evFailedAfterStock}
	paymentFailurePath = []Event{evStarted, evReserved, evPayFailed, evReleased, evFailedAfterRefund}
)

// stamps returns the createdAt of n events recorded one second apart.
func stamps(n int) []int64 {
	at := make([]int64, n)
	for i := range at {
		at[i] = int64(i+1) * 1000
	}
	return at
}

func given(t *testing.T, events ...Event) State {
	t.Helper()
	s, err := Fold(events, stamps(len(events)))
	require.NoError(t, err, "given events do not fold")
	return s
}

// allCommands tries every command on s with every outcome; the map holds
// what each returned.
func allCommands(s State) map[string]struct {
	ev  Event
	err error
} {
	out := map[string]struct {
		ev  Event
		err error
	}{}
	put := func(name string, ev Event, err error) {
		out[name] = struct {
			ev  Event
			err error
		}{ev, err}
	}
	ev, err := Start(s, startCmd())
	put("Start", ev, err)
	ev, err = ReservationResult(s, true, "")
	put("ReservationResult(accepted)", ev, err)
	ev, err = ReservationResult(s, false, "out of stock")
	put("ReservationResult(rejected)", ev, err)
	ev, err = PaymentResult(s, true, "")
	put("PaymentResult(accepted)", ev, err)
	ev, err = PaymentResult(s, false, "card declined")
	put("PaymentResult(rejected)", ev, err)
	ev, err = Released(s, "")
	put("Released", ev, err)
	ev, err = Confirm(s, 9000)
	put("Confirm", ev, err)
	ev, err = Fail(s, 9000)
	put("Fail", ev, err)
	return out
}
