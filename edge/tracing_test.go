package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
)

// spanSeeingOrders records the span each start's context holds.
type spanSeeingOrders struct {
	*fakeOrders
	mu   sync.Mutex
	seen []trace.SpanContext
}

func (o *spanSeeingOrders) StartOrderWorkflow(ctx context.Context, req *contracts.StartOrderWorkflowReq) (*contracts.StartOrderWorkflowRes, bool, error) {
	o.mu.Lock()
	o.seen = append(o.seen, trace.SpanContextFromContext(ctx))
	o.mu.Unlock()
	return o.fakeOrders.StartOrderWorkflow(ctx, req)
}

func tracedEnv(t *testing.T) (*env, *tracetest.SpanRecorder, *spanSeeingOrders) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var orders *spanSeeingOrders
	e := newEnv(t, func(c *Config) {
		c.TracerProvider = tp
		orders = &spanSeeingOrders{fakeOrders: c.Orders.(*fakeOrders)}
		c.Orders = orders
	})
	return e, rec, orders
}

func lastSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := rec.Ended()
	require.NotEmpty(t, ended)
	return ended[len(ended)-1]
}

// Each request is a server span named by its route template, holding the
// request's id and its status; a caller's traceparent is its parent, and
// what the handler calls sees the span in its context.
func TestTracingMakesAServerSpanPerRequest(t *testing.T) {
	e, rec, orders := tracedEnv(t)

	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(startBody(cartOK, "addr-1", "pm-ok", "k-trace")))
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	w := httptest.NewRecorder()
	e.srv.ServeHTTP(w, r)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	s := lastSpan(t, rec)
	require.Equal(t, "POST /orders", s.Name())
	require.Equal(t, trace.SpanKindServer, s.SpanKind())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext().TraceID().String(), "the caller's trace goes on")
	require.Equal(t, "00f067aa0ba902b7", s.Parent().SpanID().String())
	require.Contains(t, s.Attributes(), attribute.String(AttrRequestID, w.Header().Get(HeaderRequestID)))
	require.Contains(t, s.Attributes(), attribute.Int("http.response.status_code", http.StatusCreated))
	require.Len(t, orders.seen, 1)
	require.Equal(t, s.SpanContext().SpanID(), orders.seen[0].SpanID(), "the grain client is called inside the span")

	w = e.do(http.MethodGet, "/orders/ord-unknown", "")
	require.Equal(t, http.StatusNotFound, w.Code)
	s = lastSpan(t, rec)
	require.Equal(t, "GET /orders/:orderId", s.Name(), "the route template, never the raw path")
	require.False(t, s.Parent().IsValid(), "no traceparent: a new trace")
	require.Equal(t, codes.Unset, s.Status().Code, "a 404 is the client's")

	w = e.do("BREW", "/coffee", "")
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Equal(t, MethodOther+" "+RouteUnmatched, lastSpan(t, rec).Name(), "unknown routes and methods stay bounded")

	orders.err = grain.ErrInternal
	w = e.do(http.MethodPost, "/orders", startBody(cartOK, "addr-1", "pm-ok", "k-trace-2"))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.Equal(t, codes.Error, lastSpan(t, rec).Status().Code, "a 5xx fails the span")
}
