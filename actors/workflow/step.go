package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Step performs the one next step the fold decides (order.Decide), both of
// its phases in one call: MakeEffect calls the module the step needs,
// Record appends the one resulting event at the fold's version under the
// owner's fence, then writes the projection.
//
// A step whose effect leads to a step without one (confirm after the
// payment, fail after a refused reservation or a release) records that
// step's event in the same append (withFollowUp).
//
// Round trips per step (the append carries its projection):
//   - reserve inventory: Reserve + append = 2
//   - authorize payment: Authorize + append = 2, plus one LoadFirst when
//     this activation did not record the start itself
//   - release inventory: Release + append = 2
//   - confirm / fail, when a replay ends right before them: append = 1
//
// It reports progressed=false with no error when there is nothing to do,
// or when the append lost to an event already in the stream (a retried
// append that landed): the fold is then reloaded, one more round trip.
// ErrFenced means a newer owner exists and the caller must stop. Any
// error comes with progressed=false.
func (s *Service) Step(ctx context.Context, o *Order) (progressed bool, err error) {
	eff, err := s.MakeEffect(ctx, o)
	if err != nil || eff == nil {
		return false, err
	}
	return s.Record(ctx, o, eff, Project)
}

// Effect is a step between its two phases: its external effect is made
// (the module answered; confirm and fail have none) and its event is
// decided but not recorded. An owner that stops here has made an effect
// it has not recorded; whoever owns the order next decides the same step
// from the stream and calls the module again under the same
// deterministic id, which answers the first result (docs/contract.md,
// "Failure and compensation").
//
// An Effect belongs to the Order it was made for and to the fold version
// it was decided from; it is not safe for concurrent use.
type Effect struct {
	orderID string
	step    order.Step
	event   order.Event
	at      int64
	// version is the fold's version the step was decided from: the event
	// is recorded right after it or not at all.
	version int64
	// began is when MakeEffect started, for the step's latency.
	began time.Time
	// next is the fold the event leads to, and follow the step Decide
	// gives there when it has no external effect (confirm, fail), else
	// StepNone: Record appends that step's event with this one.
	next   order.State
	follow order.Step
}

// EndsOrder says whether recording the effect ends the order: its event,
// or the effect-less step recorded with it, is terminal.
func (e *Effect) EndsOrder() bool { return e.follow != order.StepNone || e.next.Status.Terminal() }

// Step is the step whose effect this is.
func (e *Effect) Step() order.Step { return e.step }

// Projection says what Record does with the read model.
type Projection int

const (
	// Project writes the projection of the new fold in the event's own
	// append (readmodel.Committer).
	Project Projection = iota
	// LeaveProjectionBehind records the event alone. The projection stays
	// at the previous version — the state a process stopped between the
	// append and the projection write leaves — until the next projection
	// write repairs it (Continue on a terminal order, Rebuild, or the
	// owner's next step).
	LeaveProjectionBehind
)

func (p Projection) String() string {
	switch p {
	case Project:
		return "project"
	case LeaveProjectionBehind:
		return "leave-projection-behind"
	}
	return fmt.Sprintf("Projection(%d)", int(p))
}

// MakeEffect performs the first phase of the next step: it finishes what
// an earlier command left half done (repair), decides the step from the
// fold, refuses a step whose effect the fold already records, and calls
// the module the step needs. It returns nil with no error when there is
// nothing to do. Nothing is appended: Record does that.
func (s *Service) MakeEffect(ctx context.Context, o *Order) (*Effect, error) {
	began := time.Now()
	if err := s.refreshIfStale(ctx, o); err != nil {
		return nil, err
	}
	if err := s.repair(ctx, o); err != nil {
		return nil, err
	}
	st := o.state
	step := order.Decide(st)
	if step == order.StepNone {
		return nil, nil
	}
	if err := s.guardRepeatedEffect(o, step); err != nil {
		return nil, err
	}

	var ev order.Event
	var err error
	now := s.cfg.Now()
	switch step {
	case order.StepReserveInventory:
		res, err := s.cfg.Inventory.Reserve(ctx, &contracts.ReserveInventoryReq{
			OrderId: o.id, ReservationId: order.ReservationID(o.id), Lines: contractLines(st.Lines),
		})
		if err != nil {
			return nil, fmt.Errorf("reserve inventory for order %s: %w", o.id, err)
		}
		// The domain supplies a reason when the module gives none.
		ev, err = order.ReservationResult(st, res.GetAccepted(), res.GetReason())
		if err != nil {
			return nil, fmt.Errorf("order %s reservation result: %w", o.id, err)
		}
	case order.StepAuthorizePayment:
		methodID, err := s.paymentMethod(ctx, o)
		if err != nil {
			return nil, err
		}
		res, err := s.cfg.Payment.Authorize(ctx, &contracts.AuthorizePaymentReq{
			OrderId: o.id, PaymentId: order.PaymentID(o.id), PaymentMethodId: methodID,
			Amount: st.Amount, Currency: st.Currency,
		})
		if err != nil {
			return nil, fmt.Errorf("authorize payment for order %s: %w", o.id, err)
		}
		ev, err = order.PaymentResult(st, res.GetAccepted(), res.GetReason())
		if err != nil {
			return nil, fmt.Errorf("order %s payment result: %w", o.id, err)
		}
	case order.StepReleaseInventory:
		res, err := s.cfg.Inventory.Release(ctx, &contracts.ReleaseInventoryReq{
			OrderId: o.id, ReservationId: st.ReservationID, Reason: st.Reason,
		})
		if err != nil {
			return nil, fmt.Errorf("release inventory for order %s: %w", o.id, err)
		}
		if !res.GetReleased() {
			return nil, fmt.Errorf("%w: order %s reservation %s: %s", ErrReleaseRefused, o.id, st.ReservationID, res.GetReason())
		}
		ev, err = order.Released(st, st.Reason)
		if err != nil {
			return nil, fmt.Errorf("order %s release result: %w", o.id, err)
		}
	case order.StepConfirm:
		ev, err = order.Confirm(st, now)
		if err != nil {
			return nil, fmt.Errorf("confirm order %s: %w", o.id, err)
		}
	case order.StepFail:
		ev, err = order.Fail(st, now)
		if err != nil {
			return nil, fmt.Errorf("fail order %s: %w", o.id, err)
		}
	default:
		return nil, fmt.Errorf("order %s: unknown step %s", o.id, step)
	}
	next, err := order.Apply(st, ev, now)
	if err != nil {
		// The domain produced this event from this fold; refusing it is
		// a domain bug, caught before anything is recorded.
		return nil, fmt.Errorf("%w: order %s: own %s does not fold: %w", ErrConflict, o.id, step, err)
	}
	eff := &Effect{orderID: o.id, step: step, event: ev, at: now, version: st.Version, began: began, next: next}
	switch follow := order.Decide(next); follow {
	case order.StepConfirm, order.StepFail:
		eff.follow = follow
	}
	return eff, nil
}

// Record performs the second phase of a step: it appends the effect's
// event at the fold's version under the owner's fence and handles the
// projection as p says. Results are those of Step. An effect whose fold
// has moved on since it was made (a command recorded the step in between)
// records nothing and reports progressed=false with no error: the stream,
// not the effect, is right.
func (s *Service) Record(ctx context.Context, o *Order, e *Effect, p Projection) (progressed bool, err error) {
	if e == nil || e.orderID != o.id {
		return false, fmt.Errorf("%w: effect recorded for another order than %s", ErrInvalidArgument, o.id)
	}
	if p != Project && p != LeaveProjectionBehind {
		return false, fmt.Errorf("%w: %v", ErrInvalidArgument, p)
	}
	if err := s.refreshIfStale(ctx, o); err != nil {
		return false, err
	}
	step := e.step
	if o.state.Version != e.version {
		s.log.Info("effect superseded; nothing recorded", "order", o.id, "step", step.String(),
			"decidedAt", e.version, "version", o.state.Version)
		return false, nil
	}
	if p == LeaveProjectionBehind {
		s.log.Info("event recorded without its projection", "order", o.id, "step", step.String(), "version", e.version+1)
	}
	evs, err := s.withFollowUp(o, e)
	if err != nil {
		return false, err
	}
	if err := s.append(ctx, o, p, evs...); err != nil {
		if isAppendRace(err) {
			// Under fencing no other writer exists, so the stream can only
			// be ahead by an earlier attempt of this very step.
			if rerr := s.reload(ctx, o); rerr != nil {
				return false, rerr
			}
			s.log.Info("step already recorded; fold reloaded", "order", o.id, "step", step.String(), "version", o.state.Version)
			return false, nil
		}
		if errors.Is(err, ErrFenced) {
			// A newer owner took the order (relocation or takeover):
			// nothing of this step was recorded, and this owner stops.
			s.log.Warn("append refused: fenced", "order", o.id, "step", step.String(),
				"generation", o.generation, "fence", fmt.Sprintf("%d/%d", o.fence.Generation, o.fence.Epoch))
		}
		return false, err
	}
	s.metrics.stepDone(step, e.began)
	if e.follow != order.StepNone {
		s.metrics.stepDone(e.follow, e.began)
	}
	return true, nil
}

// withFollowUp is the effect's event, and with it the event of the step
// that follows when that step has no external effect (confirm after the
// payment, fail after a refused reservation or a release): it is decided
// from the fold the effect's event leads to (e.next, valid because Record
// checked the fold is still at e.version), as the next Step would decide
// it, and recorded in the same append. Deciding it later could only give
// the same event, so waiting a round trip for it buys nothing.
func (s *Service) withFollowUp(o *Order, e *Effect) ([]pending, error) {
	evs := []pending{{ev: e.event, sourceCommandID: order.StepSourceCommandID(o.id, e.step), at: e.at}}
	var ev order.Event
	var err error
	now := s.cfg.Now()
	switch e.follow {
	case order.StepConfirm:
		ev, err = order.Confirm(e.next, now)
	case order.StepFail:
		ev, err = order.Fail(e.next, now)
	default:
		return evs, nil
	}
	if err != nil {
		return nil, fmt.Errorf("order %s: decide the step after %s: %w", o.id, e.step, err)
	}
	return append(evs, pending{ev: ev, sourceCommandID: order.StepSourceCommandID(o.id, e.follow), at: now}), nil
}

// guardRepeatedEffect refuses a step whose external effect the fold
// already records. Decide never asks for one; if it did, calling the module
// again would be the repeated effect the external-effect-repeated line
// counts (docs/contract.md, "Order lines"), so it is reported and refused
// instead.
func (s *Service) guardRepeatedEffect(o *Order, step order.Step) error {
	st := o.state
	var repeated bool
	switch step {
	case order.StepReserveInventory:
		repeated = st.ReservationID != "" || st.ReservationFailed
	case order.StepAuthorizePayment:
		repeated = st.PaymentID != "" || st.PaymentFailed
	case order.StepReleaseInventory:
		repeated = st.Released
	}
	if !repeated {
		return nil
	}
	s.writeEvidence("shoppingmall-order external-effect-repeated order=" + o.id)
	return fmt.Errorf("%w: order %s at version %d already records the effect of step %s", ErrConflict, o.id, st.Version, step)
}

// paymentMethod returns the payment method of the order's first envelope:
// from memory when this activation recorded the start, else from the
// Relocation Store (one round trip, then cached).
func (s *Service) paymentMethod(ctx context.Context, o *Order) (string, error) {
	if o.start == nil {
		req, err := s.cfg.Envelopes.LoadFirst(ctx, o.id)
		if err != nil {
			return "", fmt.Errorf("load first envelope of order %s: %w", o.id, err)
		}
		if req.GetOrderId() != o.id || req.GetSourceCommandId() != o.state.StartSourceCommandID {
			return "", fmt.Errorf("%w: first envelope of order %s is (order %q, command %q), stream started by %q",
				ErrConflict, o.id, req.GetOrderId(), req.GetSourceCommandId(), o.state.StartSourceCommandID)
		}
		o.start = req
	}
	return o.start.GetPaymentMethodId(), nil
}

// Continue resumes the order from its fold (docs/contract.md,
// "Duplicate start and resume" and "Lookup and projection rebuild"). An
// order without a stream is ErrNotFound and nothing is written. A fold that
// is terminal is read again from the stream first (one Load): a store
// failover may have lost the newest events, and an owner that trusted its
// memory would leave the order unfinished for good while projecting a
// state the stream no longer holds; the reloaded order goes on from where
// the stream stands, its effects idempotent by their deterministic ids. A
// terminal order then gets its projection repaired when it is missing or
// differs in version from the stream, lowered too when it is ahead
// (follow: Get + Put = 2 round trips, Get alone when current). Otherwise
// it performs one Step and returns the resulting view.
func (s *Service) Continue(ctx context.Context, o *Order) (*contracts.OrderState, error) {
	if err := s.refreshIfStale(ctx, o); err != nil {
		return nil, err
	}
	if o.state.Status.Terminal() {
		if err := s.reload(ctx, o); err != nil {
			return nil, err
		}
	}
	if !o.Exists() {
		return nil, fmt.Errorf("continue order %s: %w", o.id, ErrNotFound)
	}
	if o.state.Status.Terminal() {
		_, version, err := s.cfg.ReadModel.Get(ctx, o.id)
		switch {
		case errors.Is(err, readmodel.ErrNotFound), errors.Is(err, readmodel.ErrCorrupt):
		case err != nil:
			return nil, fmt.Errorf("read projection of order %s: %w", o.id, err)
		case version == o.state.Version:
			return s.acknowledge(ctx, o)
		}
		if err := s.follow(ctx, o); err != nil {
			return nil, err
		}
		return s.acknowledge(ctx, o)
	}
	progressed, err := s.Step(ctx, o)
	if err != nil {
		return nil, err
	}
	if !progressed {
		return s.acknowledge(ctx, o)
	}
	return view(o.state), nil
}

// acknowledge is the view of o for an answer that may have written
// nothing, past the replication barrier.
func (s *Service) acknowledge(ctx context.Context, o *Order) (*contracts.OrderState, error) {
	if err := s.barrier(ctx, o); err != nil {
		return nil, err
	}
	return view(o.state), nil
}

// Rebuild replays the stream alone — never the in-memory fold — and writes
// the projection of that replay (Load + Put = 2 round trips), lowering a
// projection that is ahead of the stream (follow). The replay also
// becomes the owner's fold. An order without a stream is ErrNotFound and
// nothing is written.
func (s *Service) Rebuild(ctx context.Context, o *Order) (*contracts.OrderState, error) {
	if !o.Exists() && !o.stale {
		return nil, fmt.Errorf("rebuild order %s: %w", o.id, ErrNotFound)
	}
	st, envs, err := s.replay(ctx, o.id)
	if err != nil {
		return nil, err
	}
	if st.Version == 0 {
		return nil, fmt.Errorf("rebuild order %s: %w", o.id, ErrNotFound)
	}
	s.settleInDoubt(o, envs)
	o.state, o.stale = st, false
	if err := s.follow(ctx, o); err != nil {
		return nil, err
	}
	// follow writes nothing when the projection is current already.
	return s.acknowledge(ctx, o)
}

// follow makes the projection the owner's fold, which it has just read
// from the stream: Put, and when Put finds a newer projection (a store
// failover lost the stream's newest events after they were projected),
// Replace it with the stream's version. Put's guard alone would keep
// that projection ahead of the stream for good, and a rebuild could not
// repair it. Before lowering, an append of no events checks that this
// owner's fence is current and the stream still at the fold's version
// (one round trip), so a fenced owner, or a stream that moved on, never
// lowers a projection; a newer owner that appears after the check writes
// its own projection above this one.
func (s *Service) follow(ctx context.Context, o *Order) error {
	applied, err := s.cfg.ReadModel.Put(ctx, o.id, o.state.Version, view(o.state))
	if err != nil {
		return fmt.Errorf("project order %s version %d: %w", o.id, o.state.Version, err)
	}
	if applied {
		return nil
	}
	if _, err := s.cfg.Events.Append(ctx, o.id, o.state.Version, o.fence, nil); err != nil {
		return fmt.Errorf("lower the projection of order %s to stream version %d: %w", o.id, o.state.Version, err)
	}
	if err := s.cfg.ReadModel.Replace(ctx, o.id, o.state.Version, view(o.state)); err != nil {
		return fmt.Errorf("lower the projection of order %s to stream version %d: %w", o.id, o.state.Version, err)
	}
	return nil
}
