package grain

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// A command's turn is a server span continuing the caller's trace (the
// trace context rides in the envelope's headers, placement.StartReceive);
// the store calls of the turn are its children through the turn's
// context. A background step runs after the reply, so it is a trace of
// its own, linked to the turn of the command that gave the order that
// work (the start, a continue, a resume): a trace then ends when its
// request is answered, and the link still leads from a step to the
// request behind it.

// tracerScope names the spans this package starts.
const tracerScope = "github.com/shoppingmall-go/shoppingmall/actors/grain"

// StepSpanName is the name of a background step's root span.
const StepSpanName = KindName + "/step"

// AttrAttempt is a background step's try number after transient failures
// (0 for the first try).
const AttrAttempt = "shoppingmall.step.attempt"

// grainTraces is a grain's tracing state.
type grainTraces struct {
	// turn is the span of the command being handled; invalid outside a
	// command's turn.
	turn trace.SpanContext
	// cause is the span of the command that last scheduled background
	// work: the steps' traces link to it. Invalid after an activation
	// that no command caused (a cold resume, a relocation target).
	cause trace.SpanContext
	// step is the context of the background step being run, so that the
	// lines logged about it carry its trace's ids; nil outside a step.
	step context.Context
}

// stepContext is the running step's context, for logging.
func (t *grainTraces) stepContext() context.Context {
	if t.step == nil {
		return context.Background()
	}
	return t.step
}

func (g *orderGrain) tracer() trace.Tracer {
	return telemetry.TracerProvider(g.cfg.TracerProvider).Tracer(tracerScope)
}

func (g *orderGrain) identity() string {
	if g.act == nil {
		return ""
	}
	return g.act.Identity
}

// startCommand starts the server span of a command's turn.
func (g *orderGrain) startCommand(c context.Context, ctx actor.Context) (context.Context, trace.Span) {
	c, span := placement.StartReceive(c, g.cfg.TracerProvider, ctx, KindName, g.identity())
	g.traces.turn = span.SpanContext()
	return c, span
}

// endCommand ends a command's span, failed when err is not nil.
func (g *orderGrain) endCommand(span trace.Span, err error) {
	g.traces.turn = trace.SpanContext{}
	endSpan(span, err)
}

// noteKick makes the command being handled, if any, the cause of the
// background work just scheduled.
func (g *orderGrain) noteKick() {
	if g.traces.turn.IsValid() {
		g.traces.cause = g.traces.turn
	}
}

// startStep starts the root span of one background step, linked to the
// command that scheduled the work.
func (g *orderGrain) startStep(c context.Context) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(placement.AttrIdentity, g.identity()),
			attribute.Int(AttrAttempt, g.attempts),
		),
	}
	if g.traces.cause.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: g.traces.cause}))
	}
	c, span := g.tracer().Start(c, StepSpanName, opts...)
	g.traces.step = c
	return c, span
}

// endStep ends a background step's span, failed when err is not nil.
func (g *orderGrain) endStep(span trace.Span, err error) {
	g.traces.step = nil
	endSpan(span, err)
}

// endSpan ends a turn's span, failed when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
