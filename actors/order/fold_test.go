package order

import (
	"errors"
	"reflect"
	"strings"
	"testing"
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
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("state\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestReleaseKeepsStatusAndFailureReason(t *testing.T) {
	s := given(t, evStarted, evReserved, evPayFailed)
	rel := evReleased
	rel.Reason = "compensation for card declined"
	next, err := Apply(s, rel, 4000)
	if err != nil {
		t.Fatal(err)
	}
	if next.Status != StatusInventoryReserved || !next.Released || next.ReservationID != ReservationID(oid) {
		t.Fatalf("after release: %+v", next)
	}
	if next.Reason != "card declined" {
		t.Fatalf("release replaced the failure reason with %q", next.Reason)
	}
	if f, err := Fail(next, 5000); err != nil || f.(OrderFailed).Reason != "card declined" {
		t.Fatalf("Fail after release = %#v, %v", f, err)
	}
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
			if !errors.Is(err, ErrInvalidTransition) {
				t.Fatalf("err = %v, want ErrInvalidTransition", err)
			}
			var te *TransitionError
			if !errors.As(err, &te) {
				t.Fatalf("err %T is not a *TransitionError", err)
			}
			if te.From != s.Status || te.Version != s.Version {
				t.Fatalf("TransitionError %+v, want From %q Version %d", te, s.Status, s.Version)
			}
			if c.event != nil && c.name != "nil pointer event" && te.Event != c.event.Type() {
				t.Fatalf("TransitionError.Event = %q, want %q", te.Event, c.event.Type())
			}
			if !strings.Contains(te.Why, c.reason) || !strings.Contains(err.Error(), te.Why) {
				t.Fatalf("error %q does not say %q", err, c.reason)
			}
			if !reflect.DeepEqual(got, s) {
				t.Fatalf("rejected event changed the state: %+v", got)
			}
		})
	}
}

func TestApplyAcceptsPointerEvents(t *testing.T) {
	events := []Event{&evStarted, &evReserved, &evPayAuthorized, &evConfirmed}
	got, err := Fold(events, stamps(4))
	if err != nil {
		t.Fatal(err)
	}
	if want := given(t, successPath...); !reflect.DeepEqual(got, want) {
		t.Fatalf("pointer fold %+v, value fold %+v", got, want)
	}
}

func TestApplyDoesNotAliasInputs(t *testing.T) {
	ev := evStarted
	ev.Lines = []Line{{SKU: "A", Quantity: 1}}
	s, err := Apply(State{}, ev, 1)
	if err != nil {
		t.Fatal(err)
	}
	ev.Lines[0].Quantity = 50
	if s.Lines[0].Quantity != 1 {
		t.Fatal("state shares the event's line slice")
	}
	before := s
	beforeLines := append([]Line(nil), s.Lines...)
	if _, err := Apply(s, evReserved, 2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, before) || !reflect.DeepEqual(s.Lines, beforeLines) {
		t.Fatal("Apply changed its input state")
	}
}

func TestFoldStopsAtFirstError(t *testing.T) {
	events := []Event{evStarted, evReserved, evConfirmed, evPayAuthorized}
	s, err := Fold(events, stamps(4))
	var te *TransitionError
	if !errors.As(err, &te) || te.Event != TypeOrderConfirmed {
		t.Fatalf("err = %v, want the OrderConfirmedEvent transition error", err)
	}
	if s.Version != 2 || s.Status != StatusInventoryReserved || s.UpdatedAtUnixMs != 2000 {
		t.Fatalf("partial state %+v, want version 2 InventoryReserved", s)
	}
}

func TestFoldVersionAndTime(t *testing.T) {
	s, err := Fold(paymentFailurePath, []int64{10, 20, 30, 40, 55})
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != 5 || s.UpdatedAtUnixMs != 55 {
		t.Fatalf("version %d updatedAt %d, want 5 and 55", s.Version, s.UpdatedAtUnixMs)
	}
}

func TestFoldLengthMismatch(t *testing.T) {
	_, err := Fold([]Event{evStarted}, nil)
	if !errors.Is(err, ErrLengthMismatch) || errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("err = %v, want ErrLengthMismatch only", err)
	}
}

func TestStatusTerminal(t *testing.T) {
	for s, want := range map[Status]bool{
		StatusCreated: false, StatusInventoryReserved: false, StatusPaymentAuthorized: false,
		StatusConfirmed: true, StatusFailed: true, "": false,
	} {
		if s.Terminal() != want {
			t.Errorf("%q.Terminal() = %v", s, !want)
		}
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
		if e.Type() != want[i] {
			t.Errorf("%T.Type() = %q, want %q", e, e.Type(), want[i])
		}
	}
	if got := (InventoryReleased{EventID: "e", OrderID: "o"}); got.ID() != "e" || got.Order() != "o" {
		t.Errorf("ID/Order = %q/%q", got.ID(), got.Order())
	}
}

func TestStatusValuesAreTheSpecLiterals(t *testing.T) {
	got := []Status{StatusCreated, StatusInventoryReserved, StatusPaymentAuthorized, StatusConfirmed, StatusFailed}
	want := []string{"Created", "InventoryReserved", "PaymentAuthorized", "Confirmed", "Failed"}
	for i := range got {
		if string(got[i]) != want[i] {
			t.Errorf("status %d = %q, want %q", i, got[i], want[i])
		}
	}
}
