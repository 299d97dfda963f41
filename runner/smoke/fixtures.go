package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck/selfcheckapi"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

type relocRecord struct {
	orderID, source, target string
	generation              int64
}

type killRecord struct {
	orderID, owner string
	generation     int64
	events         int
}

type closeRecord struct {
	orderID    string
	generation int64
}

const (
	typeStarted        = "OrderStartedEvent"
	typeReserved       = "InventoryReservedEvent"
	typeReserveFailed  = "InventoryReservationFailedEvent"
	typeAuthorized     = "PaymentAuthorizedEvent"
	typePaymentFailed  = "PaymentFailedEvent"
	typeReleased       = "InventoryReleasedEvent"
	typeConfirmed      = "OrderConfirmedEvent"
	typeFailed         = "OrderFailedEvent"
	authorityReady     = "Ready"
	authorityMissing   = "Missing"
	gateStop, gateHold = selfcheckapi.GateStop, selfcheckapi.GateHold
	// The public API's answer to a command whose owner is gone (the
	// edge's CodeUnavailable and ReasonOwnerGone, a wire contract).
	codeUnavailable, reasonOwnerGone = "UNAVAILABLE", "OWNER_GONE"
)

func stateJSON(st *contracts.OrderState) string {
	b, err := contracts.MarshalJSON(st)
	if err != nil {
		return fmt.Sprint(st)
	}
	return string(b)
}

func (r *runner) noteState(api int, st *contracts.OrderState) {
	r.last = localcluster.APINodes[api] + " GET /orders/" + st.GetOrderId() + ": " + stateJSON(st)
}

func (r *runner) noteEvidence(api int, ev *evidence) {
	r.last = localcluster.APINodes[api] + " evidence: " + ev.String()
}

// wait sleeps one poll interval, or returns the context's error.
func (r *runner) wait(ctx context.Context) error {
	t := time.NewTimer(r.poll.Interval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// start starts a new order through the public API and requires 201.
func (r *runner) start(ctx context.Context, api int, key, cart, method string) (string, error) {
	res, rep, err := r.pub[api].StartOrder(ctx, &contracts.StartOrderReq{
		CartId: cart, ShippingAddressId: r.address, PaymentMethodId: method, IdempotencyKey: key,
	})
	if err != nil {
		return "", err
	}
	if rep.Status != http.StatusCreated {
		return "", fmt.Errorf("%w: POST /orders (key %s) answered %s, want 201", errFixture, key, rep)
	}
	r.orders[res.GetOrderId()] = true
	r.noteState(api, res.GetState())
	return res.GetOrderId(), nil
}

// awaitState polls the read model, every 100 ms at most 300 times, until
// want holds.
func (r *runner) awaitState(ctx context.Context, api int, id string, want func(*contracts.OrderState) bool, what string) (*contracts.OrderState, error) {
	for attempt := 1; ; attempt++ {
		st, rep, err := r.pub[api].GetOrder(ctx, id)
		if err != nil {
			return nil, err
		}
		if !rep.OK() {
			return nil, fmt.Errorf("%w: GET /orders/%s answered %s", errFixture, id, rep)
		}
		r.noteState(api, st)
		if want(st) {
			return st, nil
		}
		if st.GetStatus() == contracts.OrderStatus_Confirmed || st.GetStatus() == contracts.OrderStatus_Failed {
			return nil, fmt.Errorf("%w: order %s ended %s, want %s", errFixture, id, st.GetStatus(), what)
		}
		if attempt >= r.poll.Attempts {
			return nil, fmt.Errorf("%w: order %s still %s after %d looks, want %s", errFixture, id, st.GetStatus(), attempt, what)
		}
		if err := r.wait(ctx); err != nil {
			return nil, err
		}
	}
}

func status(s contracts.OrderStatus) func(*contracts.OrderState) bool {
	return func(st *contracts.OrderState) bool { return st.GetStatus() == s }
}

// awaitEvidence polls the evidence hook, with the same budget, until want
// holds.
func (r *runner) awaitEvidence(ctx context.Context, api int, id string, want func(*evidence) bool, what string) (*evidence, error) {
	for attempt := 1; ; attempt++ {
		ev, found, err := r.hk[api].evidence(ctx, id)
		if err != nil {
			return nil, err
		}
		if found {
			r.noteEvidence(api, ev)
			if want(ev) {
				return ev, nil
			}
		}
		if attempt >= r.poll.Attempts {
			return nil, fmt.Errorf("%w: evidence of order %s never showed %s (found=%v)", errFixture, id, what, found)
		}
		if err := r.wait(ctx); err != nil {
			return nil, err
		}
	}
}

func lastEvent(ev *evidence) string {
	if len(ev.Events) == 0 {
		return ""
	}
	return ev.Events[len(ev.Events)-1].EventType
}

func isWorkflowNode(name string) bool { return slices.Contains(localcluster.WorkflowNodes, name) }

// prepareFixtures prepares every runner-side fixture of docs/contract.md,
// "Duplicates, resumption and the projection" and
// "Routing and the failure boundary", before the client runs. The planned
// relocation goes first, while both workflow nodes run; then the owner kill;
// every later fixture starts its order after the killed node's new
// incarnation is back, so none of them can belong to the dead owner.
func (r *runner) prepareFixtures(ctx context.Context) error {
	r.fx = client.Fixtures{
		RunID:             r.runID + "-client",
		ShippingAddressID: r.address,
		Catalog:           r.catalog,
		Poll:              client.Poll{IntervalMs: int(r.poll.Interval / time.Millisecond), Attempts: r.poll.Attempts},
	}
	for _, p := range r.pub {
		r.fx.APIs = append(r.fx.APIs, p.BaseURL)
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"planned relocation (docs/contract.md#planned-relocation-resumes-at-payment)", r.fixtureRelocation},
		{"ready owner killed (docs/contract.md#a-dead-owner-answers-unavailable)", r.fixtureKill},
		{"pending mapping", r.fixturePending},
		{"interrupted at InventoryReserved (docs/contract.md#continue-resumes-from-payment)", r.fixtureInterrupted},
		{"terminal projection skipped (docs/contract.md#continue-repairs-a-terminal-projection)", r.fixtureSkipTerminal},
		{"projection deleted (docs/contract.md#rebuild-replays-the-stream)", r.fixtureDeleted},
		{"closed (docs/contract.md#a-closed-order-activates-a-new-generation)", r.fixtureClosed},
		{"never created (docs/contract.md#an-unknown-order-stays-unknown)", r.fixtureNeverCreated},
	}
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return r.fx.Validate()
}

func (r *runner) fixtureRelocation(ctx context.Context) error {
	key := r.runID + "-relocated"
	if err := r.hk[0].armGate(ctx, key, gateHold); err != nil {
		return err
	}
	id, err := r.start(ctx, 1, key, r.catalog.SuccessCartID, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	if _, err := r.awaitState(ctx, 0, id, status(contracts.OrderStatus_InventoryReserved), "parked at InventoryReserved"); err != nil {
		return err
	}
	before, err := r.awaitEvidence(ctx, 0, id, func(ev *evidence) bool {
		return ev.Authority == authorityReady && isWorkflowNode(ev.OwnerNode) && lastEvent(ev) == typeReserved
	}, "a Ready owner with InventoryReservedEvent last")
	if err != nil {
		return err
	}
	if before.ReserveCalls != 1 || before.AuthorizeCalls != 0 {
		return fmt.Errorf("%w: before relocation reserveCalls=%d authorizeCalls=%d, want 1 and 0", errFixture, before.ReserveCalls, before.AuthorizeCalls)
	}
	target := otherWorkflow(before.OwnerNode)
	targetLog := r.cl.LogPath(target)
	from, err := localcluster.LogSize(targetLog)
	if err != nil {
		return err
	}
	res, err := r.hk[1].relocate(ctx, id, "")
	if err != nil {
		return err
	}
	r.last = "relocate: " + fmt.Sprint(res)
	if res.GetSourceNode() != before.OwnerNode || res.GetTargetNode() != target || res.GetGeneration() != before.Generation {
		return fmt.Errorf("%w: relocation answered source=%s target=%s generation=%d, want %s -> %s at generation %d",
			errFixture, res.GetSourceNode(), res.GetTargetNode(), res.GetGeneration(), before.OwnerNode, target, before.Generation)
	}
	after, err := r.awaitEvidence(ctx, 1, id, func(ev *evidence) bool {
		return ev.Authority == authorityReady && ev.OwnerNode == target
	}, "the target "+target+" as the Ready owner")
	if err != nil {
		return err
	}
	if after.Generation != before.Generation {
		return fmt.Errorf("%w: generation %d after relocation, want the same %d", errFixture, after.Generation, before.Generation)
	}
	if after.ReserveCalls != 1 || after.AuthorizeCalls != 0 || lastEvent(after) != typeReserved {
		return fmt.Errorf("%w: the parked order moved on during relocation: %s", errFixture, after)
	}
	replayed := fmt.Sprintf("shoppingmall-order replayed order=%s generation=%d", id, before.Generation)
	if err := localcluster.WaitLines(ctx, targetLog, from, r.poll, localcluster.Lines(localcluster.Exact(replayed))...); err != nil {
		return err
	}
	st, err := r.hk[0].releaseGate(ctx, key, id)
	if err != nil {
		return err
	}
	r.last = "gates/release: " + stateJSON(st)
	// Confirmed before the owner kill that follows, whichever node it hits.
	if _, err := r.awaitState(ctx, 1, id, status(contracts.OrderStatus_Confirmed), "Confirmed after release"); err != nil {
		return err
	}
	r.relocated = relocRecord{orderID: id, source: before.OwnerNode, target: target, generation: before.Generation}
	r.fx.Prepared.Relocated = client.Expected{OrderID: id}
	r.logf("fixture: order %s parked at InventoryReserved, relocated %s -> %s at generation %d, released, Confirmed",
		id, before.OwnerNode, target, before.Generation)
	return nil
}

func otherWorkflow(node string) string {
	if node == localcluster.WorkflowA {
		return localcluster.WorkflowB
	}
	return localcluster.WorkflowA
}

func (r *runner) fixtureKill(ctx context.Context) error {
	key := r.runID + "-killed"
	id, err := r.start(ctx, 0, key, r.catalog.SuccessCartID, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	st, err := r.awaitState(ctx, 1, id, status(contracts.OrderStatus_Confirmed), "Confirmed")
	if err != nil {
		return err
	}
	ev, err := r.awaitEvidence(ctx, 0, id, func(ev *evidence) bool {
		return ev.Authority == authorityReady && isWorkflowNode(ev.OwnerNode)
	}, "a Ready owner")
	if err != nil {
		return err
	}
	victim := ev.OwnerNode
	watcher := localcluster.APINodes[1]
	from, err := logSize(r.cl.LogPath(watcher))
	if err != nil {
		return err
	}
	if err := r.cl.Kill(victim); err != nil {
		return err
	}
	// The passive sign that the cluster saw the owner go: the API's own
	// topology line, read from its log (never a request of ours).
	left := "shoppingmall-topology left node=" + watcher + " target=" + victim
	if err := localcluster.WaitLines(ctx, r.cl.LogPath(watcher), from, r.poll, localcluster.Lines(localcluster.Exact(left))...); err != nil {
		return fmt.Errorf("after SIGKILL of %s: %w", victim, err)
	}
	// From then on the public continue ends in Unavailable at once.
	if err := r.awaitUnavailable(ctx, 1, id); err != nil {
		return fmt.Errorf("after SIGKILL of %s: %w", victim, err)
	}
	if err := r.cl.Restart(ctx, victim); err != nil {
		return fmt.Errorf("restart %s: %w", victim, err)
	}
	// A new incarnation of the same node name does not take the order over.
	_, rep, err := r.pub[0].Continue(ctx, id)
	if err != nil {
		return err
	}
	if !ownerGone(rep) {
		return fmt.Errorf("%w: continue after %s restarted answered %s, want %s", errFixture, victim, rep, wantOwnerGone)
	}
	r.killed = killRecord{orderID: id, owner: victim, generation: ev.Generation, events: len(ev.Events)}
	r.fx.Prepared.Crashed, err = client.Expected{OrderID: id}.WithState(st)
	if err != nil {
		return err
	}
	r.logf("fixture: order %s Confirmed on %s; %s killed (SIGKILL), continue answers %s, %s restarted as pid %d",
		id, victim, victim, wantOwnerGone, victim, r.cl.PID(victim))
	return nil
}

// wantOwnerGone is the only answer that shows a dead owner: any other 503
// (a store outage, no eligible member) says nothing about the owner.
var wantOwnerGone = fmt.Sprintf("%d %s (%s)", http.StatusServiceUnavailable, codeUnavailable, reasonOwnerGone)

func ownerGone(rep client.Reply) bool {
	return rep.Status == http.StatusServiceUnavailable && rep.Error != nil &&
		rep.Error.Code == codeUnavailable && rep.Error.Reason == reasonOwnerGone
}

// awaitUnavailable polls the public continue until it answers 503
// UNAVAILABLE for a gone owner. A 200 would mean the order was served by
// someone other than its dead owner: automatic failover, which must never
// happen.
func (r *runner) awaitUnavailable(ctx context.Context, api int, id string) error {
	for attempt := 1; ; attempt++ {
		_, rep, err := r.pub[api].Continue(ctx, id)
		if err != nil {
			return err
		}
		r.last = localcluster.APINodes[api] + " continue " + id + ": " + rep.String()
		switch {
		case ownerGone(rep):
			return nil
		case rep.OK():
			return fmt.Errorf("%w: continue of order %s answered %s after its owner was killed", errFixture, id, rep)
		}
		if attempt >= r.poll.Attempts {
			return fmt.Errorf("%w: continue of order %s still answers %s after %d looks, want %s", errFixture, id, rep, attempt, wantOwnerGone)
		}
		if err := r.wait(ctx); err != nil {
			return err
		}
	}
}

func (r *runner) fixturePending(ctx context.Context) error {
	key := r.runID + "-pending"
	id, err := r.hk[1].pendingMapping(ctx, key, r.catalog.SuccessCartID, r.address, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	r.orders[id] = true
	_, rep, err := r.pub[0].GetOrder(ctx, id)
	if err != nil {
		return err
	}
	if rep.Status != http.StatusNotFound {
		return fmt.Errorf("%w: the pending mapping's order %s answers GET with %s, want 404 (not started)", errFixture, id, rep)
	}
	r.fx.Prepared.PendingMapping = client.PendingOrder{IdempotencyKey: key, OrderID: id,
		CartID: r.catalog.SuccessCartID, PaymentMethodID: r.catalog.ApprovingMethodID}
	r.logf("fixture: key %s reserved (pending) for order %s, not started", key, id)
	return nil
}

func (r *runner) fixtureInterrupted(ctx context.Context) error {
	key := r.runID + "-interrupted"
	if err := r.hk[0].armGate(ctx, key, gateStop); err != nil {
		return err
	}
	id, err := r.start(ctx, 1, key, r.catalog.SuccessCartID, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	st, err := r.awaitState(ctx, 0, id, status(contracts.OrderStatus_InventoryReserved), "stopped at InventoryReserved")
	if err != nil {
		return err
	}
	ev, err := r.awaitEvidence(ctx, 1, id, func(ev *evidence) bool { return lastEvent(ev) == typeReserved }, "InventoryReservedEvent last")
	if err != nil {
		return err
	}
	if ev.AuthorizeCalls != 0 {
		return fmt.Errorf("%w: the stopped order already called payment %d times", errFixture, ev.AuthorizeCalls)
	}
	r.fx.Prepared.Interrupted, err = client.Expected{OrderID: id}.WithState(st)
	if err != nil {
		return err
	}
	r.logf("fixture: order %s stopped at InventoryReserved (gate stop)", id)
	return nil
}

func (r *runner) fixtureSkipTerminal(ctx context.Context) error {
	key := r.runID + "-skipterm"
	if err := r.hk[1].skipTerminalProjection(ctx, key); err != nil {
		return err
	}
	id, err := r.start(ctx, 0, key, r.catalog.SuccessCartID, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	if _, err := r.awaitEvidence(ctx, 1, id, func(ev *evidence) bool { return lastEvent(ev) == typeConfirmed }, "OrderConfirmedEvent recorded"); err != nil {
		return err
	}
	// The terminal append carries PaymentAuthorizedEvent and
	// OrderConfirmedEvent; skipped, it leaves the read model at the
	// reservation.
	st, err := r.awaitState(ctx, 0, id, status(contracts.OrderStatus_InventoryReserved), "InventoryReserved (terminal projection skipped)")
	if err != nil {
		return err
	}
	r.fx.Prepared.TerminalProjectionSkipped, err = client.Expected{OrderID: id}.WithState(st)
	if err != nil {
		return err
	}
	r.logf("fixture: order %s recorded OrderConfirmedEvent; its read model stays %s", id, st.GetStatus())
	return nil
}

func (r *runner) fixtureDeleted(ctx context.Context) error {
	key := r.runID + "-deleted"
	id, err := r.start(ctx, 1, key, r.catalog.SuccessCartID, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	st, err := r.awaitState(ctx, 0, id, status(contracts.OrderStatus_Confirmed), "Confirmed")
	if err != nil {
		return err
	}
	if err := r.hk[1].deleteProjection(ctx, id); err != nil {
		return err
	}
	_, rep, err := r.pub[0].GetOrder(ctx, id)
	if err != nil {
		return err
	}
	if rep.Status != http.StatusNotFound {
		return fmt.Errorf("%w: GET after deleting the projection of %s answered %s, want 404", errFixture, id, rep)
	}
	r.fx.Prepared.ProjectionDeleted, err = client.Expected{OrderID: id}.WithState(st)
	if err != nil {
		return err
	}
	r.logf("fixture: order %s Confirmed, then its projection deleted", id)
	return nil
}

func (r *runner) fixtureClosed(ctx context.Context) error {
	key := r.runID + "-closed"
	id, err := r.start(ctx, 0, key, r.catalog.SuccessCartID, r.catalog.ApprovingMethodID)
	if err != nil {
		return err
	}
	st, err := r.awaitState(ctx, 1, id, status(contracts.OrderStatus_Confirmed), "Confirmed")
	if err != nil {
		return err
	}
	ev, err := r.awaitEvidence(ctx, 0, id, func(ev *evidence) bool { return ev.Authority == authorityReady }, "a Ready owner")
	if err != nil {
		return err
	}
	res, err := r.hk[1].close(ctx, id)
	if err != nil {
		return err
	}
	r.last = "close: " + fmt.Sprint(res)
	if res.GetGeneration() != ev.Generation {
		return fmt.Errorf("%w: close answered generation %d, evidence showed %d", errFixture, res.GetGeneration(), ev.Generation)
	}
	if _, err := r.awaitEvidence(ctx, 0, id, func(ev *evidence) bool { return ev.Authority != authorityReady }, "the authority released"); err != nil {
		return err
	}
	r.closed = closeRecord{orderID: id, generation: ev.Generation}
	r.fx.Prepared.Closed, err = client.Expected{OrderID: id}.WithState(st)
	if err != nil {
		return err
	}
	r.logf("fixture: order %s Confirmed at generation %d, then closed", id, ev.Generation)
	return nil
}

func (r *runner) fixtureNeverCreated(ctx context.Context) error {
	id := "ord-" + uuid.NewString()
	for i := range r.hk {
		if _, found, err := r.hk[i].evidence(ctx, id); err != nil {
			return err
		} else if found {
			return fmt.Errorf("%w: fresh order id %s already has a stream", errFixture, id)
		}
	}
	r.orders[id] = true
	r.fx.Prepared.NeverCreated = client.Expected{OrderID: id}
	return nil
}

// logSize is where a log ends now: waits for lines written after an action
// start there.
func logSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("log %s: %w", path, err)
	}
	return fi.Size(), nil
}
