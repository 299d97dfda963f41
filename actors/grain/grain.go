// Package grain is the protoactor adapter of OrderWorkflow: the grain of
// kind shoppingmall.order-workflow that owns one order, its typed client,
// and the translation of errors into stable reason codes across the grain
// boundary and back.
//
// The grain keeps nothing that cannot be rebuilt from the order's stream.
// Every state change happens inside one actor turn; the background
// continuation is a chain of self-messages, never a goroutine. This
// package may import the application (actors/workflow), the contracts and
// cluster/...; it must not import edge or open any store: of eventstore it
// uses only the Companion values a start's append carries (ready.go).
package grain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// KindName is the cluster kind of order grains (spec: the Instance
// factory shoppingmall.order-workflow).
const KindName = "shoppingmall.order-workflow"

// Config wires the grain.
type Config struct {
	Service *workflow.Service
	// Relocations keeps relocation operation records. Required for
	// RelocateOrderReq.
	Relocations relocation.Store
	// IdleTimeout passivates a grain that received nothing for this long:
	// authority is released and the next command activates generation+1.
	// An order with work left is never passivated, neither idle nor when
	// its member asks for room beyond its hosting cap (placement.Passivate;
	// the grain reports after every turn whether it has work left). Zero
	// disables idle passivation.
	IdleTimeout time.Duration
	// TurnTimeout bounds the store and module calls of one turn.
	TurnTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between the owner's own
	// retries of a step that failed for a transient reason (defaults
	// 100ms and 30s). Each wait is drawn with full jitter.
	RetryMin, RetryMax time.Duration
	// ConfirmTimeout bounds how long a grain waits for its activation to
	// be recorded before it concludes that it owns nothing and stops
	// (default 1m).
	ConfirmTimeout time.Duration
	// Evidence receives raw evidence lines (docs/contract.md,
	// "Evidence lines").
	Evidence io.Writer
	// Now returns unix milliseconds, for operation records.
	Now    func() int64
	Logger *slog.Logger
	// Metrics is the process's registry, for what the grains of this
	// member could not do by themselves (metrics.go); nil counts into
	// metrics served nowhere. Kind registers them: call it once per
	// registry.
	Metrics *telemetry.Registry
	// Interrupts, if set, mounts the receive-side interceptor of the
	// runner's interrupt points (interrupt.go); nil in production, where
	// no interceptor exists.
	Interrupts Interrupts
	// TracerProvider makes the spans of the grains' turns (trace.go); nil
	// uses the global provider.
	TracerProvider trace.TracerProvider
}

// Kind returns the cluster kind to register on workflow members.
func Kind(cfg Config) *pcluster.Kind {
	return pcluster.NewKind(KindName, props(cfg))
}

func withDefaults(cfg Config) Config {
	if cfg.TurnTimeout == 0 {
		cfg.TurnTimeout = 10 * time.Second
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 100 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.ConfirmTimeout == 0 {
		cfg.ConfirmTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Evidence == nil {
		cfg.Evidence = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixMilli() }
	}
	return cfg
}

// props are the order grain's props; tests host a grain alone with
// placement.WithActivation.
func props(cfg Config) *actor.Props {
	cfg = withDefaults(cfg)
	ev := telemetry.NewEvidence(cfg.Evidence, cfg.Logger)
	m := newMetrics(cfg.Metrics)
	var opts []actor.PropsOption
	if cfg.Interrupts != nil {
		opts = append(opts, actor.WithReceiverMiddleware(interceptor(cfg.Interrupts)))
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &orderGrain{cfg: cfg, evidence: ev, metrics: m}
	}, opts...)
}

// step is the self-message that drives the background continuation, one
// workflow step per turn. It never leaves the process.
type step struct{}

// confirm is the self-message that asks the Location Store whether this
// activation has been recorded Ready, before the grain runs work of its
// own.
type confirm struct{}

// reopen is the self-message that retries opening the stream of a grain
// restarted after a panic whose first open after the restart failed.
type reopen struct{}

type orderGrain struct {
	cfg      Config
	evidence *telemetry.Evidence
	metrics  *metrics
	act      *placement.Activation
	order    *workflow.Order
	// confirmed is set once the grain knows the Location record names it
	// Ready: a command reached it (callers find it only through that
	// record) or a confirm read said so. Until then it runs no step of
	// its own, so a late activation that its creator gave up on can never
	// act on the order.
	confirmed    bool
	confirmSince time.Time
	// leaving is set once the grain decided to stop (close, idle, move,
	// fenced): later commands are answered Retry so the caller resends
	// them to whoever owns the order next.
	leaving bool
	// stuck is set when a step failed permanently; the order waits for an
	// operator and is neither retried nor passivated.
	stuck error
	// attempts counts consecutive failed tries of the background work;
	// pending is the timer of the next one.
	attempts int
	pending  *time.Timer
	// pendingMsg is what pending sends, so that a resumed member fires
	// it at once (onResumed).
	pendingMsg any
	// retired is set once the activator was told the grain is leaving.
	retired bool
	// idle is the idle-passivation timer (armIdle), idleOn whether it is
	// armed, and idleSeq tells its latest tick from stale ones.
	idle    *time.Timer
	idleOn  bool
	idleSeq uint64
	// noticeTo is the member the start recorded here asked to be told of
	// the order's end (notice.go); "" once told, or when none asked.
	noticeTo string
	// interrupted is the interceptor's state; zero without Interrupts.
	interrupted interruption
	traces      grainTraces
}

// OpensOnStart implements placement.Opener: the activator answers only
// once the stream is open, so the order is recorded Ready only at a grain
// that can serve it.
func (*orderGrain) OpensOnStart() {}

// CarriesReady implements placement.ReadyCarrier: a new order's start
// records the grain Ready in the step that records the order (ready.go).
func (*orderGrain) CarriesReady() {}

var _ placement.ReadyCarrier = (*orderGrain)(nil)

func (g *orderGrain) turnCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.cfg.TurnTimeout)
}

func (g *orderGrain) Receive(ctx actor.Context) {
	defer g.reportWork(ctx)
	defer g.tellStarter(ctx)
	switch ctx.Message().(type) {
	case *idleTick, *placement.Passivate, *actor.Restarting, *actor.Stopping:
	default:
		// Anything else the grain receives is activity: the idle timer
		// runs again from now, once the message is handled.
		defer g.resetIdle(ctx)
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.onStarted(ctx)
	case *actor.Restarting:
		g.stopTimer()
		g.disarmIdle()
	case *actor.Stopping:
		g.stopTimer()
		g.disarmIdle()
		g.tellLeaving(ctx)
	case *idleTick:
		if g.idleOn && m.seq == g.idleSeq {
			g.idleOn, g.idle = false, nil
			g.onIdle(ctx)
		}
	case *placement.Passivate:
		g.onPassivate(ctx)
	case *step:
		g.onStep(ctx)
	case *confirm:
		g.onConfirm(ctx)
	case *reopen:
		g.onReopen(ctx)
	case *placement.Resumed:
		g.onResumed(ctx)
	case *contracts.StartOrderWorkflowReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.start(ctx, c, m) })
	case *contracts.ContinueOrderWorkflowReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.continueOrder(ctx, c) })
	case *contracts.RebuildOrderProjectionReq:
		g.command(ctx, func(c context.Context) (any, error) {
			st, err := g.cfg.Service.Rebuild(c, g.order)
			if err != nil {
				return nil, err
			}
			return &contracts.RebuildOrderProjectionRes{State: st}, nil
		})
	case *contracts.ResumeOrderReq:
		g.command(ctx, func(context.Context) (any, error) {
			g.stuck = nil
			g.kick(ctx)
			return &contracts.ResumeOrderRes{State: g.cfg.Service.View(g.order)}, nil
		})
	case *contracts.CloseOrderReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.close(ctx, c) })
	case *contracts.RelocateOrderReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.relocate(ctx, c, m) })
	case *DrainReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.drain(ctx, c, m) })
	}
}

// onStarted opens the order's stream: replay under a raised fence. The
// first open reports its outcome to the activator, which records the
// activation Ready only when it succeeded; a failed first open stops the
// grain, and the next command activates again. After a panic protoactor
// starts a new grain in the same context: it opens again and carries on.
func (g *orderGrain) onStarted(ctx actor.Context) {
	act, ok := placement.ActivationOf(ctx)
	if !ok {
		g.cfg.Logger.Error("order grain started without an activation; stopping")
		g.leaving = true
		ctx.Stop(ctx.Self())
		return
	}
	g.act = act
	restarted := act.Reported()
	if restarted {
		g.metrics.restarts.Inc()
		// Only a grain that served was restarted: its activation is
		// recorded, or its creator gave up and the confirm says so.
		g.cfg.Logger.Warn("order grain restarted after a failure", slog.String("order", act.Identity))
	}
	c, cancel := g.turnCtx()
	if !act.Deadline.IsZero() && !restarted {
		c, cancel = context.WithDeadline(c, act.Deadline)
	}
	var order *workflow.Order
	var err error
	if fresh := act.Minted && act.Reason == placement.ActivationReason_ACTIVATION_REASON_COLD && act.Generation == 1 && !restarted; fresh {
		// An identity its caller just minted, at its first cold
		// generation, has no predecessor to fence off and no stream: the
		// open is deferred to the first command (see workflow.OpenFresh).
		order, err = g.cfg.Service.OpenFresh(act.Identity, act.Generation)
	} else {
		order, err = g.cfg.Service.Open(c, act.Identity, act.Generation)
	}
	cancel()
	if err != nil {
		if restarted {
			g.cfg.Logger.Warn("order reopen failed; retrying", slog.String("order", act.Identity), slog.Any("error", err))
			g.retryLater(ctx, &reopen{})
			return
		}
		if at, ok := workflow.FencedAt(err); ok && at >= act.Generation {
			// The stream is fenced at or above this generation: the
			// Location record is older than the stream. The creator
			// raises the record and activates above the fence.
			g.cfg.Logger.Warn("order stream fenced above the activation's generation; activation handed back", slog.String("order", act.Identity),
				slog.Int64("generation", act.Generation), slog.Int64("fenceGeneration", at))
			act.OpenFenced(ctx.Self(), err, at)
		} else {
			g.cfg.Logger.Error("order open failed; activation aborted", slog.String("order", act.Identity),
				slog.Int64("generation", act.Generation), slog.Any("error", err))
			failure := placement.ActivationFailure_ACTIVATION_FAILURE_STORE_UNAVAILABLE
			switch {
			case errors.Is(err, workflow.ErrVersionUnsupported):
				// Another member's build may read what this one cannot.
				failure = placement.ActivationFailure_ACTIVATION_FAILURE_VERSION_UNSUPPORTED
			case workflow.Permanent(err):
				failure = placement.ActivationFailure_ACTIVATION_FAILURE_OPEN_FAILED
			}
			act.OpenFailed(ctx.Self(), err, failure)
		}
		// The activator stops it too; nothing was recorded, so there is
		// nothing to release.
		g.leaving = true
		ctx.Stop(ctx.Self())
		return
	}
	g.order = order
	act.Opened(ctx.Self())
	g.armIdle(ctx)
	if act.Reason == placement.ActivationReason_ACTIVATION_REASON_RELOCATION && !restarted {
		g.evidence.Line(fmt.Sprintf("shoppingmall-order replayed order=%s generation=%d", act.Identity, act.Generation))
	}
	// A cold activation of an unfinished order, a relocation target and a
	// restarted grain all resume the order by themselves, once the
	// Location record names them.
	g.kick(ctx)
}

// onReopen retries the open of a restarted grain.
func (g *orderGrain) onReopen(ctx actor.Context) {
	g.pending = nil
	if g.leaving || g.order != nil {
		return
	}
	if g.suspended() {
		g.park(ctx, &reopen{})
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	order, err := g.cfg.Service.Open(c, g.act.Identity, g.act.Generation)
	if err != nil {
		if workflow.Permanent(err) {
			g.cfg.Logger.Error("order reopen failed permanently; stopping", slog.String("order", g.act.Identity), slog.Any("error", err))
			record := keepRecord
			if errors.Is(err, workflow.ErrFenced) {
				record = releaseFenced
			}
			g.leave(ctx, record)
			return
		}
		g.retryLater(ctx, &reopen{})
		return
	}
	g.order = order
	g.attempts = 0
	g.kick(ctx)
}

// kick schedules the order's own work: a step once confirmed, else a
// confirm first. It is a no-op when there is nothing to do.
func (g *orderGrain) kick(ctx actor.Context) {
	if g.leaving || !g.cfg.Service.NeedsWork(g.order) {
		return
	}
	g.noteKick()
	if !g.confirmed {
		if g.confirmSince.IsZero() {
			g.confirmSince = time.Now()
		}
		ctx.Send(ctx.Self(), &confirm{})
		return
	}
	ctx.Send(ctx.Self(), &step{})
}

// onConfirm reads the Location record before the grain acts on its own.
func (g *orderGrain) onConfirm(ctx actor.Context) {
	g.pending = nil
	if g.leaving || g.confirmed {
		g.kick(ctx)
		return
	}
	if g.suspended() {
		g.park(ctx, &confirm{})
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	res, err := g.act.Lookup.Confirm(c, g.act.Kind, g.act.Identity, ctx.Self(), g.act.Generation)
	switch {
	case err != nil:
		g.cfg.Logger.Warn("confirming the activation failed; retrying", slog.String("order", g.act.Identity), slog.Any("error", err))
		g.retryLater(ctx, &confirm{})
	case res == placement.Confirmed:
		g.confirmed = true
		g.attempts = 0
		ctx.Send(ctx.Self(), &step{})
	case res == placement.Pending && time.Since(g.confirmSince) < g.cfg.ConfirmTimeout:
		g.retryLater(ctx, &confirm{})
	default:
		// Nobody will ever call this grain: its creator gave up, or the
		// relocation that started it never committed. It stops without
		// touching a record that is not its own.
		g.cfg.Logger.Info("activation not recorded; stopping", slog.String("order", g.act.Identity),
			slog.Int64("generation", g.act.Generation), slog.String("record", res.String()))
		g.leave(ctx, keepRecord)
	}
}

// command runs one request in this turn and answers it.
func (g *orderGrain) command(ctx actor.Context, run func(context.Context) (any, error)) {
	if g.leaving {
		ctx.Respond(&placement.Retry{Reason: "owner is leaving"})
		return
	}
	if g.suspended() {
		ctx.Respond(toWire(errSuspended))
		return
	}
	// Callers find a grain only through a Ready record naming it.
	g.confirmed = true
	c, cancel := g.turnCtx()
	defer cancel()
	c, span := g.startCommand(c, ctx)
	var failed error
	defer func() { g.endCommand(span, failed) }()
	_, starting := ctx.Message().(*contracts.StartOrderWorkflowReq)
	carried := g.carryReady(starting)
	if !carried {
		// Nothing is written before the record names this grain Ready.
		if err := g.act.EnsureReady(c); err != nil {
			failed = err
			ctx.Respond(toWire(err))
			return
		}
	}
	if g.order == nil || (g.order.Deferred() && !starting) {
		// A restarted grain whose reopen has not succeeded yet, or a
		// deferred open before a command that answers from the fold (a
		// start's append checks the stream itself).
		order, err := g.cfg.Service.Open(c, g.act.Identity, g.act.Generation)
		if err != nil {
			failed = err
			ctx.Respond(toWire(err))
			if errors.Is(err, workflow.ErrFenced) {
				g.leave(ctx, releaseFenced)
			}
			return
		}
		g.order = order
	}
	res, err := run(c)
	if carried {
		w := g.order.FirstWritten()
		// A start refused before it reached Start carries nothing on.
		g.order.CarryFirstWrite(nil)
		g.act.ReadyWritten(readyWrite(w))
		if w == workflow.FirstWriteRefused && err != nil {
			// The creation lock was gone: the activation lost it, or an
			// earlier attempt of this very write landed. Either way a
			// retry of the request finds out, and it is no internal error.
			err = fmt.Errorf("%w: %w", location.ErrLockLost, err)
		}
	}
	failed = err
	switch {
	case errors.Is(err, workflow.ErrFenced):
		// A newer owner exists: nothing this command did was recorded, and
		// the caller resends it to whoever owns the order now.
		ctx.Respond(&placement.Retry{Reason: "owner fenced off by a newer one"})
		g.afterFailure(ctx, err)
		return
	case err != nil:
		ctx.Respond(toWire(err))
		g.afterFailure(ctx, err)
		return
	}
	ctx.Respond(res)
}

// afterFailure stops an activation that owns nothing (no stream: no lasting
// activation and no generation used up, docs/contract.md,
// "An unknown order stays unknown") or that a newer owner fenced off. An
// order that exists and failed for a transient reason is retried by the
// grain itself: a client that gave up must not leave it half done.
func (g *orderGrain) afterFailure(ctx actor.Context, err error) {
	switch {
	case errors.Is(err, workflow.ErrFenced):
		g.leave(ctx, releaseFenced)
	case g.leaving:
	case g.order != nil && !g.order.Exists() && !g.cfg.Service.NeedsWork(g.order):
		record := keepRecord
		if coldStart(g.act.Reason) {
			record = discardRecord
		}
		g.leave(ctx, record)
	case !workflow.Permanent(err) && g.cfg.Service.NeedsWork(g.order):
		g.metrics.retried(g.order)
		g.retryLater(ctx, &step{})
	}
}

func (g *orderGrain) start(ctx actor.Context, c context.Context, req *contracts.StartOrderWorkflowReq) (any, error) {
	if req.GetOrderId() != g.act.Identity {
		return nil, fmt.Errorf("%w: orderId %q sent to %q", workflow.ErrInvalidArgument, req.GetOrderId(), g.act.Identity)
	}
	st, recorded, err := g.cfg.Service.Start(c, g.order, req)
	if err != nil {
		return nil, err
	}
	if recorded {
		g.noticeTo = noticeTo(ctx)
	}
	g.kick(ctx)
	return &contracts.StartOrderWorkflowReply{Res: &contracts.StartOrderWorkflowRes{State: st}, Recorded: recorded}, nil
}

func (g *orderGrain) continueOrder(ctx actor.Context, c context.Context) (any, error) {
	st, err := g.cfg.Service.Continue(c, g.order)
	if err != nil {
		return nil, err
	}
	// An explicit continue is the operator's word that a stuck order may
	// be tried again.
	g.stuck = nil
	g.kick(ctx)
	return &contracts.ContinueOrderWorkflowRes{State: st}, nil
}

// onStep performs one background step, then schedules the next (afterStep).
func (g *orderGrain) onStep(ctx actor.Context) {
	g.pending = nil
	if g.leaving || g.stuck != nil || !g.cfg.Service.NeedsWork(g.order) {
		return
	}
	if !g.confirmed {
		g.kick(ctx)
		return
	}
	if g.suspended() {
		g.park(ctx, &step{})
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	// A start whose append carried the Ready commit and has no known
	// outcome leaves the commit to be settled here, before anything else
	// is written.
	if err := g.act.EnsureReady(c); err != nil {
		if errors.Is(err, location.ErrLockLost) {
			g.cfg.Logger.Info("activation never recorded; stopping", slog.String("order", g.act.Identity),
				slog.Int64("generation", g.act.Generation))
			g.leave(ctx, keepRecord)
			return
		}
		g.cfg.Logger.Warn("recording the activation failed; retrying", slog.String("order", g.act.Identity), slog.Any("error", err))
		g.retryLater(ctx, &step{})
		return
	}
	c, span := g.startStep(c)
	progressed, err := g.cfg.Service.Step(c, g.order)
	g.afterStep(ctx, progressed, err)
	g.endStep(span, err)
}

// afterStep schedules the next background step unless the order is done
// or failed for good. A transient failure is retried with capped, jittered
// backoff; a permanent one is logged and counted once.
func (g *orderGrain) afterStep(ctx actor.Context, progressed bool, err error) {
	switch {
	case errors.Is(err, workflow.ErrFenced):
		g.leave(ctx, releaseFenced)
		return
	case err != nil && workflow.Permanent(err):
		g.stuck = err
		g.metrics.failedPermanently(g.order)
		g.cfg.Logger.ErrorContext(g.traces.stepContext(), "order step failed permanently; it waits for an operator", slog.String("order", g.act.Identity),
			slog.String("status", string(g.order.State().Status)), slog.Bool("permanent", true), slog.Any("error", err))
		return
	case err != nil:
		g.metrics.retried(g.order)
		g.cfg.Logger.WarnContext(g.traces.stepContext(), "order step failed; retrying", slog.String("order", g.act.Identity),
			slog.Int("attempt", g.attempts+1), slog.Any("error", err))
		g.retryLater(ctx, &step{})
		return
	}
	if progressed {
		g.attempts = 0
	}
	if g.cfg.Service.NeedsWork(g.order) {
		if progressed {
			ctx.Send(ctx.Self(), &step{})
		} else {
			// The step found its event already recorded and reloaded: try
			// again, without spinning should that ever repeat.
			g.retryLater(ctx, &step{})
		}
	}
}

// afterNoProgress is afterStep for a step that recorded nothing: it
// failed, or found nothing to do.
func (g *orderGrain) afterNoProgress(ctx actor.Context, err error) {
	g.afterStep(ctx, false, err)
}

// retryLater sends msg to the grain after the next backoff: full jitter
// over an exponential bound from RetryMin to RetryMax. One retry is
// pending at a time; a newer one replaces it.
//
// Not cluster/retry's backoff: the bound is behaviour the grain owns
// (Config.RetryMin and RetryMax, and at least RetryMin/2 between two
// attempts, so a failing step never spins), its attempt count is the
// grain's own state across turns, and a timer message replaces a loop.
func (g *orderGrain) retryLater(ctx actor.Context, msg any) {
	d := g.cfg.RetryMin << min(g.attempts, 20)
	if d > g.cfg.RetryMax || d <= 0 {
		d = g.cfg.RetryMax
	}
	d = g.cfg.RetryMin/2 + time.Duration(rand.Int64N(int64(d)))
	g.attempts++
	g.after(ctx, d, msg)
}

// after sends msg to the grain in d, replacing any pending one.
func (g *orderGrain) after(ctx actor.Context, d time.Duration, msg any) {
	g.stopTimer()
	self, root := ctx.Self(), ctx.ActorSystem().Root
	g.pending, g.pendingMsg = time.AfterFunc(d, func() { root.Send(self, msg) }), msg
}

// idleTick is the idle timer firing (armIdle). The grain keeps its own
// timer instead of protoactor's receive timeout, whose timer goroutine
// cancels and re-arms the actor context's timer fields while the mailbox
// goroutine resets them: a data race inside the library, which a grain
// that re-arms its idle timeout (an order with work left that stays) hits
// under -race.
type idleTick struct{ seq uint64 }

// armIdle starts idle passivation: an idleTick after IdleTimeout without
// any other message (resetIdle). Zero IdleTimeout disables it.
func (g *orderGrain) armIdle(ctx actor.Context) {
	if g.cfg.IdleTimeout <= 0 || g.leaving {
		return
	}
	g.idleOn = true
	g.resetIdle(ctx)
}

// resetIdle runs an armed idle timer again from now; a tick already on
// its way is stale and ignored.
func (g *orderGrain) resetIdle(ctx actor.Context) {
	if !g.idleOn {
		return
	}
	if g.idle != nil {
		g.idle.Stop()
	}
	g.idleSeq++
	seq, self, root := g.idleSeq, ctx.Self(), ctx.ActorSystem().Root
	g.idle = time.AfterFunc(g.cfg.IdleTimeout, func() { root.Send(self, &idleTick{seq: seq}) })
}

func (g *orderGrain) disarmIdle() {
	g.idleOn = false
	g.idleSeq++
	if g.idle != nil {
		g.idle.Stop()
		g.idle = nil
	}
}

func (g *orderGrain) stopTimer() {
	if g.pending != nil {
		g.pending.Stop()
		g.pending = nil
	}
	g.pendingMsg = nil
}

// errSuspended is what a suspended member's grains answer: the store is
// out, the owner is fine, and the same request may succeed soon.
var errSuspended = fmt.Errorf("%w: this member is suspended until the Location Store answers", ErrStoreUnavailable)

// suspendedRecheck is how often a parked grain looks again by itself,
// should the member's Resumed never reach it.
const suspendedRecheck = time.Second

// suspended reports whether the member suspended serving
// (placement.Lookup.Suspended): the grain then writes nothing and reads
// nothing.
func (g *orderGrain) suspended() bool {
	s, ok := g.act.Lookup.(interface{ Suspended() bool })
	return ok && s.Suspended()
}

// park re-arms msg, the grain's own work, while its member is
// suspended, without counting an attempt: the store did not fail this
// order, and the member's resume fires it at once.
func (g *orderGrain) park(ctx actor.Context, msg any) {
	g.after(ctx, suspendedRecheck, msg)
}

// onResumed fires the grain's pending work now: its member served again
// after the store answered, and every order it hosts must go on at once,
// not after a backoff grown through the outage.
func (g *orderGrain) onResumed(ctx actor.Context) {
	if g.leaving || g.pending == nil || g.pendingMsg == nil {
		return
	}
	msg := g.pendingMsg
	g.stopTimer()
	g.attempts = 0
	ctx.Send(ctx.Self(), msg)
}

// retire tells the activator, once, that this grain is on its way out. It
// must precede any release of the record: once the record is Missing, the
// next activation on this member must get a new grain, not this one.
func (g *orderGrain) retire(ctx actor.Context) {
	if g.retired || g.act == nil {
		return
	}
	g.retired = true
	g.act.Leaving(ctx.Self())
}

func (g *orderGrain) close(ctx actor.Context, c context.Context) (any, error) {
	gen := g.act.Generation
	g.retire(ctx)
	if err := g.act.Lookup.Release(location.WithReleaseReason(c, location.OwnershipClosed), g.act.Kind, g.act.Identity, ctx.Self(), location.KeepGeneration); err != nil {
		return nil, err
	}
	g.leave(ctx, keepRecord)
	return &contracts.CloseOrderRes{OrderId: g.act.Identity, Generation: gen}, nil
}

// workLeft tells whether the order has work of its own left: a step to
// run (being retried, or waiting for its confirm), or a reopen to retry
// (no order yet). Dropping such a grain would leave the order unfinished
// until someone calls. A stuck order waits for an operator, and one
// parked by the interceptor (interrupt.go) waits for a command: neither
// has work left.
func (g *orderGrain) workLeft() bool {
	if g.order == nil {
		return true
	}
	return g.stuck == nil && !g.interrupted.parked && g.cfg.Service.NeedsWork(g.order)
}

// reportWork tells the activator, after every turn, whether the grain has
// work left: beyond its hosting cap, the member passivates only grains
// that have none (placement.Passivate). Only a change reaches it.
func (g *orderGrain) reportWork(ctx actor.Context) {
	if g.act == nil || g.leaving {
		return
	}
	g.act.WorkLeft(ctx.Self(), g.workLeft())
}

// onIdle passivates a grain that has nothing left to do; one with work
// left stays (workLeft).
func (g *orderGrain) onIdle(ctx actor.Context) {
	if g.leaving {
		return
	}
	if g.suspended() {
		g.armIdle(ctx)
		return
	}
	if g.workLeft() || !g.passivate(ctx) {
		g.armIdle(ctx)
	}
}

// onPassivate is onIdle at the activator's request, to make room for
// another activation. A grain with work left never goes; one that stays
// says so, so that the activator asks another.
func (g *orderGrain) onPassivate(ctx actor.Context) {
	if g.leaving {
		return
	}
	// A suspended member touches no store: the release would not land.
	if g.suspended() || g.workLeft() || !g.passivate(ctx) {
		g.act.Stays(ctx.Self())
	}
}

// passivate releases the identity and stops the grain; false when the
// release failed and the grain stays.
func (g *orderGrain) passivate(ctx actor.Context) bool {
	c, cancel := g.turnCtx()
	defer cancel()
	exists := g.order != nil && g.order.Exists()
	g.retire(ctx)
	if err := g.act.Lookup.Release(location.WithReleaseReason(c, location.OwnershipIdle), g.act.Kind, g.act.Identity, ctx.Self(), generationToRelease(exists)); err != nil {
		g.cfg.Logger.Warn("idle release failed", slog.String("order", g.act.Identity), slog.Any("error", err))
		return false
	}
	g.cfg.Logger.Info("idle passivation", slog.String("order", g.act.Identity), slog.Int64("generation", g.act.Generation))
	g.leave(ctx, keepRecord)
	return true
}

// coldStart tells an activation of a new generation (cold, or the first
// after a takeover, which is a cold start the takeover caused) from a
// relocation's, which took over a generation someone else owned.
func coldStart(r placement.ActivationReason) bool {
	return r == placement.ActivationReason_ACTIVATION_REASON_COLD || r == placement.ActivationReason_ACTIVATION_REASON_TAKEOVER
}

// leaveRecord is what a leaving grain does with its Location record.
type leaveRecord uint8

const (
	// keepRecord leaves the record alone: the grain released it already,
	// or it is not the grain's to touch (it names a relocation's target,
	// or it never named this grain).
	keepRecord leaveRecord = iota
	// releaseFenced: a newer owner fenced the grain off. It releases the
	// authority only if the record still names its pid (a relocation that
	// rolled back after the target had fenced it): the next command then
	// activates a new generation instead of calling a grain that can no
	// longer write.
	releaseFenced
	// discardRecord: the activation owned nothing; it gives its authority
	// and its generation back.
	discardRecord
)

// generationToRelease is what an owner gives up with its authority: an
// activation that found no order gives its generation back, so a probe
// for an unknown id uses up nothing; one that owned an order keeps it, so
// the next owner fences whatever this one left.
func generationToRelease(orderExists bool) location.Generation {
	if orderExists {
		return location.KeepGeneration
	}
	return location.GiveBackGeneration
}

// leave stops the grain after the messages already queued, which are
// answered Retry, doing to its Location record what record says.
func (g *orderGrain) leave(ctx actor.Context, record leaveRecord) {
	g.retire(ctx)
	if record != keepRecord {
		c, cancel := g.turnCtx()
		// A commit left to this grain and not made yet is made first, so
		// that the release finds the record it gives back, as when the
		// activator committed before the first command.
		if err := g.act.EnsureReady(c); err != nil {
			g.cfg.Logger.Warn("recording the activation before leaving failed", slog.String("order", g.act.Identity), slog.Any("error", err))
		}
		gen := location.KeepGeneration
		if record == discardRecord {
			gen = location.GiveBackGeneration
		}
		if err := g.act.Lookup.Release(c, g.act.Kind, g.act.Identity, ctx.Self(), gen); err != nil {
			g.cfg.Logger.Warn("release failed", slog.String("order", g.act.Identity), slog.Any("error", err))
		}
		cancel()
	}
	g.leaving = true
	g.stopTimer()
	g.disarmIdle()
	ctx.Poison(ctx.Self())
}

func (g *orderGrain) relocate(ctx actor.Context, c context.Context, req *contracts.RelocateOrderReq) (any, error) {
	if g.cfg.Relocations == nil {
		return nil, fmt.Errorf("%w: relocation is not configured on this member", ErrFailedPrecondition)
	}
	if !g.order.Exists() {
		return nil, workflow.ErrNotFound
	}
	opID := req.GetOperationId()
	if opID == "" {
		opID = uuid.NewString()
	}
	names, _ := g.act.Lookup.NodeNames(c)
	source := names[g.act.Lookup.Self()]
	started := g.cfg.Now()
	op := relocation.Operation{ID: opID, OrderID: g.act.Identity, Source: source, Generation: g.act.Generation, StartedAtUnixMs: started}
	record := func(state relocation.OpState, target, errText string) {
		op.State, op.Error, op.UpdatedAtUnixMs = state, errText, g.cfg.Now()
		if target != "" {
			op.Target = names[target]
		}
		if err := g.cfg.Relocations.PutOperation(context.WithoutCancel(c), op); err != nil {
			g.cfg.Logger.Warn("relocation record failed", slog.String("operation", opID), slog.Any("error", err))
		}
	}
	// Messages queued behind this one are answered Retry from now on, so
	// they reach the target once it is Ready.
	g.leaving = true
	rec, err := g.act.Lookup.Move(c, placement.MovePlan{
		Kind: g.act.Kind, Identity: g.act.Identity, Source: ctx.Self(),
		TargetNode: req.GetTargetNode(), OperationID: opID,
		Progress: func(stage placement.MoveStage, target string, _ int64) {
			if target != "" && names[target] == "" {
				names, _ = g.act.Lookup.NodeNames(c)
			}
			record(relocation.OpState(stage), target, "")
		},
	})
	switch {
	case errors.Is(err, placement.ErrMoveRolledBack), errors.Is(err, location.ErrNotOwner):
		g.leaving = false
		return nil, fmt.Errorf("%w: %w", ErrFailedPrecondition, err)
	case errors.Is(err, placement.ErrMoveNotBegun), errors.Is(err, placement.ErrMoveInDoubt):
		// No target was activated: this grain still owns the order (in
		// doubt, whatever the record reads; repeating the operation
		// settles it). The store's failure is the answer.
		g.leaving = false
		return nil, err
	case err != nil:
		// The target activated and fenced this owner, but the commit did
		// not land: only repeating the operation can complete it.
		// The record is Moving, not this grain's: nothing to release.
		record(relocation.OpTargetActivated, "", err.Error())
		g.leave(ctx, keepRecord)
		return nil, err
	}
	// The record now names the target: stop without touching it.
	g.leave(ctx, keepRecord)
	return &contracts.RelocateOrderRes{
		OrderId: g.act.Identity, OperationId: opID, SourceNode: source,
		TargetNode: names[rec.Owner], Generation: rec.Generation,
	}, nil
}
