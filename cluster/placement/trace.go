package placement

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// Traces cross the grain boundary in the envelope's headers: the cluster
// context sends its own actor.MessageEnvelope carrying the W3C trace
// context (protoactor's RequestFuture sends none), protoactor's remote
// copies the headers onto the wire (endpoint writer: MessageHeader) and
// back into a local envelope (endpoint reader), and the grain reads them
// with ExtractTrace. A call made outside any trace sends no header at
// all, so that, tracing off, the envelope is what RequestFuture sends.

// tracerScope names the spans this package starts.
const tracerScope = "github.com/shoppingmall-go/shoppingmall/cluster/placement"

// Span attributes of grain calls, besides the rpc.* semantic-convention
// ones (rpc.system "protoactor", rpc.service the kind, rpc.method the
// message type).
const (
	// AttrIdentity is the called grain's identity.
	AttrIdentity = "shoppingmall.grain.identity"
	// AttrResends counts the times a call was resent to a new owner.
	AttrResends = "shoppingmall.grain.resends"
)

// RPCSystem is the rpc.system of grain call spans.
const RPCSystem = "protoactor"

func (l *Lookup) tracer() trace.Tracer {
	return telemetry.TracerProvider(l.cfg.TracerProvider).Tracer(tracerScope)
}

// SpanName is the name of a grain call's spans on both sides:
// "<kind>/<message type>", e.g.
// "shoppingmall.order-workflow/StartOrderWorkflowReq".
func SpanName(kind string, message any) string {
	return kind + "/" + messageName(message)
}

func messageName(m any) string {
	n := fmt.Sprintf("%T", m)
	if i := strings.LastIndexByte(n, '.'); i >= 0 {
		n = n[i+1:]
	}
	return strings.TrimLeft(n, "*")
}

func callAttributes(kind, identity string, message any) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("rpc.system", RPCSystem),
		attribute.String("rpc.service", kind),
		attribute.String("rpc.method", messageName(message)),
		attribute.String(AttrIdentity, identity),
	}
}

// startCall starts the client span of one grain call (all its resends).
func (l *Lookup) startCall(ctx context.Context, kind, identity string, message any) (context.Context, trace.Span) {
	return l.tracer().Start(ctx, SpanName(kind, message), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(callAttributes(kind, identity, message)...))
}

func endCall(span trace.Span, resends int, err error) {
	if resends > 0 {
		span.SetAttributes(attribute.Int(AttrResends, resends))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartReceive starts the server span of a grain's turn for the message
// actx is handling, as a child of the caller's span when the message
// carried a trace context (ExtractTrace), and returns ctx holding it. tp
// nil uses the global provider.
func StartReceive(ctx context.Context, tp trace.TracerProvider, actx actor.Context, kind, identity string) (context.Context, trace.Span) {
	msg := actx.Message()
	ctx = ExtractTrace(ctx, actx)
	return telemetry.TracerProvider(tp).Tracer(tracerScope).Start(ctx, SpanName(kind, msg), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(callAttributes(kind, identity, msg)...))
}

// ExtractTrace returns ctx holding the trace context the message actx is
// handling arrived with (its envelope's headers, sent by Context), as a
// remote span context; ctx itself when it came with none.
func ExtractTrace(ctx context.Context, actx actor.Context) context.Context {
	h := actx.MessageHeader()
	if h == nil || h.Length() == 0 {
		return ctx
	}
	return telemetry.Propagator().Extract(ctx, headerCarrier{h})
}

// requestFuture is RootContext.RequestFuture with ctx's trace context and
// headers (WithHeader) in the envelope's headers. With neither it is
// RequestFuture itself.
func (c *Context) requestFuture(ctx context.Context, pid *actor.PID, message any, timeout time.Duration) *actor.Future {
	sys := c.lookup.cluster.ActorSystem
	headers := headersOf(ctx)
	traced := trace.SpanContextFromContext(ctx).IsValid()
	if !traced && len(headers) == 0 {
		return sys.Root.RequestFuture(pid, message, timeout)
	}
	f := actor.NewFuture(sys, timeout)
	env := &actor.MessageEnvelope{Message: message, Sender: f.PID()}
	if traced {
		telemetry.Propagator().Inject(ctx, envelopeCarrier{env})
	}
	for k, v := range headers {
		env.SetHeader(k, v)
	}
	// Send delivers the envelope as it is: locally to the grain's
	// mailbox, remotely through the endpoint writer, which keeps the
	// sender (the future) and the headers.
	sys.Root.Send(pid, env)
	return f
}

// headersKey holds the headers WithHeader adds to a call.
type headersKey struct{}

// WithHeader returns ctx whose grain calls carry the header key: value
// besides their message, to every owner they are sent to (a first command
// travelling with its activation too); the grain reads it from its
// message's headers (actor.Context.MessageHeader). Headers say how to
// treat a call, never what it asks: the messages are the contract.
func WithHeader(ctx context.Context, key, value string) context.Context {
	prev := headersOf(ctx)
	next := make(map[string]string, len(prev)+1)
	for k, v := range prev {
		next[k] = v
	}
	next[key] = value
	return context.WithValue(ctx, headersKey{}, next)
}

func headersOf(ctx context.Context) map[string]string {
	h, _ := ctx.Value(headersKey{}).(map[string]string)
	return h
}

// envelopeCarrier writes a trace context into an outgoing envelope.
type envelopeCarrier struct{ env *actor.MessageEnvelope }

func (e envelopeCarrier) Get(key string) string { return e.env.GetHeader(key) }
func (e envelopeCarrier) Set(key, value string) { e.env.SetHeader(key, value) }
func (e envelopeCarrier) Keys() []string {
	if e.env.Header == nil {
		return nil
	}
	return e.env.Header.Keys()
}

// headerCarrier reads a trace context from a received message's headers.
type headerCarrier struct{ h actor.ReadonlyMessageHeader }

func (c headerCarrier) Get(key string) string { return c.h.Get(key) }
func (c headerCarrier) Set(string, string)    {}
func (c headerCarrier) Keys() []string        { return c.h.Keys() }
