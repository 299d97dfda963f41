package edgetest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/edgenode"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// traced is one API member and one workflow member, each with a tracer
// provider of its own recording every span in memory, and store clients
// of their own whose Redis commands are traced into it: what the API
// records and what the workflow member records meet only through the
// grain call's envelope, over protoactor's remoting.
type traced struct {
	h        *harness
	api      *apiNode
	apiSpans *tracetest.SpanRecorder
	wfSpans  *tracetest.SpanRecorder
}

func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func tracedStores(t *testing.T, ctx context.Context, url string, tp trace.TracerProvider) *node.Stores {
	s, err := node.OpenStores(ctx, node.RedisURLs{Default: url}, node.StoreOptions{
		StoreHook: func(store string) redis.Hook { return telemetry.RedisTraceHook(tp, store) },
	})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func newTraced(t *testing.T) *traced {
	t.Helper()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	apiTP, apiSpans := recorder(t)
	wfTP, wfSpans := recorder(t)
	apiStores, wfStores := tracedStores(t, ctx, srv.URL(), apiTP), tracedStores(t, ctx, srv.URL(), wfTP)
	require.NoError(t, wfStores.Commerce.ApplySeed(ctx, commerce.DemoSeed()))
	h := &harness{t: t, stores: apiStores, agent: test.NewInMemAgent(), http: &http.Client{Timeout: 2 * requestTimeout}}

	w, err := node.StartWorkflow(ctx, node.WorkflowConfig{
		Cluster: cluster.Config{
			NodeName: "workflow-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, Logger: h.logger("workflow-a"), FrameworkLogLevel: quietFramework,
		},
		Stores:         wfStores,
		Logger:         h.logger("workflow-a"),
		TracerProvider: wfTP,
	})
	require.NoError(t, err)
	t.Cleanup(w.Member.Crash)

	a, err := edgenode.Start(ctx, edgenode.Config{
		Cluster: cluster.Config{
			NodeName: "api-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, FrameworkLogLevel: quietFramework,
		},
		Stores:         apiStores,
		RequestTimeout: requestTimeout,
		Evidence:       io.Discard,
		Logger:         h.logger("api-a"),
		TracerProvider: apiTP,
		OrderIDSecret:  []byte(orderIDSecret),
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- a.Server.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Server.Shutdown(ctx)
		require.ErrorIs(t, <-served, http.ErrServerClosed)
		a.Routes.Close()
		a.Member.Crash()
	})
	api := &apiNode{name: "api-a", api: a, url: "http://" + ln.Addr().String()}
	require.Eventually(t, func() bool { return len(a.Member.Lookup.Eligible(grain.KindName)) == 1 }, 10*time.Second, 10*time.Millisecond,
		"the API sees the workflow member")
	require.NotEqual(t, a.Member.Address(), w.Member.Address(), "two members, so the grain call crosses remoting")
	return &traced{h: h, api: api, apiSpans: apiSpans, wfSpans: wfSpans}
}

// startOrder POSTs /orders with the caller's traceparent and returns the
// new order's id and the request id the edge answered with.
func (tr *traced) startOrder(t *testing.T, traceparent string) (orderID, requestID string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tr.api.url+"/orders",
		strings.NewReader(startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t))))
	require.NoError(t, err)
	req.Header.Set("traceparent", traceparent)
	res, err := tr.h.http.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode, string(b))
	out := &contracts.StartOrderRes{}
	require.NoError(t, contracts.UnmarshalJSON(b, out))
	return out.GetOrderId(), res.Header.Get(edge.HeaderRequestID)
}

// find returns the ended spans of rec that match.
func find(rec *tracetest.SpanRecorder, match func(sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// one waits until exactly one ended span of rec matches, and returns it.
func one(t *testing.T, rec *tracetest.SpanRecorder, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var got []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool { got = find(rec, match); return len(got) >= 1 }, 10*time.Second, 10*time.Millisecond, "%s", what)
	require.Len(t, got, 1, "%s: exactly one", what)
	return got[0]
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasAttr(s sdktrace.ReadOnlySpan, key, value string) bool {
	v, ok := attr(s, key)
	return ok && v.AsString() == value
}

func childOf(parent sdktrace.ReadOnlySpan) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool {
		return s.Parent().TraceID() == parent.SpanContext().TraceID() && s.Parent().SpanID() == parent.SpanContext().SpanID()
	}
}

func isRedis(s sdktrace.ReadOnlySpan) bool { return hasAttr(s, "db.system.name", "redis") }

// The caller's trace goes on through the edge's server span, the API
// member's grain call, the grain's turn on the workflow member (its trace
// context crossed in the envelope's headers over remoting) and the Redis
// commands of each: one trace, parent by parent.
func TestTraceFollowsARequestAcrossMembers(t *testing.T) {
	tr := newTraced(t)
	callerTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	callerSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	orderID, requestID := tr.startOrder(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.NotEmpty(t, requestID)

	server := one(t, tr.apiSpans, "the edge's server span", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind() == trace.SpanKindServer && s.Name() == "POST /orders"
	})
	require.Equal(t, callerTrace, server.SpanContext().TraceID(), "the caller's trace goes on")
	require.Equal(t, callerSpan, server.Parent().SpanID(), "under the caller's span")
	require.True(t, hasAttr(server, edge.AttrRequestID, requestID), "the span holds the request id the reply echoed")
	require.True(t, hasAttr(server, "http.route", "/orders"))

	call := one(t, tr.apiSpans, "the API member's grain call", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind() == trace.SpanKindClient && s.Name() == grain.KindName+"/StartOrderWorkflowReq"
	})
	require.True(t, childOf(server)(call), "the grain call is a child of the server span")
	require.True(t, hasAttr(call, placement.AttrIdentity, orderID))
	apiRedis := find(tr.apiSpans, func(s sdktrace.ReadOnlySpan) bool { return isRedis(s) && childOf(server)(s) })
	require.NotEmpty(t, apiRedis, "the API's own Redis commands (the idempotency reservation, the cart) sit under the server span")

	turn := one(t, tr.wfSpans, "the grain's turn on the workflow member", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind() == trace.SpanKindServer && s.Name() == grain.KindName+"/StartOrderWorkflowReq"
	})
	require.True(t, turn.Parent().IsRemote(), "the turn's parent came from another member")
	require.True(t, childOf(call)(turn), "the turn's parent is the API's grain call span: the context crossed the envelope")
	require.Equal(t, callerTrace, turn.SpanContext().TraceID())
	require.True(t, hasAttr(turn, placement.AttrIdentity, orderID))

	wfRedis := find(tr.wfSpans, func(s sdktrace.ReadOnlySpan) bool { return isRedis(s) && childOf(turn)(s) })
	require.NotEmpty(t, wfRedis, "the turn's Redis commands sit under it")
	for _, s := range wfRedis {
		require.Equal(t, trace.SpanKindClient, s.SpanKind())
		_, ok := attr(s, telemetry.AttrStore)
		require.True(t, ok, "%s names its store", s.Name())
		t.Logf("under the turn: %s (%v)", s.Name(), s.Attributes())
	}
	// The workflow member records a new order's grain Ready in the
	// start's append, under the turn: no Location command of its own.
	commit := find(tr.wfSpans, func(s sdktrace.ReadOnlySpan) bool {
		return isRedis(s) && hasAttr(s, telemetry.AttrStore, node.StoreLocation) && s.SpanContext().TraceID() == callerTrace
	})
	require.Empty(t, commit, "the Ready commit rides in the start's append")
	var appended bool
	for _, s := range wfRedis {
		appended = appended || hasAttr(s, telemetry.AttrStore, node.StoreEvents)
	}
	require.True(t, appended, "the start's append, which carries the Ready commit, sits under the turn")
	var inTrace int
	for _, s := range append(tr.apiSpans.Ended(), tr.wfSpans.Ended()...) {
		if s.SpanContext().TraceID() == callerTrace {
			inTrace++
		}
	}
	t.Logf("%d spans in the request's trace across both members", inTrace)
	// Let the background steps finish before the members go.
	tr.h.waitStatus(tr.api, orderID, contracts.OrderStatus_Confirmed)
}

// The steps that run after the reply are traces of their own, each linked
// to the start's turn, and their Redis commands sit under them.
func TestBackgroundStepTracesLinkToTheStart(t *testing.T) {
	tr := newTraced(t)
	orderID, _ := tr.startOrder(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

	turn := one(t, tr.wfSpans, "the start's turn", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind() == trace.SpanKindServer && hasAttr(s, placement.AttrIdentity, orderID)
	})
	linked := func(s sdktrace.ReadOnlySpan) bool {
		for _, l := range s.Links() {
			if l.SpanContext.TraceID() == turn.SpanContext().TraceID() && l.SpanContext.SpanID() == turn.SpanContext().SpanID() {
				return true
			}
		}
		return false
	}
	stepsOf := func() []sdktrace.ReadOnlySpan {
		return find(tr.wfSpans, func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == grain.StepSpanName && hasAttr(s, placement.AttrIdentity, orderID)
		})
	}
	// A successful order takes two steps after the start: the reservation,
	// then the payment with the confirmation in its append.
	require.Eventually(t, func() bool { return len(stepsOf()) >= 2 }, 15*time.Second, 10*time.Millisecond, "the order's steps ran")
	traces := map[trace.TraceID]bool{}
	for _, s := range stepsOf() {
		require.False(t, s.Parent().IsValid(), "a step is the root of its own trace")
		require.NotEqual(t, turn.SpanContext().TraceID(), s.SpanContext().TraceID(), "not inside the request's trace")
		require.True(t, linked(s), "the step links to the start's turn")
		traces[s.SpanContext().TraceID()] = true
		require.NotEmpty(t, find(tr.wfSpans, func(r sdktrace.ReadOnlySpan) bool { return isRedis(r) && childOf(s)(r) }),
			"the step's Redis commands sit under it")
	}
	require.Len(t, traces, len(stepsOf()), "one trace per step")
	tr.h.waitStatus(tr.api, orderID, contracts.OrderStatus_Confirmed)
}
