package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
)

// ErrAssertion is wrapped by every failed assertion of the scenario.
var ErrAssertion = errors.New("client: assertion failed")

// AssertionError is one failed assertion: the step, what was wrong and the
// last order state (or reply) the scenario saw.
type AssertionError struct {
	Step   string
	Detail string
	Last   string
}

func (e *AssertionError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrAssertion, e.Step, e.Detail)
}

func (e *AssertionError) Unwrap() error { return ErrAssertion }

// Scenario is the client self-check of docs/contract.md, "Scenarios", run
// once through the public order API of every CommerceApi the fixtures name.
// It never calls a runner hook, an admin operation or a store.
type Scenario struct {
	fx   Fixtures
	apis []*API
	out  io.Writer

	mu   sync.Mutex
	last string
	res  Results
}

// NewScenario prepares a run over fx; hc nil uses a client with a 30 s
// timeout per request (above the APIs' own request timeout, so their 504
// is seen rather than ours).
func NewScenario(fx Fixtures, hc *http.Client, out io.Writer) *Scenario {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	s := &Scenario{fx: fx, out: out, res: Results{Orders: map[string]string{}}}
	for _, u := range fx.APIs {
		s.apis = append(s.apis, &API{BaseURL: u, HTTP: hc})
	}
	return s
}

// Run runs every step in order and stops at the first failed assertion,
// returning an *AssertionError. On success it writes the Results to
// fx.ResultsPath when set.
func (s *Scenario) Run(ctx context.Context) (Results, error) {
	steps := []struct {
		name string
		run  func(context.Context, string) error
	}{
		{"9.1-1/2 start and confirm", s.success},
		{"9.1-3 insufficient inventory", s.insufficientInventory},
		{"9.1-4 payment rejected", s.paymentRejected},
		{"9.2-1 same key on two APIs at once", s.duplicateStart},
		{"pending mapping resumes its order", s.pendingMapping},
		{"9.2-2 continue resumes from payment", s.continueInterrupted},
		{"9.2-3 continue repairs the terminal projection", s.continueTerminalSkipped},
		{"9.2-4 rebuild replays the stream", s.rebuildDeleted},
		{"9.2-5 continue after close", s.continueClosed},
		{"9.2-6 relocated order completes", s.relocated},
		{"9.3-1 concurrent orders on every API", s.concurrentOrders},
		{"9.3-2 killed owner answers Unavailable", s.killedOwner},
		{"9.3-3 unknown order stays unknown", s.neverCreated},
	}
	for _, st := range steps {
		if err := st.run(ctx, st.name); err != nil {
			var ae *AssertionError
			if !errors.As(err, &ae) {
				err = s.fail(st.name, "%v", err)
			}
			return s.res, err
		}
	}
	if s.fx.ResultsPath != "" {
		if err := jsonfile.Write(s.fx.ResultsPath, s.res); err != nil {
			return s.res, s.fail("write results", "%v", err)
		}
	}
	return s.res, nil
}

func (s *Scenario) api(i int) *API { return s.apis[i%len(s.apis)] }

func (s *Scenario) key(name string) string { return s.fx.RunID + "-" + name }

func (s *Scenario) ok(step, format string, a ...any) {
	fmt.Fprintf(s.out, "client: ok   %s: %s\n", step, fmt.Sprintf(format, a...))
}

func (s *Scenario) fail(step, format string, a ...any) error {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	return &AssertionError{Step: step, Detail: fmt.Sprintf(format, a...), Last: last}
}

// seen records the last state or reply for a failure report.
func (s *Scenario) seen(what string) {
	s.mu.Lock()
	s.last = what
	s.mu.Unlock()
}

func (s *Scenario) seenState(api *API, st *contracts.OrderState) {
	s.seen(api.BaseURL + ": " + stateJSON(st))
}

func stateJSON(st *contracts.OrderState) string {
	if st == nil {
		return "null"
	}
	b, err := contracts.MarshalJSON(st)
	if err != nil {
		return fmt.Sprintf("%v (%v)", st, err)
	}
	return string(b)
}

func terminal(st *contracts.OrderState) bool {
	return st.GetStatus() == contracts.OrderStatus_Confirmed || st.GetStatus() == contracts.OrderStatus_Failed
}

func is(status contracts.OrderStatus) func(*contracts.OrderState) bool {
	return func(st *contracts.OrderState) bool { return st.GetStatus() == status }
}

// sameState compares every field of two states, updatedAtUnixMs included:
// it is the last event's time, so it only differs if the stream did.
func (s *Scenario) sameState(step, what string, got, want *contracts.OrderState) error {
	if !proto.Equal(got, want) {
		return s.fail(step, "%s: got %s, want %s", what, stateJSON(got), stateJSON(want))
	}
	return nil
}

func (s *Scenario) startReq(key, cart, method string) *contracts.StartOrderReq {
	return &contracts.StartOrderReq{
		CartId: cart, ShippingAddressId: s.fx.ShippingAddressID, PaymentMethodId: method, IdempotencyKey: key,
	}
}

// startNew starts an order with a key never used before: 201 and Created.
func (s *Scenario) startNew(ctx context.Context, step string, api int, req *contracts.StartOrderReq) (*contracts.StartOrderRes, error) {
	a := s.api(api)
	res, rep, err := a.StartOrder(ctx, req)
	if err != nil {
		return nil, s.fail(step, "POST %s/orders: %v", a.BaseURL, err)
	}
	s.seen(a.BaseURL + " POST /orders: " + rep.String())
	if rep.Status != http.StatusCreated {
		return nil, s.fail(step, "POST /orders with new key %s answered %s, want 201", req.IdempotencyKey, rep)
	}
	if err := s.checkStarted(step, a, res); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Scenario) checkStarted(step string, a *API, res *contracts.StartOrderRes) error {
	st := res.GetState()
	s.seenState(a, st)
	switch {
	case res.GetOrderId() == "":
		return s.fail(step, "StartOrderRes has no orderId")
	case st.GetOrderId() != res.GetOrderId():
		return s.fail(step, "StartOrderRes.state is of order %q, not %q", st.GetOrderId(), res.GetOrderId())
	case st.GetStatus() != contracts.OrderStatus_Created:
		return s.fail(step, "StartOrderRes.state.status = %s, want Created", st.GetStatus())
	}
	return nil
}

// get reads an order's read model and requires 200.
func (s *Scenario) get(ctx context.Context, step string, api int, orderID string) (*contracts.OrderState, error) {
	a := s.api(api)
	st, rep, err := a.GetOrder(ctx, orderID)
	if err != nil {
		return nil, s.fail(step, "GET %s/orders/%s: %v", a.BaseURL, orderID, err)
	}
	if !rep.OK() {
		s.seen(a.BaseURL + " GET /orders/" + orderID + ": " + rep.String())
		return nil, s.fail(step, "GET /orders/%s answered %s, want 200", orderID, rep)
	}
	s.seenState(a, st)
	if st.GetOrderId() != orderID {
		return nil, s.fail(step, "GET /orders/%s returned order %q", orderID, st.GetOrderId())
	}
	return st, nil
}

// await polls the read model, bounded by the fixtures' budget, until want
// holds. A terminal state that is not the wanted one fails at once: a
// terminal order never changes again.
func (s *Scenario) await(ctx context.Context, step string, api int, orderID string, want func(*contracts.OrderState) bool, what string) (*contracts.OrderState, error) {
	for attempt := 1; ; attempt++ {
		st, err := s.get(ctx, step, api, orderID)
		if err != nil {
			return nil, err
		}
		if want(st) {
			return st, nil
		}
		if terminal(st) {
			return nil, s.fail(step, "order %s ended %s (reason %q), want %s", orderID, st.GetStatus(), st.GetReason(), what)
		}
		if attempt >= s.fx.Poll.Attempts {
			return nil, s.fail(step, "order %s is still %s after %d looks %v apart, want %s", orderID, st.GetStatus(), attempt, s.fx.Poll.Interval(), what)
		}
		t := time.NewTimer(s.fx.Poll.Interval())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, s.fail(step, "waiting for order %s: %v", orderID, ctx.Err())
		case <-t.C:
		}
	}
}

// expectError requires a failed call to have answered status with code.
func (s *Scenario) expectError(step, call string, rep Reply, err error, status int, code string) error {
	if err != nil {
		return s.fail(step, "%s: %v", call, err)
	}
	s.seen(call + ": " + rep.String())
	if rep.Status != status || rep.Error == nil || rep.Error.Code != code {
		return s.fail(step, "%s answered %s, want %d %s", call, rep, status, code)
	}
	return nil
}

func (s *Scenario) success(ctx context.Context, step string) error {
	c := s.fx.Catalog
	req := s.startReq(s.key("success"), c.SuccessCartID, c.ApprovingMethodID)
	res, err := s.startNew(ctx, step, 0, req)
	if err != nil {
		return err
	}
	id := res.GetOrderId()
	s.res.Orders[CaseSuccess] = id
	// Polled on the other API: the read model is shared, not per process.
	st, err := s.await(ctx, step, 1, id, is(contracts.OrderStatus_Confirmed), "Confirmed")
	if err != nil {
		return err
	}
	switch {
	case st.GetReservationId() == "":
		return s.fail(step, "Confirmed order %s has no reservationId", id)
	case st.GetPaymentId() == "":
		return s.fail(step, "Confirmed order %s has no paymentId", id)
	case st.Amount == nil || st.GetAmount() != c.SuccessAmount:
		return s.fail(step, "Confirmed order %s amount %v, want %d", id, st.Amount, c.SuccessAmount)
	case st.GetCurrency() != c.Currency:
		return s.fail(step, "Confirmed order %s currency %q, want %q", id, st.GetCurrency(), c.Currency)
	case st.GetShippingAddressId() != s.fx.ShippingAddressID:
		return s.fail(step, "Confirmed order %s shippingAddressId %q, want %q", id, st.GetShippingAddressId(), s.fx.ShippingAddressID)
	case st.Reason != nil:
		return s.fail(step, "Confirmed order %s carries a reason %q", id, st.GetReason())
	}
	// A retry of the same request is not a new order: 200, same id, the
	// current read model.
	a := s.api(1)
	again, rep, err := a.StartOrder(ctx, req)
	if err != nil {
		return s.fail(step, "retry POST /orders: %v", err)
	}
	s.seen(a.BaseURL + " POST /orders (retry): " + rep.String())
	if rep.Status != http.StatusOK {
		return s.fail(step, "retry of key %s answered %s, want 200", req.IdempotencyKey, rep)
	}
	if again.GetOrderId() != id {
		return s.fail(step, "retry of key %s answered order %q, want %q", req.IdempotencyKey, again.GetOrderId(), id)
	}
	if err := s.sameState(step, "retry's state", again.GetState(), st); err != nil {
		return err
	}
	s.ok(step, "order %s Created then Confirmed (reservation %s, payment %s, %d %s); retry answered 200 with the same order",
		id, st.GetReservationId(), st.GetPaymentId(), st.GetAmount(), st.GetCurrency())
	return nil
}

func (s *Scenario) insufficientInventory(ctx context.Context, step string) error {
	c := s.fx.Catalog
	res, err := s.startNew(ctx, step, 1, s.startReq(s.key("nostock"), c.InsufficientStockCartID, c.ApprovingMethodID))
	if err != nil {
		return err
	}
	id := res.GetOrderId()
	s.res.Orders[CaseInsufficientInventory] = id
	st, err := s.await(ctx, step, 0, id, terminal, "Confirmed or Failed")
	if err != nil {
		return err
	}
	switch {
	case st.GetStatus() != contracts.OrderStatus_Failed:
		return s.fail(step, "order %s without stock ended %s, want Failed", id, st.GetStatus())
	case st.GetReason() == "":
		return s.fail(step, "Failed order %s has no reason", id)
	case st.PaymentId != nil:
		return s.fail(step, "order %s failed on inventory but shows paymentId %q", id, st.GetPaymentId())
	}
	s.ok(step, "order %s Failed (%s) with no payment", id, st.GetReason())
	return nil
}

func (s *Scenario) paymentRejected(ctx context.Context, step string) error {
	c := s.fx.Catalog
	res, err := s.startNew(ctx, step, 0, s.startReq(s.key("declined"), c.SuccessCartID, c.DecliningMethodID))
	if err != nil {
		return err
	}
	id := res.GetOrderId()
	s.res.Orders[CasePaymentRejected] = id
	st, err := s.await(ctx, step, 1, id, terminal, "Confirmed or Failed")
	if err != nil {
		return err
	}
	switch {
	case st.GetStatus() != contracts.OrderStatus_Failed:
		return s.fail(step, "order %s with a declining method ended %s, want Failed", id, st.GetStatus())
	case c.DeclineReason != "" && st.GetReason() != c.DeclineReason:
		return s.fail(step, "Failed order %s reason %q, want %q", id, st.GetReason(), c.DeclineReason)
	case st.GetReason() == "":
		return s.fail(step, "Failed order %s has no reason", id)
	case st.GetReservationId() == "":
		return s.fail(step, "order %s failed on payment but shows no reservationId", id)
	case st.PaymentId != nil:
		return s.fail(step, "order %s was declined but shows paymentId %q", id, st.GetPaymentId())
	}
	s.ok(step, "order %s Failed (%s) after reservation %s", id, st.GetReason(), st.GetReservationId())
	return nil
}

func (s *Scenario) duplicateStart(ctx context.Context, step string) error {
	c := s.fx.Catalog
	req := s.startReq(s.key("duplicate"), c.SuccessCartID, c.ApprovingMethodID)
	type answer struct {
		res *contracts.StartOrderRes
		rep Reply
		err error
	}
	answers := make([]answer, 2)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			res, rep, err := s.api(i).StartOrder(ctx, req)
			answers[i] = answer{res, rep, err}
		}()
	}
	close(gate)
	wg.Wait()
	created := 0
	for i, a := range answers {
		if a.err != nil {
			return s.fail(step, "POST %s/orders: %v", s.api(i).BaseURL, a.err)
		}
		s.seen(s.api(i).BaseURL + " POST /orders: " + a.rep.String())
		if a.rep.Status != http.StatusCreated && a.rep.Status != http.StatusOK {
			return s.fail(step, "POST %s/orders answered %s, want 201 or 200", s.api(i).BaseURL, a.rep)
		}
		if a.rep.Status == http.StatusCreated {
			created++
		}
	}
	id := answers[0].res.GetOrderId()
	if id == "" || answers[1].res.GetOrderId() != id {
		return s.fail(step, "the same key answered orders %q and %q", id, answers[1].res.GetOrderId())
	}
	if created != 1 {
		return s.fail(step, "%d of the two answers were 201, want exactly one: only one request records the start", created)
	}
	s.res.Orders[CaseDuplicate] = id
	if _, err := s.await(ctx, step, 0, id, is(contracts.OrderStatus_Confirmed), "Confirmed"); err != nil {
		return err
	}
	s.ok(step, "both APIs answered order %s (one 201, one 200); it Confirmed", id)
	return nil
}

func (s *Scenario) pendingMapping(ctx context.Context, step string) error {
	p := s.fx.Prepared.PendingMapping
	a := s.api(1)
	res, rep, err := a.StartOrder(ctx, s.startReq(p.IdempotencyKey, p.CartID, p.PaymentMethodID))
	if err != nil {
		return s.fail(step, "POST %s/orders: %v", a.BaseURL, err)
	}
	s.seen(a.BaseURL + " POST /orders: " + rep.String())
	if rep.Status != http.StatusCreated {
		return s.fail(step, "POST /orders with the pending key answered %s, want 201 (this request records the start)", rep)
	}
	if res.GetOrderId() != p.OrderID {
		return s.fail(step, "the pending key answered order %q, want the reserved %q", res.GetOrderId(), p.OrderID)
	}
	if err := s.checkStarted(step, a, res); err != nil {
		return err
	}
	s.res.Orders[CasePendingMapping] = p.OrderID
	if _, err := s.await(ctx, step, 0, p.OrderID, is(contracts.OrderStatus_Confirmed), "Confirmed"); err != nil {
		return err
	}
	s.ok(step, "the pending key started its reserved order %s, which Confirmed", p.OrderID)
	return nil
}

func (s *Scenario) continueInterrupted(ctx context.Context, step string) error {
	e := s.fx.Prepared.Interrupted
	want, err := e.ExpectedState()
	if err != nil {
		return s.fail(step, "%v", err)
	}
	st, err := s.get(ctx, step, 1, e.OrderID)
	if err != nil {
		return err
	}
	if st.GetStatus() != contracts.OrderStatus_InventoryReserved {
		return s.fail(step, "interrupted order %s is %s before continue, want InventoryReserved (the continuation must be stopped)", e.OrderID, st.GetStatus())
	}
	if err := s.sameState(step, "interrupted order before continue", st, want); err != nil {
		return err
	}
	a := s.api(0)
	got, rep, err := a.Continue(ctx, e.OrderID)
	if err != nil {
		return s.fail(step, "POST continue: %v", err)
	}
	if !rep.OK() {
		s.seen(a.BaseURL + " continue: " + rep.String())
		return s.fail(step, "POST /orders/%s/continue answered %s, want 200", e.OrderID, rep)
	}
	s.seenState(a, got)
	if got.GetStatus() == contracts.OrderStatus_Failed || got.GetStatus() == contracts.OrderStatus_Created {
		return s.fail(step, "continue answered %s, want a state at or after InventoryReserved on the success path", got.GetStatus())
	}
	final, err := s.await(ctx, step, 1, e.OrderID, is(contracts.OrderStatus_Confirmed), "Confirmed")
	if err != nil {
		return err
	}
	if final.GetReservationId() != want.GetReservationId() {
		return s.fail(step, "reservationId changed from %q to %q: the reservation step ran again", want.GetReservationId(), final.GetReservationId())
	}
	if final.GetPaymentId() == "" {
		return s.fail(step, "resumed order %s Confirmed without a paymentId", e.OrderID)
	}
	s.ok(step, "order %s was parked at InventoryReserved; continue resumed it from payment to Confirmed with the same reservation %s", e.OrderID, final.GetReservationId())
	return nil
}

func (s *Scenario) continueTerminalSkipped(ctx context.Context, step string) error {
	e := s.fx.Prepared.TerminalProjectionSkipped
	want, err := e.ExpectedState()
	if err != nil {
		return s.fail(step, "%v", err)
	}
	st, err := s.get(ctx, step, 0, e.OrderID)
	if err != nil {
		return err
	}
	if terminal(st) {
		return s.fail(step, "order %s already shows %s before continue: the terminal projection was not skipped", e.OrderID, st.GetStatus())
	}
	if err := s.sameState(step, "stale read model before continue", st, want); err != nil {
		return err
	}
	a := s.api(1)
	got, rep, err := a.Continue(ctx, e.OrderID)
	if err != nil {
		return s.fail(step, "POST continue: %v", err)
	}
	if !rep.OK() {
		s.seen(a.BaseURL + " continue: " + rep.String())
		return s.fail(step, "POST /orders/%s/continue answered %s, want 200", e.OrderID, rep)
	}
	s.seenState(a, got)
	if got.GetStatus() != contracts.OrderStatus_Confirmed {
		return s.fail(step, "continue answered %s, want the terminal fold Confirmed", got.GetStatus())
	}
	after, err := s.get(ctx, step, 0, e.OrderID)
	if err != nil {
		return err
	}
	if err := s.sameState(step, "read model after continue", after, got); err != nil {
		return err
	}
	s.ok(step, "order %s read model was %s; continue answered Confirmed and the read model now matches it", e.OrderID, want.GetStatus())
	return nil
}

func (s *Scenario) rebuildDeleted(ctx context.Context, step string) error {
	e := s.fx.Prepared.ProjectionDeleted
	want, err := e.ExpectedState()
	if err != nil {
		return s.fail(step, "%v", err)
	}
	_, rep, err := s.api(1).GetOrder(ctx, e.OrderID)
	if err := s.expectError(step, "GET /orders/"+e.OrderID+" (projection deleted)", rep, err, http.StatusNotFound, "NOT_FOUND"); err != nil {
		return err
	}
	a := s.api(0)
	got, rep, err := a.Rebuild(ctx, e.OrderID)
	if err != nil {
		return s.fail(step, "POST rebuild-projection: %v", err)
	}
	if !rep.OK() {
		s.seen(a.BaseURL + " rebuild: " + rep.String())
		return s.fail(step, "POST /orders/%s/rebuild-projection answered %s, want 200", e.OrderID, rep)
	}
	s.seenState(a, got)
	if err := s.sameState(step, "rebuilt state", got, want); err != nil {
		return err
	}
	after, err := s.get(ctx, step, 1, e.OrderID)
	if err != nil {
		return err
	}
	if err := s.sameState(step, "read model after rebuild", after, want); err != nil {
		return err
	}
	s.ok(step, "order %s had no read model; rebuild replayed the stream to the same %s state", e.OrderID, got.GetStatus())
	return nil
}

func (s *Scenario) continueClosed(ctx context.Context, step string) error {
	e := s.fx.Prepared.Closed
	want, err := e.ExpectedState()
	if err != nil {
		return s.fail(step, "%v", err)
	}
	a := s.api(1)
	got, rep, err := a.Continue(ctx, e.OrderID)
	if err != nil {
		return s.fail(step, "POST continue: %v", err)
	}
	if !rep.OK() {
		s.seen(a.BaseURL + " continue: " + rep.String())
		return s.fail(step, "POST /orders/%s/continue after close answered %s, want 200 (a new generation)", e.OrderID, rep)
	}
	s.seenState(a, got)
	if err := s.sameState(step, "state after continue on the closed order", got, want); err != nil {
		return err
	}
	after, err := s.get(ctx, step, 0, e.OrderID)
	if err != nil {
		return err
	}
	if err := s.sameState(step, "read model after continue on the closed order", after, want); err != nil {
		return err
	}
	s.ok(step, "closed order %s answered continue with the same %s state", e.OrderID, got.GetStatus())
	return nil
}

func (s *Scenario) relocated(ctx context.Context, step string) error {
	e := s.fx.Prepared.Relocated
	st, err := s.await(ctx, step, 0, e.OrderID, is(contracts.OrderStatus_Confirmed), "Confirmed")
	if err != nil {
		return err
	}
	if st.GetReservationId() == "" || st.GetPaymentId() == "" {
		return s.fail(step, "relocated order %s Confirmed without reservationId or paymentId", e.OrderID)
	}
	for i := range s.apis {
		other, err := s.get(ctx, step, i, e.OrderID)
		if err != nil {
			return err
		}
		if err := s.sameState(step, "relocated order via "+s.api(i).BaseURL, other, st); err != nil {
			return err
		}
	}
	s.ok(step, "relocated order %s reached Confirmed (reservation %s, payment %s)", e.OrderID, st.GetReservationId(), st.GetPaymentId())
	return nil
}

// concurrentOrders starts one order per API and one more per API, all at
// once, then reads every order through every API.
func (s *Scenario) concurrentOrders(ctx context.Context, step string) error {
	c := s.fx.Catalog
	n := 2 * len(s.apis)
	type answer struct {
		res *contracts.StartOrderRes
		rep Reply
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			res, rep, err := s.api(i).StartOrder(ctx, s.startReq(s.key(fmt.Sprintf("concurrent-%d", i)), c.SuccessCartID, c.ApprovingMethodID))
			answers[i] = answer{res, rep, err}
		}()
	}
	close(gate)
	wg.Wait()
	ids := make([]string, n)
	seen := map[string]bool{}
	for i, a := range answers {
		if a.err != nil {
			return s.fail(step, "POST %s/orders: %v", s.api(i).BaseURL, a.err)
		}
		s.seen(s.api(i).BaseURL + " POST /orders: " + a.rep.String())
		if a.rep.Status != http.StatusCreated {
			return s.fail(step, "POST %s/orders answered %s, want 201", s.api(i).BaseURL, a.rep)
		}
		if err := s.checkStarted(step, s.api(i), a.res); err != nil {
			return err
		}
		ids[i] = a.res.GetOrderId()
		if seen[ids[i]] {
			return s.fail(step, "two different keys answered the same order %s", ids[i])
		}
		seen[ids[i]] = true
	}
	s.res.Concurrent = ids
	for i, id := range ids {
		st, err := s.await(ctx, step, i+1, id, is(contracts.OrderStatus_Confirmed), "Confirmed")
		if err != nil {
			return err
		}
		for j := range s.apis {
			other, err := s.get(ctx, step, j, id)
			if err != nil {
				return err
			}
			if err := s.sameState(step, "order "+id+" via "+s.api(j).BaseURL, other, st); err != nil {
				return err
			}
		}
	}
	s.ok(step, "%d orders started together on %d APIs all Confirmed, each the same through every API: %s", n, len(s.apis), strings.Join(ids, " "))
	return nil
}

// ownerGone is the public error reason of an order whose Ready owner has
// left the topology (docs/contract.md, "Lifecycle": Unavailable, no
// failover).
const ownerGone = "OWNER_GONE"

func (s *Scenario) killedOwner(ctx context.Context, step string) error {
	e := s.fx.Prepared.Crashed
	want, err := e.ExpectedState()
	if err != nil {
		return s.fail(step, "%v", err)
	}
	for i := range s.apis {
		a := s.api(i)
		_, rep, err := a.Continue(ctx, e.OrderID)
		call := a.BaseURL + " POST /orders/" + e.OrderID + "/continue"
		if err := s.expectError(step, call, rep, err, http.StatusServiceUnavailable, "UNAVAILABLE"); err != nil {
			return err
		}
		// Any 503 would also pass for a store outage or a missing member;
		// only this reason says the owner is gone and nothing took over.
		if rep.Error.Reason != ownerGone {
			return s.fail(step, "%s answered %s, want reason %s", call, rep, ownerGone)
		}
	}
	st, err := s.get(ctx, step, 0, e.OrderID)
	if err != nil {
		return err
	}
	if err := s.sameState(step, "read model of the order whose owner died", st, want); err != nil {
		return err
	}
	s.ok(step, "continue on order %s answered 503 UNAVAILABLE (%s) on every API; its read model is unchanged", e.OrderID, ownerGone)
	return nil
}

func (s *Scenario) neverCreated(ctx context.Context, step string) error {
	id := s.fx.Prepared.NeverCreated.OrderID
	for i := range s.apis {
		a := s.api(i)
		_, rep, err := a.Continue(ctx, id)
		if err := s.expectError(step, a.BaseURL+" POST /orders/"+id+"/continue", rep, err, http.StatusNotFound, "NOT_FOUND"); err != nil {
			return err
		}
		_, rep, err = a.Rebuild(ctx, id)
		if err := s.expectError(step, a.BaseURL+" POST /orders/"+id+"/rebuild-projection", rep, err, http.StatusNotFound, "NOT_FOUND"); err != nil {
			return err
		}
	}
	for i := range s.apis {
		a := s.api(i)
		_, rep, err := a.GetOrder(ctx, id)
		if err := s.expectError(step, a.BaseURL+" GET /orders/"+id, rep, err, http.StatusNotFound, "NOT_FOUND"); err != nil {
			return err
		}
	}
	s.ok(step, "continue and rebuild of unknown order %s answered 404 on every API and created nothing (GET is 404)", id)
	return nil
}
