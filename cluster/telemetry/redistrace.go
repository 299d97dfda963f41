package telemetry

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerScope names the spans this package starts.
const tracerScope = "github.com/shoppingmall-go/shoppingmall/cluster/telemetry"

// Redis span attributes besides the semantic-convention ones.
const (
	// AttrStore names the store whose client sent the command (the same
	// value as the metrics' LabelStore).
	AttrStore = "shoppingmall.store"
	// AttrRedisCommands lists a pipeline's commands in order.
	AttrRedisCommands = "db.redis.commands"
)

// RedisTraceHook returns a go-redis hook that makes a client span of
// every round trip of one store's client under store: one per command,
// named by it (EVALSHA), or one per pipeline or transaction (PIPELINE,
// MULTI) listing its commands. nil on a nil tp, so that a process without
// tracing adds no hook at all.
//
// Spans are made only inside a trace (the context holds a span): a Redis
// call is a part of the request or step that made it, and the stores'
// own housekeeping (presence refreshes, probes) would otherwise start a
// trace per command. Arguments are never recorded: they hold customer
// data. The connection handshake is left out, as in RedisHook.
func RedisTraceHook(tp trace.TracerProvider, store string) redis.Hook {
	if tp == nil {
		return nil
	}
	return &redisTraceHook{tracer: tp.Tracer(tracerScope), store: store}
}

type redisTraceHook struct {
	tracer trace.Tracer
	store  string
}

var _ redis.Hook = (*redisTraceHook)(nil)

// DialHook implements redis.Hook.
func (h *redisTraceHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook.
func (h *redisTraceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() || isSetup([]redis.Cmder{cmd}) {
			return next(ctx, cmd)
		}
		op := strings.ToUpper(cmd.Name())
		ctx, span := h.tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("db.system.name", "redis"),
			attribute.String("db.operation.name", op),
			attribute.String(AttrStore, h.store),
		))
		err := next(ctx, cmd)
		endRedisSpan(span, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *redisTraceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() || isSetup(cmds) {
			return next(ctx, cmds)
		}
		op := "PIPELINE"
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "multi") {
			op = "MULTI"
		}
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = strings.ToUpper(c.Name())
		}
		ctx, span := h.tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("db.system.name", "redis"),
			attribute.String("db.operation.name", op),
			attribute.Int("db.operation.batch.size", len(cmds)),
			attribute.StringSlice(AttrRedisCommands, names),
			attribute.String(AttrStore, h.store),
		))
		err := next(ctx, cmds)
		endRedisSpan(span, err)
		return err
	}
}

func endRedisSpan(span trace.Span, err error) {
	// A missing key (redis.Nil) is an answer, not a failure.
	if err != nil && !errors.Is(err, redis.Nil) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// JoinRedisHooks returns one hook running hooks in order, the first
// outermost, skipping nil ones; nil when none is left. A store client
// takes one hook per label (node.StoreOptions.StoreHook): this lets the
// metrics and the tracing hook share it.
func JoinRedisHooks(hooks ...redis.Hook) redis.Hook {
	var hs []redis.Hook
	for _, h := range hooks {
		if h != nil {
			hs = append(hs, h)
		}
	}
	switch len(hs) {
	case 0:
		return nil
	case 1:
		return hs[0]
	}
	return joinedHooks(hs)
}

type joinedHooks []redis.Hook

func (j joinedHooks) DialHook(next redis.DialHook) redis.DialHook {
	for i := len(j) - 1; i >= 0; i-- {
		next = j[i].DialHook(next)
	}
	return next
}

func (j joinedHooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	for i := len(j) - 1; i >= 0; i-- {
		next = j[i].ProcessHook(next)
	}
	return next
}

func (j joinedHooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	for i := len(j) - 1; i >= 0; i-- {
		next = j[i].ProcessPipelineHook(next)
	}
	return next
}
