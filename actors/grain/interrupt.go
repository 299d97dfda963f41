package grain

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
)

// Interrupts are the points where a runner interrupts an order's
// background continuation (docs/contract.md,
// "Duplicates, resumption and the projection"): a gate that parks it, a hold
// of a step between its effect and its record (the takeover proofs), and a
// terminal event recorded without its projection. actors/fixture answers
// them from Redis in processes started with -fixtures; production wiring
// leaves Config.Interrupts nil and no interceptor is mounted.
//
// They are asked by a receive-side interceptor (actor receive middleware)
// inside the grain's turn, bounded by its TurnTimeout, and only for the
// background continuation: an explicit command (Continue, Rebuild, ...)
// runs its step whole, as the operator's word. An error is a failed step,
// retried by the owner like any other.
type Interrupts interface {
	// Park reports whether the background continuation of the order whose
	// fold is st must run no step now. A parked order keeps serving every
	// message; it runs its next step when a command (Continue, Resume)
	// asks for it and Park then answers false.
	Park(ctx context.Context, st order.State) (bool, error)
	// HoldEffect reports whether the effect of step, made by the owner at
	// generation, must wait before its event is recorded. The interceptor
	// asks again every HeldEffectPoll until it answers false.
	HoldEffect(ctx context.Context, st order.State, step order.Step, generation int64) (bool, error)
	// HoldBegan is told once when a hold of step at generation begins.
	HoldBegan(ctx context.Context, st order.State, step order.Step, generation int64) error
	// LeaveProjectionBehind reports whether an append is to be recorded
	// without its projection (workflow.LeaveProjectionBehind); endsOrder
	// says whether the append ends the order (Effect.EndsOrder). A true
	// answer is consumed: it is given once.
	LeaveProjectionBehind(ctx context.Context, st order.State, endsOrder bool) (bool, error)
}

// HeldEffectPoll is how often a held effect asks whether it may be
// recorded.
const HeldEffectPoll = 20 * time.Millisecond

// interruption is the interceptor's state of one grain.
type interruption struct {
	// parked is set while the background continuation is parked: the
	// order waits for a command and may be passivated although it has
	// work left.
	parked bool
	// held is an effect made and not recorded, waiting for its hold to
	// end; poll is the timer of its next look.
	held *workflow.Effect
	poll *time.Timer
}

// heldPoll is the self-message of a held effect's next look.
type heldPoll struct{}

// interceptor is the receive middleware of the order grain when
// Interrupts are configured. It takes over the background step messages
// and runs the step in the workflow's two phases (MakeEffect, Record) so
// that it can stop before, between or with the projection left behind;
// every other message goes straight to the grain. It never blocks: a
// parked order drops its step, a held effect waits in memory and looks
// again on a timer, so the mailbox keeps serving relocation, close,
// rebuild and the rest (a planned relocation moves a parked order:
// docs/contract.md, "Planned relocation resumes at payment").
func interceptor(in Interrupts) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(rc actor.ReceiverContext, env *actor.MessageEnvelope) {
			g, ok := rc.Actor().(*orderGrain)
			ctx, isCtx := rc.(actor.Context)
			if !ok || !isCtx {
				next(rc, env)
				return
			}
			// A step taken over here may end the order.
			defer g.tellStarter(ctx)
			switch env.Message.(type) {
			case *step:
				if g.interceptStep(ctx, in) {
					return
				}
			case *heldPoll:
				g.pollHeld(ctx, in)
				return
			case *actor.Stopping, *actor.Restarting:
				// A held effect dies with its owner, unrecorded: whoever
				// owns the order next makes it again.
				g.dropHeld()
			}
			next(rc, env)
		}
	}
}

// interceptStep runs one background step through the interrupt points and
// reports whether it did; when it did not, the grain's own onStep handles
// the message (nothing to do, not confirmed yet, leaving, stuck).
func (g *orderGrain) interceptStep(ctx actor.Context, in Interrupts) bool {
	if g.interrupted.held != nil {
		// The held effect is recorded first; its poll goes on.
		return true
	}
	if g.leaving || g.stuck != nil || !g.confirmed || !g.cfg.Service.NeedsWork(g.order) {
		return false
	}
	g.pending = nil
	c, cancel := g.turnCtx()
	defer cancel()
	c, span := g.startStep(c)
	defer g.endStep(span, nil)
	park, err := in.Park(c, g.order.State())
	if err == nil && park {
		g.interrupted.parked = true
		g.attempts = 0
		return true
	}
	g.interrupted.parked = false
	var eff *workflow.Effect
	if err == nil {
		eff, err = g.cfg.Service.MakeEffect(c, g.order)
	}
	if err != nil || eff == nil {
		g.afterNoProgress(ctx, err)
		return true
	}
	st, gen := g.order.State(), g.order.Generation()
	hold, err := in.HoldEffect(c, st, eff.Step(), gen)
	if err == nil && hold {
		err = in.HoldBegan(c, st, eff.Step(), gen)
		if err == nil {
			g.cfg.Logger.Info("effect made; its record is held", slog.String("order", g.act.Identity),
				slog.String("step", eff.Step().String()), slog.Int64("generation", gen))
			g.interrupted.held = eff
			g.pollLater(ctx)
			return true
		}
	}
	if err != nil {
		// The effect is made and not recorded; the retried step makes it
		// again under the same deterministic id.
		g.afterNoProgress(ctx, err)
		return true
	}
	progressed, err := g.record(c, in, eff)
	g.afterStep(ctx, progressed, err)
	return true
}

// pollHeld looks whether a held effect may be recorded now, and records
// it once its hold ends. A failed look keeps it held: recording while the
// hold is unknown would defeat it.
func (g *orderGrain) pollHeld(ctx actor.Context, in Interrupts) {
	g.interrupted.poll = nil
	eff := g.interrupted.held
	if eff == nil || g.leaving {
		g.interrupted.held = nil
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	hold, err := in.HoldEffect(c, g.order.State(), eff.Step(), g.order.Generation())
	if err != nil {
		g.cfg.Logger.Warn("reading an effect hold failed; still held", slog.String("order", g.act.Identity), slog.Any("error", err))
	}
	if err != nil || hold {
		g.pollLater(ctx)
		return
	}
	g.interrupted.held = nil
	progressed, err := g.record(c, in, eff)
	g.afterStep(ctx, progressed, err)
}

// record is the step's second phase, with its projection left behind when
// the interrupt point asks for it.
func (g *orderGrain) record(c context.Context, in Interrupts, eff *workflow.Effect) (bool, error) {
	p := workflow.Project
	behind, err := in.LeaveProjectionBehind(c, g.order.State(), eff.EndsOrder())
	if err != nil {
		return false, err
	}
	if behind {
		p = workflow.LeaveProjectionBehind
	}
	return g.cfg.Service.Record(c, g.order, eff, p)
}

func (g *orderGrain) pollLater(ctx actor.Context) {
	if g.interrupted.poll != nil {
		g.interrupted.poll.Stop()
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	g.interrupted.poll = time.AfterFunc(HeldEffectPoll, func() { root.Send(self, &heldPoll{}) })
}

func (g *orderGrain) dropHeld() {
	if g.interrupted.poll != nil {
		g.interrupted.poll.Stop()
		g.interrupted.poll = nil
	}
	g.interrupted.held = nil
}
