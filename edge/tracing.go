package edge

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// tracerScope names the spans this package starts.
const tracerScope = "github.com/shoppingmall-go/shoppingmall/edge"

// AttrRequestID is the server span's attribute holding the request's id
// (RequestID, the X-Request-Id the reply echoes), so that a trace is found
// from the id a client reports.
const AttrRequestID = "http.request_id"

// The canonical header names of W3C trace context and baggage, as
// net/http stores them.
const (
	headerTraceparent = "Traceparent"
	headerBaggage     = "Baggage"
)

// tracing is the middleware that makes each request's server span, named
// "<method> <route template>" (POST /orders/:orderId/continue), as the
// child of the caller's span when the request carries a W3C traceparent.
// It runs right after requestID, so the span holds the request's id and
// encloses everything else the request does: its grain calls and store
// commands are its descendants through the request's context, and lines
// logged with that context carry the trace's ids (telemetry.TraceLogHandler).
func (s *Server) tracing(c *gin.Context) {
	r := c.Request
	ctx := r.Context()
	// Both formats the propagator speaks leave the context as it is when
	// their header is absent, which is the common case: skip the work.
	if len(r.Header[headerTraceparent]) > 0 || len(r.Header[headerBaggage]) > 0 {
		ctx = telemetry.Propagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	route := c.FullPath()
	if route == "" {
		route = RouteUnmatched
	}
	method := methodLabel(r.Method)
	ctx, span := telemetry.TracerProvider(s.cfg.TracerProvider).Tracer(tracerScope).Start(ctx, method+" "+route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", method),
		attribute.String("http.route", route),
		attribute.String("url.path", r.URL.Path),
		attribute.String(AttrRequestID, RequestID(ctx)),
	))
	defer span.End()
	c.Request = r.WithContext(ctx)
	c.Next()
	status := c.Writer.Status()
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}
