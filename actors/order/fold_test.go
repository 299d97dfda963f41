package order

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFoldRules(t *testing.T) {
	lines := []Line{{SKU: "SKU-TEE", Quantity: 2}, {SKU: "SKU-MUG", Quantity: 1}}
	created := State{
		OrderID: oid, Version: 1, Started: true, Status: StatusCreated,
		CartID: "cart-1", ShippingAddressID: "addr-1", Lines: lines, Amount: 12900, Currency: "EUR",
		StartSourceCommandID: StartSourceCommandID("idem-1"), UpdatedAtUnixMs: 1000,
	}
	with := func(base State, mut func(*State)) State {
		mut(&base)
		return base
	}
	reserved := with(created, func(s *State) {
		s.Version, s.Status, s.ReservationID, s.UpdatedAtUnixMs = 2, StatusInventoryReserved, ReservationID(oid), 2000
	})
	payFailed := with(reserved, func(s *State) {
		s.Version, s.PaymentFailed, s.Reason, s.UpdatedAtUnixMs = 3, true, "card declined", 3000
	})
	released := with(payFailed, func(s *State) { s.Version, s.Released, s.UpdatedAtUnixMs = 4, true, 4000 })

	cases := []struct {
		name  string
		given []Event
		want  State
	}{
		{"no events", nil, State{}},
		{"started", []Event{evStarted}, created},
		{"reserved", []Event{evStarted, evReserved}, reserved},
		{"reservation failed stays Created", []Event{evStarted, evReserveFailed}, with(created, func(s *State) {
			s.Version, s.ReservationFailed, s.Reason, s.UpdatedAtUnixMs = 2, true, "out of stock", 2000
		})},
		{"failed after stock", inventoryFailPath, with(created, func(s *State) {
			s.Version, s.Status, s.ReservationFailed, s.Reason, s.UpdatedAtUnixMs = 3, StatusFailed, true, "out of stock", 3000
		})},
		{"payment authorized", []Event{evStarted, evReserved, evPayAuthorized}, with(reserved, func(s *State) {
			s.Version, s.Status, s.PaymentID, s.UpdatedAtUnixMs = 3, StatusPaymentAuthorized, PaymentID(oid), 3000
		})},
		{"confirmed", successPath, with(reserved, func(s *State) {
			s.Version, s.Status, s.PaymentID, s.UpdatedAtUnixMs = 4, StatusConfirmed, PaymentID(oid), 4000
		})},
		{"payment failed stays InventoryReserved", []Event{evStarted, evReserved, evPayFailed}, payFailed},
		{"released does not revert the status", []Event{evStarted, evReserved, evPayFailed, evReleased}, released},
		{"failed after payment", paymentFailurePath, with(released, func(s *State) {
			s.Version, s.Status, s.UpdatedAtUnixMs = 5, StatusFailed, 5000
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Fold(c.given, stamps(len(c.given)))
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestReleaseKeepsStatusAndFailureReason(t *testing.T) {
	s := given(t, evStarted, evReserved, evPayFailed)
	rel := evReleased
	rel.Reason = "compensation for card declined"
	next, err := Apply(s, rel, 4000)
	require.NoError(t, err)
	require.Equal(t, StatusInventoryReserved, next.Status)
	require.True(t, next.Released)
	require.Equal(t, ReservationID(oid), next.ReservationID)
	require.Equal(t, "card declined", next.Reason, "the release keeps the failure reason")
	f, err := Fail(next, 5000)
	require.NoError(t, err)
	require.Equal(t, "card declined", f.(OrderFailed).Reason)
}

func TestApplyRejectsInvalidTransitions(t *testing.T) {
	otherOrder := evReserved
	otherOrder.OrderID = "ord-2"
	secondStart := evStarted
	secondStart.EventID = EventID(oid, 2)
	noEventID := evReserved
	noEventID.EventID = ""
	noReservation := evReserved
	noReservation.ReservationID = ""
	noPayment := evPayAuthorized
	noPayment.PaymentID = ""
	wrongReservation := evReleased
	wrongReservation.ReservationID = "rsv-ord-2"
	startNoOrder := evStarted
	startNoOrder.OrderID = ""
	var nilPtr *InventoryReserved

	cases := []struct {
		name   string
		given  []Event
		event  Event
		reason string // fragment of Why
	}{
		{"first event is not a start", nil, evReserved, "must begin"},
		{"start without orderId", nil, startNoOrder, "empty orderId"},
		{"second start", []Event{evStarted}, secondStart, "already started"},
		{"event of another order", []Event{evStarted}, otherOrder, "ord-2"},
		{"empty eventId", []Event{evStarted}, noEventID, "empty eventId"},
		{"reservation without id", []Event{evStarted}, noReservation, "reservationId"},
		{"reservation twice", []Event{evStarted, evReserved}, InventoryReserved{EventID: "e3", OrderID: oid, ReservationID: "r"}, "already recorded"},
		{"reservation after its failure", []Event{evStarted, evReserveFailed}, InventoryReserved{EventID: "e3", OrderID: oid, ReservationID: "r"}, "already recorded"},
		{"payment before reservation", []Event{evStarted}, evPayAuthorized, "not reserved"},
		{"payment failure before reservation", []Event{evStarted}, evPayFailed, "not reserved"},
		{"payment without id", []Event{evStarted, evReserved}, noPayment, "paymentId"},
		{"payment twice", []Event{evStarted, evReserved, evPayFailed}, evPayAuthorized, "already recorded"},
		{"release without reservation", []Event{evStarted}, evReleased, "no reservation"},
		{"release without payment failure", []Event{evStarted, evReserved}, evReleased, "payment failure"},
		{"release of another reservation", []Event{evStarted, evReserved, evPayFailed}, wrongReservation, "rsv-ord-2"},
		{"release twice", []Event{evStarted, evReserved, evPayFailed, evReleased}, evReleased, "already released"},
		{"confirm before payment", []Event{evStarted, evReserved}, evConfirmed, "not authorized"},
		{"confirm after payment failure", []Event{evStarted, evReserved, evPayFailed}, evConfirmed, "not authorized"},
		{"fail without failure", []Event{evStarted}, evFailedAfterStock, "no failure"},
		{"fail before release", []Event{evStarted, evReserved, evPayFailed}, evFailedAfterRefund, "not yet released"},
		{"event after confirmed", successPath, evFailedAfterRefund, "terminal"},
		{"event after failed", inventoryFailPath, evReserved, "terminal"},
		{"nil event", []Event{evStarted}, nil, "nil event"},
		{"nil pointer event", []Event{evStarted}, nilPtr, "nil event"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := given(t, c.given...)
			got, err := Apply(s, c.event, 99)
			require.ErrorIs(t, err, ErrInvalidTransition)
			var te *TransitionError
			require.ErrorAs(t, err, &te)
			require.Equal(t, s.Status, te.From)
			require.Equal(t, s.Version, te.Version)
			if c.event != nil && c.name != "nil pointer event" {
				require.Equal(t, c.event.Type(), te.Event)
			}
			require.Contains(t, te.Why, c.reason)
			require.Contains(t, err.Error(), te.Why)
			require.Equal(t, s, got, "a rejected event leaves the state alone")
		})
	}
}

func TestApplyAcceptsPointerEvents(t *testing.T) {
	events := []Event{&evStarted, &evReserved, &evPayAuthorized, &evConfirmed}
	got, err := Fold(events, stamps(4))
	require.NoError(t, err)
	require.Equal(t, given(t, successPath...), got, "pointer fold equals value fold")
}

func TestApplyDoesNotAliasInputs(t *testing.T) {
	ev := evStarted
	ev.Lines = []Line{{SKU: "A", Quantity: 1}}
	s, err := Apply(State{}, ev, 1)
	require.NoError(t, err)
	ev.Lines[0].Quantity = 50
	require.Equal(t, int32(1), s.Lines[0].Quantity, "state shares the event's line slice")
	before := s
	beforeLines := append([]Line(nil), s.Lines...)
	_, err = Apply(s, evReserved, 2)
	require.NoError(t, err)
	require.Equal(t, before, s, "Apply changed its input state")
	require.Equal(t, beforeLines, s.Lines, "Apply changed its input lines")
}

func TestFoldStopsAtFirstError(t *testing.T) {
	events := []Event{evStarted, evReserved, evConfirmed, evPayAuthorized}
	s, err := Fold(events, stamps(4))
	var te *TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, TypeOrderConfirmed, te.Event, "the OrderConfirmedEvent transition error")
	require.Equal(t, int64(2), s.Version, "partial state")
	require.Equal(t, StatusInventoryReserved, s.Status, "partial state")
	require.Equal(t, int64(2000), s.UpdatedAtUnixMs, "partial state")
}

func TestFoldVersionAndTime(t *testing.T) {
	s, err := Fold(paymentFailurePath, []int64{10, 20, 30, 40, 55})
	require.NoError(t, err)
	require.Equal(t, int64(5), s.Version)
	require.Equal(t, int64(55), s.UpdatedAtUnixMs)
}

func TestFoldLengthMismatch(t *testing.T) {
	_, err := Fold([]Event{evStarted}, nil)
	require.ErrorIs(t, err, ErrLengthMismatch)
	require.NotErrorIs(t, err, ErrInvalidTransition)
}

func TestStatusTerminal(t *testing.T) {
	for s, want := range map[Status]bool{
		StatusCreated: false, StatusInventoryReserved: false, StatusPaymentAuthorized: false,
		StatusConfirmed: true, StatusFailed: true, "": false,
	} {
		assert.Equal(t, want, s.Terminal(), "%q.Terminal()", s)
	}
}

func TestEventTypeNamesAreTheSpecNames(t *testing.T) {
	want := []string{
		"OrderStartedEvent", "InventoryReservedEvent", "InventoryReservationFailedEvent",
		"PaymentAuthorizedEvent", "PaymentFailedEvent", "InventoryReleasedEvent",
		"OrderConfirmedEvent", "OrderFailedEvent",
	}
	events := []Event{
		OrderStarted{}, InventoryReserved{}, InventoryReservationFailed{}, PaymentAuthorized{},
		PaymentFailed{}, InventoryReleased{}, OrderConfirmed{}, OrderFailed{},
	}
	for i, e := range events {
		assert.Equal(t, want[i], e.Type(), "%T.Type()", e)
	}
	got := InventoryReleased{EventID: "e", OrderID: "o"}
	assert.Equal(t, "e", got.ID())
	assert.Equal(t, "o", got.Order())
}

func TestStatusValuesAreTheSpecLiterals(t *testing.T) {
	got := []Status{StatusCreated, StatusInventoryReserved, StatusPaymentAuthorized, StatusConfirmed, StatusFailed}
	want := []string{"Created", "InventoryReserved", "PaymentAuthorized", "Confirmed", "Failed"}
	for i := range got {
		assert.Equal(t, want[i], string(got[i]), "status %d", i)
	}
}
