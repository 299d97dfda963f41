// Package grain is the protoactor adapter of OrderWorkflow: the grain of
// kind shoppingmall.order-workflow that owns one order, its typed client,
// and the translation of errors into stable reason codes across the grain
// boundary and back.
//
// The grain keeps nothing that cannot be rebuilt from the order's stream.
// Every state change happens inside one actor turn; the background
// continuation is a chain of self-messages, never a goroutine. This
// package may import the application (actors/workflow), the contracts and
// cluster/...; it must not import edge or any store implementation.
package grain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/google/uuid"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
)

// KindName is the cluster kind of order grains (spec: the Instance
// factory shoppingmall.order-workflow).
const KindName = "shoppingmall.order-workflow"

// Config wires the grain.
type Config struct {
	Service *workflow.Service
	// Relocations keeps relocation operation records. Required for
	// RelocateOrderReq.
	Relocations *relocation.Store
	// IdleTimeout passivates a grain that received nothing for this long:
	// authority is released and the next command activates generation+1.
	// Zero disables idle passivation.
	IdleTimeout time.Duration
	// TurnTimeout bounds the store and module calls of one turn.
	TurnTimeout time.Duration
	// Evidence receives raw evidence lines (spec §10.1).
	Evidence io.Writer
	// Now returns unix milliseconds, for operation records.
	Now    func() int64
	Logger *slog.Logger
}

// Kind returns the cluster kind to register on workflow members.
func Kind(cfg Config) *pcluster.Kind {
	if cfg.TurnTimeout == 0 {
		cfg.TurnTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Evidence == nil {
		cfg.Evidence = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixMilli() }
	}
	ev := &lineWriter{w: cfg.Evidence}
	return pcluster.NewKind(KindName, actor.PropsFromProducer(func() actor.Actor {
		return &orderGrain{cfg: cfg, evidence: ev}
	}))
}

// lineWriter writes whole evidence lines, one Write each.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, s+"\n")
}

// step is the self-message that drives the background continuation, one
// workflow step per turn. It never leaves the process.
type step struct{}

type orderGrain struct {
	cfg      Config
	evidence *lineWriter
	act      location.Activation
	order    *workflow.Order
	openErr  error
	// leaving is set once the grain decided to stop (close, idle, move,
	// fenced): later commands are answered Retry so the caller resends
	// them to whoever owns the order next.
	leaving bool
}

// SetActivation implements location.Activatable.
func (g *orderGrain) SetActivation(a location.Activation) { g.act = a }

func (g *orderGrain) turnCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.cfg.TurnTimeout)
}

func (g *orderGrain) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.onStarted(ctx)
	case *actor.ReceiveTimeout:
		g.onIdle(ctx)
	case *step:
		g.onStep(ctx)
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
			ctx.Send(ctx.Self(), &step{})
			return &contracts.ResumeOrderRes{State: g.cfg.Service.View(g.order)}, nil
		})
	case *contracts.CloseOrderReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.close(ctx, c) })
	case *contracts.RelocateOrderReq:
		g.command(ctx, func(c context.Context) (any, error) { return g.relocate(ctx, c, m) })
	}
}

// onStarted replays the stream. A relocated owner prints the replay
// evidence and resumes the continuation from the next step.
func (g *orderGrain) onStarted(ctx actor.Context) {
	c, cancel := g.turnCtx()
	defer cancel()
	g.order, g.openErr = g.cfg.Service.Open(c, g.act.Identity, g.act.Generation)
	if g.openErr != nil {
		g.cfg.Logger.Error("order open failed", slog.String("order", g.act.Identity), slog.Any("error", g.openErr))
		g.leave(ctx, errors.Is(g.openErr, workflow.ErrFenced), false)
		return
	}
	if g.cfg.IdleTimeout > 0 {
		ctx.SetReceiveTimeout(g.cfg.IdleTimeout)
	}
	if g.act.Reason == location.ActivationReason_ACTIVATION_REASON_RELOCATION {
		g.evidence.line(fmt.Sprintf("shoppingmall-order replayed order=%s generation=%d", g.act.Identity, g.act.Generation))
		ctx.Send(ctx.Self(), &step{})
	}
}

// command runs one request in this turn and answers it.
func (g *orderGrain) command(ctx actor.Context, run func(context.Context) (any, error)) {
	if g.leaving {
		ctx.Respond(&location.Retry{Reason: "owner is leaving"})
		return
	}
	if g.openErr != nil {
		ctx.Respond(toWire(fmt.Errorf("%w: %v", ErrInternal, g.openErr)))
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	res, err := run(c)
	switch {
	case errors.Is(err, workflow.ErrFenced):
		// A newer owner exists: nothing this command did was recorded, and
		// the caller resends it to whoever owns the order now.
		ctx.Respond(&location.Retry{Reason: "owner fenced off by a newer one"})
		g.afterFailure(ctx, err)
		return
	case err != nil:
		ctx.Respond(toWire(err))
		g.afterFailure(ctx, err)
		return
	}
	ctx.Respond(res)
}

// afterFailure stops an activation that owns nothing (no stream: spec
// §9.3-3, no lasting activation and no generation used up) or that a newer
// owner fenced off.
func (g *orderGrain) afterFailure(ctx actor.Context, err error) {
	switch {
	case errors.Is(err, workflow.ErrFenced):
		g.leave(ctx, true, false)
	case g.order != nil && !g.order.Exists() && !g.leaving:
		g.leave(ctx, false, g.act.Reason == location.ActivationReason_ACTIVATION_REASON_COLD)
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
	ctx.Send(ctx.Self(), &step{})
	return &contracts.StartOrderWorkflowReply{Res: &contracts.StartOrderWorkflowRes{State: st}, Recorded: recorded}, nil
}

func (g *orderGrain) continueOrder(ctx actor.Context, c context.Context) (any, error) {
	st, err := g.cfg.Service.Continue(c, g.order)
	if err != nil {
		return nil, err
	}
	ctx.Send(ctx.Self(), &step{})
	return &contracts.ContinueOrderWorkflowRes{State: st}, nil
}

// onStep performs one background step, then schedules the next unless the
// order is done or parked at an interrupt gate.
func (g *orderGrain) onStep(ctx actor.Context) {
	if g.leaving || g.order == nil || !g.order.Exists() {
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	if mode, err := g.cfg.Service.Parked(c, g.order); err != nil || mode != workflow.GateNone {
		if err != nil {
			g.cfg.Logger.Warn("gate check failed", slog.String("order", g.act.Identity), slog.Any("error", err))
		}
		return
	}
	progressed, err := g.cfg.Service.Step(c, g.order)
	if err != nil {
		g.cfg.Logger.Warn("step failed; a continue command resumes it", slog.String("order", g.act.Identity), slog.Any("error", err))
		g.afterFailure(ctx, err)
		return
	}
	if progressed && !g.order.State().Status.Terminal() {
		ctx.Send(ctx.Self(), &step{})
	}
}

func (g *orderGrain) close(ctx actor.Context, c context.Context) (any, error) {
	gen := g.act.Generation
	if err := g.act.Lookup.Release(c, g.act.Kind, g.act.Identity, ctx.Self(), false); err != nil {
		return nil, err
	}
	g.leave(ctx, false, false)
	return &contracts.CloseOrderRes{OrderId: g.act.Identity, Generation: gen}, nil
}

func (g *orderGrain) onIdle(ctx actor.Context) {
	if g.leaving {
		return
	}
	c, cancel := g.turnCtx()
	defer cancel()
	if err := g.act.Lookup.Release(c, g.act.Kind, g.act.Identity, ctx.Self(), !g.order.Exists()); err != nil {
		g.cfg.Logger.Warn("idle release failed", slog.String("order", g.act.Identity), slog.Any("error", err))
		return
	}
	g.cfg.Logger.Info("idle passivation", slog.String("order", g.act.Identity), slog.Int64("generation", g.act.Generation))
	g.leave(ctx, false, false)
}

// leave stops the grain after the messages already queued, which are
// answered Retry. With discard (an activation that owned nothing) it gives
// its authority and generation back. A fenced grain releases the authority
// only if the record still names its pid (a relocation that rolled back
// after the target had fenced it): the next command then activates a new
// generation instead of calling a grain that can no longer write.
func (g *orderGrain) leave(ctx actor.Context, fenced, discard bool) {
	if fenced || discard {
		c, cancel := g.turnCtx()
		if err := g.act.Lookup.Release(c, g.act.Kind, g.act.Identity, ctx.Self(), discard && !fenced); err != nil {
			g.cfg.Logger.Warn("release failed", slog.String("order", g.act.Identity), slog.Any("error", err))
		}
		cancel()
	}
	g.leaving = true
	ctx.SetReceiveTimeout(0)
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
			g.cfg.Logger.Warn("relocation record failed", slog.String("op", opID), slog.Any("error", err))
		}
	}
	// Messages queued behind this one are answered Retry from now on, so
	// they reach the target once it is Ready.
	g.leaving = true
	rec, err := g.act.Lookup.Move(c, location.MovePlan{
		Kind: g.act.Kind, Identity: g.act.Identity, Source: ctx.Self(),
		TargetNode: req.GetTargetNode(), OperationID: opID,
		Progress: func(stage location.MoveStage, target string, _ int64) {
			if target != "" && names[target] == "" {
				names, _ = g.act.Lookup.NodeNames(c)
			}
			record(relocation.OpState(stage), target, "")
		},
	})
	switch {
	case errors.Is(err, location.ErrMoveRolledBack), errors.Is(err, location.ErrNotOwner):
		g.leaving = false
		return nil, fmt.Errorf("%w: %w", ErrFailedPrecondition, err)
	case err != nil:
		// The target activated and fenced this owner, but the commit did
		// not land: only repeating the operation can complete it.
		// The record is Moving, not this grain's: nothing to release.
		record(relocation.OpTargetActivated, "", err.Error())
		g.leave(ctx, false, false)
		return nil, err
	}
	// The record now names the target: stop without touching it.
	g.leave(ctx, false, false)
	return &contracts.RelocateOrderRes{
		OrderId: g.act.Identity, OperationId: opID, SourceNode: source,
		TargetNode: names[rec.Owner], Generation: rec.Generation,
	}, nil
}
