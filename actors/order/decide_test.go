package order

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			require.Equal(t, before, s, "command changed its input state")
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr, "event %#v", got)
				require.Nil(t, got, "no event with an error")
				if !errors.Is(c.wantErr, ErrInvalidCommand) {
					var te *TransitionError
					require.ErrorAs(t, err, &te)
					require.ErrorIs(t, err, ErrInvalidTransition)
					require.Equal(t, s.Status, te.From)
					require.Equal(t, s.Version, te.Version)
					require.NotEmpty(t, te.Event)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.then, got)
			// What a command returns must be recordable.
			_, err = Apply(s, got, 1)
			require.NoError(t, err, "the command's event applies")
		})
	}
}

func TestStartCopiesLines(t *testing.T) {
	c := startCmd()
	ev, err := Start(State{}, c)
	require.NoError(t, err)
	c.Lines[0].Quantity = 99
	require.Equal(t, int32(2), ev.(OrderStarted).Lines[0].Quantity, "event shares the command's line slice")
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
		assert.Equal(t, c.want, Decide(given(t, c.given...)), c.name)
	}
}

// runWorkflow drives an order the way the workflow does: decide, perform
// the step with the scripted module answers, record, repeat.
// modules says what the inventory and payment modules answer.
type modules struct{ reserveOK, payOK bool }

func runWorkflow(t *testing.T, m modules) (State, []Event) {
	t.Helper()
	at := int64(1000)
	first, err := Start(State{}, startCmd())
	require.NoError(t, err)
	s, err := Apply(State{}, first, at)
	require.NoError(t, err)
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
			if !m.reserveOK {
				reason = "out of stock"
			}
			ev, err = ReservationResult(s, m.reserveOK, reason)
		case StepAuthorizePayment:
			reason := ""
			if !m.payOK {
				reason = "card declined"
			}
			ev, err = PaymentResult(s, m.payOK, reason)
		case StepReleaseInventory:
			ev, err = Released(s, "")
		case StepConfirm:
			ev, err = Confirm(s, at)
		case StepFail:
			ev, err = Fail(s, at)
		default:
			require.FailNow(t, "unexpected step", "%s", step)
		}
		require.NoError(t, err, "step %s", step)
		s, err = Apply(s, ev, at)
		require.NoError(t, err, "step %s", step)
		events = append(events, ev)
	}
	require.FailNow(t, "workflow did not terminate", "%+v", s)
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
			s, events := runWorkflow(t, modules{reserveOK: c.reserveOK, payOK: c.payOK})
			require.Equal(t, c.wantEvents, events)
			require.Equal(t, c.wantStatus, s.Status)
			require.Equal(t, c.wantReason, s.Reason)
			require.True(t, s.Status.Terminal(), "final status %s", s.Status)
			require.Equal(t, int64(len(events)), s.Version, "version after %d events", len(events))
			for i, e := range events {
				require.Equal(t, EventID(oid, int64(i+1)), e.ID(), "event %d", i+1)
				require.Equal(t, oid, e.Order(), "event %d", i+1)
			}
			// Replaying the stream gives the same state the live run had.
			replayed, err := Fold(events, stamps(len(events)))
			require.NoError(t, err)
			require.Equal(t, s, replayed)
		})
	}
}

func TestPaymentIsNeverAttemptedAfterInventoryFailure(t *testing.T) {
	_, events := runWorkflow(t, modules{reserveOK: false, payOK: true})
	for _, e := range events {
		switch e.(type) {
		case PaymentAuthorized, PaymentFailed, InventoryReleased:
			require.FailNow(t, "inventory failure path recorded a payment-side event", "%s", e.Type())
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
			require.True(t, s.Status.Terminal(), "status %s", s.Status)
			require.Equal(t, StepNone, Decide(s))
			for cmd, r := range allCommands(s) {
				var te *TransitionError
				assert.ErrorAs(t, r.err, &te, "%s on %s returned %#v", cmd, s.Status, r.ev)
				assert.ErrorIs(t, r.err, ErrInvalidTransition, "%s on %s", cmd, s.Status)
			}
			for _, ev := range candidateEvents(s) {
				_, err := Apply(s, ev, 1)
				assert.ErrorIs(t, err, ErrInvalidTransition, "Apply(%s) on %s", ev.Type(), s.Status)
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
		require.LessOrEqual(t, len(n.history), 5, "stream longer than any spec branch: %v", n.history)
		step := Decide(n.s)
		allowed := stepEvents[step]
		if !n.s.Started {
			allowed = []string{TypeOrderStarted}
		}
		for _, done := range n.history {
			assert.NotContains(t, allowed, done, "after %v Decide = %s, whose outcome is already recorded", n.history, step)
		}

		for _, ev := range candidateEvents(n.s) {
			_, err := Apply(n.s, ev, 1)
			want := slices.Contains(allowed, ev.Type())
			assert.Equal(t, want, err == nil, "after %v: Apply(%s) err = %v", n.history, ev.Type(), err)
		}

		progressed := false
		for cmd, r := range allCommands(n.s) {
			if r.err != nil {
				assert.ErrorIs(t, r.err, ErrInvalidTransition, "after %v: %s", n.history, cmd)
				continue
			}
			if !assert.Contains(t, allowed, r.ev.Type(), "after %v (step %s): %s", n.history, step, cmd) {
				continue
			}
			next, err := Apply(n.s, r.ev, int64(len(n.history)+1))
			if !assert.NoError(t, err, "after %v: %s event does not apply", n.history, cmd) {
				continue
			}
			progressed = true
			queue = append(queue, node{next, append(slices.Clone(n.history), r.ev.Type())})
		}
		if step == StepNone && n.s.Started {
			terminals++
			assert.False(t, progressed, "after %v: no step but a command progressed", n.history)
			assert.True(t, n.s.Status.Terminal(), "after %v: no step but status %s", n.history, n.s.Status)
		} else {
			assert.True(t, progressed, "after %v: step %s but no command could take it", n.history, step)
		}
	}
	// 7 distinct non-terminal states and the 3 terminal ends of the branches
	// of docs/contract.md, "Event order".
	require.Equal(t, 10, visited, "states visited")
	require.Equal(t, 3, terminals, "terminal states")
}

func TestStepString(t *testing.T) {
	want := map[Step]string{
		StepNone: "None", StepReserveInventory: "ReserveInventory", StepAuthorizePayment: "AuthorizePayment",
		StepConfirm: "Confirm", StepReleaseInventory: "ReleaseInventory", StepFail: "Fail", Step(42): "Step(42)",
	}
	for s, w := range want {
		assert.Equal(t, w, s.String(), "Step(%d)", int(s))
	}
}
