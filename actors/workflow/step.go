package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Step performs the one next step the fold decides (order.Decide): call the
// module the step needs, append the one resulting event at the fold's
// version under the owner's fence, then write the projection.
//
// Round trips per step:
//   - reserve inventory: Reserve + append + projection = 3
//   - authorize payment: Authorize + append + projection = 3, plus one
//     LoadFirst when this activation did not record the start itself
//   - release inventory: Release + append + projection = 3
//   - confirm / fail: append + projection = 2, plus one
//     TakeSkipTerminalProjection when fixtures are wired
//
// It reports progressed=false with no error when there is nothing to do,
// or when the append lost to an event already in the stream (a retried
// append that landed): the fold is then reloaded, one more round trip.
// ErrFenced means a newer owner exists and the caller must stop. An error
// with progressed=true means the event is recorded but the projection
// write failed; the next projection write repairs it.
func (s *Service) Step(ctx context.Context, o *Order) (progressed bool, err error) {
	if err := s.refreshIfStale(ctx, o); err != nil {
		return false, err
	}
	if err := s.repair(ctx, o); err != nil {
		return false, err
	}
	st := o.state
	step := order.Decide(st)
	if step == order.StepNone {
		return false, nil
	}
	if err := s.guardRepeatedEffect(o, step); err != nil {
		return false, err
	}

	var ev order.Event
	now := s.cfg.Now()
	switch step {
	case order.StepReserveInventory:
		res, err := s.cfg.Inventory.Reserve(ctx, &contracts.ReserveInventoryReq{
			OrderId: o.id, ReservationId: order.ReservationID(o.id), Lines: contractLines(st.Lines),
		})
		if err != nil {
			return false, fmt.Errorf("reserve inventory for order %s: %w", o.id, err)
		}
		// The domain supplies a reason when the module gives none.
		ev, err = order.ReservationResult(st, res.GetAccepted(), res.GetReason())
		if err != nil {
			return false, fmt.Errorf("order %s reservation result: %w", o.id, err)
		}
	case order.StepAuthorizePayment:
		methodID, err := s.paymentMethod(ctx, o)
		if err != nil {
			return false, err
		}
		res, err := s.cfg.Payment.Authorize(ctx, &contracts.AuthorizePaymentReq{
			OrderId: o.id, PaymentId: order.PaymentID(o.id), PaymentMethodId: methodID,
			Amount: st.Amount, Currency: st.Currency,
		})
		if err != nil {
			return false, fmt.Errorf("authorize payment for order %s: %w", o.id, err)
		}
		ev, err = order.PaymentResult(st, res.GetAccepted(), res.GetReason())
		if err != nil {
			return false, fmt.Errorf("order %s payment result: %w", o.id, err)
		}
	case order.StepReleaseInventory:
		res, err := s.cfg.Inventory.Release(ctx, &contracts.ReleaseInventoryReq{
			OrderId: o.id, ReservationId: st.ReservationID, Reason: st.Reason,
		})
		if err != nil {
			return false, fmt.Errorf("release inventory for order %s: %w", o.id, err)
		}
		if !res.GetReleased() {
			return false, fmt.Errorf("%w: order %s reservation %s: %s", ErrReleaseRefused, o.id, st.ReservationID, res.GetReason())
		}
		ev, err = order.Released(st, st.Reason)
		if err != nil {
			return false, fmt.Errorf("order %s release result: %w", o.id, err)
		}
	case order.StepConfirm:
		ev, err = order.Confirm(st, now)
		if err != nil {
			return false, fmt.Errorf("confirm order %s: %w", o.id, err)
		}
	case order.StepFail:
		ev, err = order.Fail(st, now)
		if err != nil {
			return false, fmt.Errorf("fail order %s: %w", o.id, err)
		}
	default:
		return false, fmt.Errorf("order %s: unknown step %s", o.id, step)
	}

	// The takeover proofs hold a step here, its effect made and not yet
	// recorded. Production wiring has no Fixtures: no look, no round trip.
	if s.cfg.Fixtures != nil {
		if g, ok := s.cfg.Fixtures.(EffectGate); ok {
			if err := g.HoldBeforeAppend(ctx, o.state.StartSourceCommandID, step.String(), o.generation); err != nil {
				return false, fmt.Errorf("order %s held before the append of %s: %w", o.id, step, err)
			}
		}
	}

	// A runner fixture may ask for the terminal event without its
	// projection (spec §9.2-3); it is taken before the append so the
	// projection can travel with the event otherwise.
	project := true
	if (step == order.StepConfirm || step == order.StepFail) && s.cfg.Fixtures != nil {
		skip, err := s.cfg.Fixtures.TakeSkipTerminalProjection(ctx, o.state.StartSourceCommandID)
		if err != nil {
			return false, fmt.Errorf("order %s terminal projection fixture: %w", o.id, err)
		}
		if skip {
			s.log.Info("terminal projection skipped by fixture", "order", o.id, "version", o.state.Version+1)
			project = false
		}
	}
	if err := s.append(ctx, o, ev, order.StepSourceCommandID(o.id, step), now, project); err != nil {
		if isAppendRace(err) {
			// Under fencing no other writer exists, so the stream can only
			// be ahead by an earlier attempt of this very step.
			if rerr := s.reload(ctx, o); rerr != nil {
				return false, rerr
			}
			s.log.Info("step already recorded; fold reloaded", "order", o.id, "step", step.String(), "version", o.state.Version)
			return false, nil
		}
		if errors.Is(err, errRecordedNotProjected) {
			o.projectionBehind = true
			return true, err
		}
		if errors.Is(err, ErrFenced) {
			// A newer owner took the order (relocation or takeover):
			// nothing of this step was recorded, and this owner stops.
			s.log.Warn("append refused: fenced", "order", o.id, "step", step.String(),
				"generation", o.generation, "fence", fmt.Sprintf("%d/%d", o.fence.Generation, o.fence.Epoch))
		}
		return false, err
	}
	return true, nil
}

// EffectGate is implemented by Fixtures that can also hold a step after its
// module call returned and before its event is appended: an owner killed
// or paused there has made an external effect it has not recorded, which
// is what the takeover proofs need. Step looks for it only when Fixtures
// is set.
type EffectGate interface {
	// HoldBeforeAppend returns once no gate armed for the order's start
	// holds step at this owner's generation, or with an error when ctx
	// ends first (the step is then retried as after any transient error).
	HoldBeforeAppend(ctx context.Context, startSourceCommandID, step string, generation int64) error
}

// guardRepeatedEffect refuses a step whose external effect the fold
// already records. Decide never asks for one; if it did, calling the module
// again would be the repeated effect spec §10.1 counts, so it is reported
// and refused instead.
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

// Continue resumes the order from its fold (spec §7.3, §7.4). An order
// without a stream is ErrNotFound and nothing is written. A terminal order
// first gets its projection repaired when it is missing or older than the
// fold (Get + Put = 2 round trips, Get alone when current). Otherwise it
// performs one Step and returns the resulting view.
func (s *Service) Continue(ctx context.Context, o *Order) (*contracts.OrderState, error) {
	if err := s.refreshIfStale(ctx, o); err != nil {
		return nil, err
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
		case version >= o.state.Version:
			return view(o.state), nil
		}
		if err := s.project(ctx, o.state); err != nil {
			return nil, err
		}
		return view(o.state), nil
	}
	if _, err := s.Step(ctx, o); err != nil {
		return nil, err
	}
	return view(o.state), nil
}

// Rebuild replays the stream alone — never the in-memory fold — and writes
// the projection of that replay (Load + Put = 2 round trips). The replay
// also becomes the owner's fold. An order without a stream is ErrNotFound
// and nothing is written.
func (s *Service) Rebuild(ctx context.Context, o *Order) (*contracts.OrderState, error) {
	if !o.Exists() && !o.stale {
		return nil, fmt.Errorf("rebuild order %s: %w", o.id, ErrNotFound)
	}
	st, err := s.replay(ctx, o.id)
	if err != nil {
		return nil, err
	}
	if st.Version == 0 {
		return nil, fmt.Errorf("rebuild order %s: %w", o.id, ErrNotFound)
	}
	o.state, o.stale = st, false
	if err := s.project(ctx, st); err != nil {
		return nil, err
	}
	return view(st), nil
}

// Parked returns the gate of the background continuation. It is non-None
// only when the fold is InventoryReserved with no payment outcome yet and a
// fixture is armed for the order's start; without fixtures it costs no
// round trip.
func (s *Service) Parked(ctx context.Context, o *Order) (GateMode, error) {
	if s.cfg.Fixtures == nil {
		return GateNone, nil
	}
	st := o.state
	if st.Status != order.StatusInventoryReserved || st.PaymentID != "" || st.PaymentFailed {
		return GateNone, nil
	}
	mode, err := s.cfg.Fixtures.Gate(ctx, st.StartSourceCommandID)
	if err != nil {
		return GateNone, fmt.Errorf("gate of order %s: %w", o.id, err)
	}
	return mode, nil
}
