package order

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func withStart(mut func(*StartOrder)) func(State) (Event, error) {
	return func(s State) (Event, error) {
		c := startCmd()
		mut(&c)
		return Start(s, c)
	}
}

func TestCommands(t *testing.T) {
	reserve := func(ok bool, reason string) func(State) (Event, error) {
		return func(s State) (Event, error) { return ReservationResult(s, ok, reason) }
	}
	pay := func(ok bool, reason string) func(State) (Event, error) {
		return func(s State) (Event, error) { return PaymentResult(s, ok, reason) }
	}
	release := func(reason string) func(State) (Event, error) {
		return func(s State) (Event, error) { return Released(s, reason) }
	}
	confirm := func(s State) (Event, error) { return Confirm(s, 4000) }
	fail := func(at int64) func(State) (Event, error) {
		return func(s State) (Event, error) { return Fail(s, at) }
	}
	start := withStart(func(*StartOrder) {})

	cases := []struct {
		name    string
		given   []Event
		when    func(State) (Event, error)
		then    Event
		wantErr error
	}{
		// Start
		{name: "start a new order", when: start, then: evStarted},
		{name: "start with amount zero", when: withStart(func(c *StartOrder) { c.Amount = 0 }),
			then: func() Event { e := evStarted; e.Amount = 0; return e }()},
		{name: "start twice", given: []Event{evStarted}, when: start, wantErr: ErrAlreadyStarted},
		{name: "start a terminal order", given: successPath, when: start, wantErr: ErrAlreadyStarted},
		{name: "start without orderId", when: withStart(func(c *StartOrder) { c.OrderID = "" }), wantErr: ErrInvalidCommand},
		{name: "start without cartId", when: withStart(func(c *StartOrder) { c.CartID = "" }), wantErr: ErrInvalidCommand},
		{name: "start without address", when: withStart(func(c *StartOrder) { c.ShippingAddressID = "" }), wantErr: ErrInvalidCommand},
		{name: "start without sourceCommandId", when: withStart(func(c *StartOrder) { c.SourceCommandID = "" }), wantErr: ErrInvalidCommand},
		{name: "start without currency", when: withStart(func(c *StartOrder) { c.Currency = "" }), wantErr: ErrInvalidCommand},
		{name: "start without lines", when: withStart(func(c *StartOrder) { c.Lines = nil }), wantErr: ErrInvalidCommand},
		{name: "start with zero quantity", when: withStart(func(c *StartOrder) { c.Lines = []Line{{SKU: "A", Quantity: 0}} }), wantErr: ErrInvalidCommand},
		{name: "start with negative quantity", when: withStart(func(c *StartOrder) { c.Lines = []Line{{SKU: "A", Quantity: -1}} }), wantErr: ErrInvalidCommand},
		{name: "start with empty sku", when: withStart(func(c *StartOrder) { c.Lines = []Line{{Quantity: 1}} }), wantErr: ErrInvalidCommand},
		{name: "start with negative amount", when: withStart(func(c *StartOrder) { c.Amount = -1 }), wantErr: ErrInvalidCommand},

		// Inventory
		{name: "reservation accepted", given: []Event{evStarted}, when: reserve(true, "ignored"), then: evReserved},
		{name: "reservation rejected", given: []Event{evStarted}, when: reserve(false, "out of stock"), then: evReserveFailed},
		{name: "reservation rejected without reason", given: []Event{evStarted}, when: reserve(false, ""),
			then: InventoryReservationFailed{EventID: EventID(oid, 2), OrderID: oid, Reason: defaultReservationReason}},
		{name: "reservation before start", when: reserve(true, ""), wantErr: ErrInvalidTransition},
		{name: "reservation recorded twice", given: []Event{evStarted, evReserved}, when: reserve(true, ""), wantErr: ErrInvalidTransition},
		{name: "reservation after its failure", given: []Event{evStarted, evReserveFailed}, when: reserve(true, ""), wantErr: ErrInvalidTransition},

		// Payment
		{name: "payment accepted", given: []Event{evStarted, evReserved}, when: pay(true, ""), then: evPayAuthorized},
		{name: "payment rejected", given: []Event{evStarted, evReserved}, when: pay(false, "card declined"), then: evPayFailed},
		{name: "payment rejected without reason", given: []Event{evStarted, evReserved}, when: pay(false, ""),
			then: PaymentFailed{EventID: EventID(oid, 3), OrderID: oid, Reason: defaultPaymentReason}},
		{name: "payment before reservation", given: []Event{evStarted}, when: pay(true, ""), wantErr: ErrInvalidTransition},
		{name: "payment after reservation failure", given: []Event{evStarted, evReserveFailed}, when: pay(true, ""), wantErr: ErrInvalidTransition},
		{name: "payment recorded twice", given: []Event{evStarted, evReserved, evPayAuthorized}, when: pay(true, ""), wantErr: ErrInvalidTransition},
		{name: "payment after its failure", given: []Event{evStarted, evReserved, evPayFailed}, when: pay(true, ""), wantErr: ErrInvalidTransition},

		// Compensation
		{name: "release after payment failure", given: []Event{evStarted, evReserved, evPayFailed}, when: release("card declined"), then: evReleased},
		{name: "release without reason repeats the failure reason", given: []Event{evStarted, evReserved, evPayFailed}, when: release(""), then: evReleased},
		{name: "release without payment failure", given: []Event{evStarted, evReserved}, when: release("x"), wantErr: ErrInvalidTransition},
		{name: "release after payment authorized", given: []Event{evStarted, evReserved, evPayAuthorized}, when: release("x"), wantErr: ErrInvalidTransition},
		{name: "release without reservation", given: []Event{evStarted, evReserveFailed}, when: release("x"), wantErr: ErrInvalidTransition},
		{name: "release twice", given: []Event{evStarted, evReserved, evPayFailed, evReleased}, when: release("x"), wantErr: ErrInvalidTransition},

		// Conclusion
		{name: "confirm after payment", given: []Event{evStarted, evReserved, evPayAuthorized}, when: confirm, then: evConfirmed},
		{name: "confirm before payment", given: []Event{evStarted, evReserved}, when: confirm, wantErr: ErrInvalidTransition},
		{name: "confirm after payment failure", given: []Event{evStarted, evReserved, evPayFailed, evReleased}, when: confirm, wantErr: ErrInvalidTransition},
		{name: "fail after reservation failure", given: []Event{evStarted, evReserveFailed}, when: fail(3000), then: evFailedAfterStock},
		{name: "fail after release", given: []Event{evStarted, evReserved, evPayFailed, evReleased}, when: fail(5000), then: evFailedAfterRefund},
		{name: "fail before release", given: []Event{evStarted, evReserved, evPayFailed}, when: fail(5000), wantErr: ErrInvalidTransition},
		{name: "fail a healthy order", given: []Event{evStarted, evReserved, evPayAuthorized}, when: fail(5000), wantErr: ErrInvalidTransition},
		{name: "fail before start", when: fail(1), wantErr: ErrInvalidTransition},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := given(t, c.given...)
			before := s
			got, err := c.when(s)
			if !reflect.DeepEqual(s, before) {
				t.Fatalf("command changed its input state")
			}
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v (event %#v)", err, c.wantErr, got)
				}
				if got != nil {
					t.Fatalf("event %#v returned with error", got)
				}
				if !errors.Is(c.wantErr, ErrInvalidCommand) {
					var te *TransitionError
					if !errors.As(err, &te) || !errors.Is(err, ErrInvalidTransition) {
						t.Fatalf("err = %v, want a *TransitionError", err)
					}
					if te.From != s.Status || te.Version != s.Version || te.Event == "" {
						t.Fatalf("TransitionError = %+v, want From %q Version %d", te, s.Status, s.Version)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if !reflect.DeepEqual(got, c.then) {
				t.Fatalf("then\n got %#v\nwant %#v", got, c.then)
			}
			// What a command returns must be recordable.
			if _, err := Apply(s, got, 1); err != nil {
				t.Fatalf("command's event does not apply: %v", err)
			}
		})
	}
}

func TestStartCopiesLines(t *testing.T) {
	c := startCmd()
	ev, err := Start(State{}, c)
	if err != nil {
		t.Fatal(err)
	}
	c.Lines[0].Quantity = 99
	if ev.(OrderStarted).Lines[0].Quantity != 2 {
		t.Fatal("event shares the command's line slice")
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name  string
		given []Event
		want  Step
	}{
		{"no stream", nil, StepNone},
		{"created", []Event{evStarted}, StepReserveInventory},
		{"reservation failed", []Event{evStarted, evReserveFailed}, StepFail},
		{"inventory reserved", []Event{evStarted, evReserved}, StepAuthorizePayment},
		{"payment failed", []Event{evStarted, evReserved, evPayFailed}, StepReleaseInventory},
		{"released", []Event{evStarted, evReserved, evPayFailed, evReleased}, StepFail},
		{"payment authorized", []Event{evStarted, evReserved, evPayAuthorized}, StepConfirm},
		{"confirmed", successPath, StepNone},
		{"failed after stock", inventoryFailPath, StepNone},
		{"failed after payment", paymentFailurePath, StepNone},
	}
	for _, c := range cases {
		if got := Decide(given(t, c.given...)); got != c.want {
			t.Errorf("%s: Decide = %s, want %s", c.name, got, c.want)
		}
	}
}

// runWorkflow drives an order the way the workflow does: decide, perform
// the step with the scripted module answers, record, repeat.
func runWorkflow(t *testing.T, reserveOK, payOK bool) (State, []Event) {
	t.Helper()
	at := int64(1000)
	first, err := Start(State{}, startCmd())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Apply(State{}, first, at)
	if err != nil {
		t.Fatal(err)
	}
	events := []Event{first}
	for range 10 {
		step := Decide(s)
		if step == StepNone {
			return s, events
		}
		at += 1000
		var ev Event
		switch step {
		case StepReserveInventory:
			reason := ""
			if !reserveOK {
				reason = "out of stock"
			}
			ev, err = ReservationResult(s, reserveOK, reason)
		case StepAuthorizePayment:
			reason := ""
			if !payOK {
				reason = "card declined"
			}
			ev, err = PaymentResult(s, payOK, reason)
		case StepReleaseInventory:
			ev, err = Released(s, "")
		case StepConfirm:
			ev, err = Confirm(s, at)
		case StepFail:
			ev, err = Fail(s, at)
		default:
			t.Fatalf("unexpected step %s", step)
		}
		if err != nil {
			t.Fatalf("step %s: %v", step, err)
		}
		if s, err = Apply(s, ev, at); err != nil {
			t.Fatalf("step %s: %v", step, err)
		}
		events = append(events, ev)
	}
	t.Fatalf("workflow did not terminate: %+v", s)
	return s, nil
}

func TestSpecEventOrders(t *testing.T) {
	cases := []struct {
		name             string
		reserveOK, payOK bool
		wantEvents       []Event
		wantStatus       Status
		wantReason       string
	}{
		{"success", true, true, successPath, StatusConfirmed, ""},
		{"inventory failure", false, true, inventoryFailPath, StatusFailed, "out of stock"},
		{"payment failure", true, false, paymentFailurePath, StatusFailed, "card declined"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, events := runWorkflow(t, c.reserveOK, c.payOK)
			if !reflect.DeepEqual(events, c.wantEvents) {
				t.Fatalf("events\n got %#v\nwant %#v", events, c.wantEvents)
			}
			if s.Status != c.wantStatus || s.Reason != c.wantReason || !s.Status.Terminal() {
				t.Fatalf("final state %s/%q, want %s/%q", s.Status, s.Reason, c.wantStatus, c.wantReason)
			}
			if s.Version != int64(len(events)) {
				t.Fatalf("version %d after %d events", s.Version, len(events))
			}
			for i, e := range events {
				if e.ID() != EventID(oid, int64(i+1)) || e.Order() != oid {
					t.Fatalf("event %d has id %q order %q", i+1, e.ID(), e.Order())
				}
			}
			// Replaying the stream gives the same state the live run had.
			replayed, err := Fold(events, stamps(len(events)))
			if err != nil || !reflect.DeepEqual(replayed, s) {
				t.Fatalf("replay = %+v, %v; want %+v", replayed, err, s)
			}
		})
	}
}

func TestPaymentIsNeverAttemptedAfterInventoryFailure(t *testing.T) {
	_, events := runWorkflow(t, false, true)
	for _, e := range events {
		switch e.(type) {
		case PaymentAuthorized, PaymentFailed, InventoryReleased:
			t.Fatalf("inventory failure path recorded %s", e.Type())
		}
	}
}

func TestTerminalStatesAcceptNothing(t *testing.T) {
	for name, path := range map[string][]Event{
		"confirmed":            successPath,
		"failed after stock":   inventoryFailPath,
		"failed after payment": paymentFailurePath,
	} {
		t.Run(name, func(t *testing.T) {
			s := given(t, path...)
			if !s.Status.Terminal() {
				t.Fatalf("status %s is not terminal", s.Status)
			}
			if d := Decide(s); d != StepNone {
				t.Fatalf("Decide = %s, want None", d)
			}
			for cmd, r := range allCommands(s) {
				var te *TransitionError
				if r.err == nil || !errors.As(r.err, &te) || !errors.Is(r.err, ErrInvalidTransition) {
					t.Errorf("%s on %s = %#v, %v; want *TransitionError", cmd, s.Status, r.ev, r.err)
				}
			}
			for _, ev := range candidateEvents(s) {
				if _, err := Apply(s, ev, 1); !errors.Is(err, ErrInvalidTransition) {
					t.Errorf("Apply(%s) on %s = %v; want ErrInvalidTransition", ev.Type(), s.Status, err)
				}
			}
		})
	}
}

// stepEvents is what each step may record.
var stepEvents = map[Step][]string{
	StepReserveInventory: {TypeInventoryReserved, TypeInventoryReservationFailed},
	StepAuthorizePayment: {TypePaymentAuthorized, TypePaymentFailed},
	StepReleaseInventory: {TypeInventoryReleased},
	StepConfirm:          {TypeOrderConfirmed},
	StepFail:             {TypeOrderFailed},
}

// candidateEvents builds one well-formed event of each of the eight types
// for the next version of s, so that only the order of events decides
// whether Apply accepts it.
func candidateEvents(s State) []Event {
	id := EventID(oid, s.Version+1)
	started := evStarted
	started.EventID = id
	return []Event{
		started,
		InventoryReserved{EventID: id, OrderID: oid, ReservationID: ReservationID(oid)},
		InventoryReservationFailed{EventID: id, OrderID: oid, Reason: "r"},
		PaymentAuthorized{EventID: id, OrderID: oid, PaymentID: PaymentID(oid)},
		PaymentFailed{EventID: id, OrderID: oid, Reason: "r"},
		InventoryReleased{EventID: id, OrderID: oid, ReservationID: ReservationID(oid), Reason: "r"},
		OrderConfirmed{EventID: id, OrderID: oid, ConfirmedAtUnixMs: 1},
		OrderFailed{EventID: id, OrderID: oid, Reason: "r", FailedAtUnixMs: 1},
	}
}

// TestEveryReachableState explores every state the commands can reach and
// checks, in each: only the decided step's command succeeds, it never
// records an outcome already in the stream, Apply accepts exactly the
// events of that step, and the order always terminates.
func TestEveryReachableState(t *testing.T) {
	type node struct {
		s       State
		history []string
	}
	queue := []node{{}}
	terminals := 0
	visited := 0
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		visited++
		if len(n.history) > 5 {
			t.Fatalf("stream longer than any spec branch: %v", n.history)
		}
		step := Decide(n.s)
		allowed := stepEvents[step]
		if !n.s.Started {
			allowed = []string{TypeOrderStarted}
		}
		for _, done := range n.history {
			if slices.Contains(allowed, done) {
				t.Errorf("after %v Decide = %s, whose outcome %s is already recorded", n.history, step, done)
			}
		}

		for _, ev := range candidateEvents(n.s) {
			_, err := Apply(n.s, ev, 1)
			if want := slices.Contains(allowed, ev.Type()); want != (err == nil) {
				t.Errorf("after %v: Apply(%s) err = %v, want accepted=%v", n.history, ev.Type(), err, want)
			}
		}

		progressed := false
		for cmd, r := range allCommands(n.s) {
			if r.err != nil {
				if !errors.Is(r.err, ErrInvalidTransition) {
					t.Errorf("after %v: %s failed with %v, want ErrInvalidTransition", n.history, cmd, r.err)
				}
				continue
			}
			if !slices.Contains(allowed, r.ev.Type()) {
				t.Errorf("after %v (step %s): %s produced %s", n.history, step, cmd, r.ev.Type())
				continue
			}
			next, err := Apply(n.s, r.ev, int64(len(n.history)+1))
			if err != nil {
				t.Errorf("after %v: %s event does not apply: %v", n.history, cmd, err)
				continue
			}
			progressed = true
			queue = append(queue, node{next, append(slices.Clone(n.history), r.ev.Type())})
		}
		if step == StepNone && n.s.Started {
			terminals++
			if progressed || !n.s.Status.Terminal() {
				t.Errorf("after %v: no step but status %s, progressed=%v", n.history, n.s.Status, progressed)
			}
		} else if !progressed {
			t.Errorf("after %v: step %s but no command could take it", n.history, step)
		}
	}
	// 7 distinct non-terminal states and the 3 terminal ends of spec §6.3.
	if visited != 10 || terminals != 3 {
		t.Fatalf("visited %d states with %d terminals, want 10 and 3", visited, terminals)
	}
}

func TestStepString(t *testing.T) {
	want := map[Step]string{
		StepNone: "None", StepReserveInventory: "ReserveInventory", StepAuthorizePayment: "AuthorizePayment",
		StepConfirm: "Confirm", StepReleaseInventory: "ReleaseInventory", StepFail: "Fail", Step(42): "Step(42)",
	}
	for s, w := range want {
		if s.String() != w {
			t.Errorf("Step(%d).String() = %q, want %q", int(s), s.String(), w)
		}
	}
}
