package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The log keys TraceLogHandler adds (the module's camelCase log key style).
const (
	LogKeyTraceID = "traceId"
	LogKeySpanID  = "spanId"
)

// OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL's values).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// TracingConfig configures a process's traces. The main fills it from
// the standard OpenTelemetry environment (procflags does); this package
// reads none itself. The OTLP exporter and the SDK still read the
// variables that only tune them (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE, OTEL_TRACES_SAMPLER, OTEL_BSP_...), as the
// OpenTelemetry specification has them do.
type TracingConfig struct {
	// Endpoint is the collector's base URL (OTEL_EXPORTER_OTLP_ENDPOINT):
	// over http/protobuf traces go to Endpoint + "/v1/traces"; over grpc
	// to Endpoint itself.
	Endpoint string
	// TracesEndpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is the full URL
	// traces go to; it wins over Endpoint.
	TracesEndpoint string
	// Protocol is ProtocolHTTP (the default, as the specification has it)
	// or ProtocolGRPC.
	Protocol string
	// Disabled (OTEL_SDK_DISABLED=true) turns tracing off whatever the
	// endpoints say.
	Disabled bool
	// ServiceName is the resource's service.name (OTEL_SERVICE_NAME, else
	// the process kind: commerce-api, order-workflow).
	ServiceName string
	// NodeName is the resource's service.instance.id (api-a, workflow-b).
	NodeName string
	// ResourceAttributes are further resource attributes
	// (OTEL_RESOURCE_ATTRIBUTES: key=value pairs, comma separated, values
	// percent-encoded); they do not override ServiceName or NodeName.
	ResourceAttributes string
}

// On reports whether cfg exports traces: an endpoint is set and the SDK
// is not disabled.
func (cfg TracingConfig) On() bool {
	return !cfg.Disabled && (cfg.Endpoint != "" || cfg.TracesEndpoint != "")
}

// Tracing is one process's tracer provider: an SDK provider exporting
// over OTLP when the configuration names a collector, otherwise the no-op
// provider, whose spans record nothing and cost next to nothing. A nil
// *Tracing is off.
type Tracing struct {
	provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
	endpoint string
}

// ErrTracingConfig: the tracing configuration cannot build an exporter.
var ErrTracingConfig = errors.New("telemetry: invalid tracing configuration")

// NewTracing builds the process's tracer provider from cfg. The exporter
// connects lazily: an unreachable collector costs dropped spans (logged by
// the OpenTelemetry error handler), never a failed start.
func NewTracing(cfg TracingConfig) (*Tracing, error) {
	if !cfg.On() {
		return &Tracing{provider: noop.NewTracerProvider()}, nil
	}
	ctx := context.Background()
	var (
		exp      sdktrace.SpanExporter
		endpoint string
		err      error
	)
	switch strings.ToLower(cfg.Protocol) {
	case "", ProtocolHTTP:
		endpoint = cfg.TracesEndpoint
		if endpoint == "" {
			endpoint = strings.TrimRight(cfg.Endpoint, "/") + "/v1/traces"
		}
		if err = checkURL(endpoint); err == nil {
			exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
		}
	case ProtocolGRPC:
		endpoint = cfg.TracesEndpoint
		if endpoint == "" {
			endpoint = cfg.Endpoint
		}
		if err = checkURL(endpoint); err == nil {
			exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
		}
	default:
		return nil, fmt.Errorf("%w: OTLP protocol %q: want %s or %s", ErrTracingConfig, cfg.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter for %s: %w", ErrTracingConfig, endpoint, err)
	}
	attrs, err := resourceAttributes(cfg)
	if err != nil {
		return nil, err
	}
	// resource.NewSchemaless, not resource.Default(): the default merges
	// the SDK's detectors, and those read OTEL_RESOURCE_ATTRIBUTES from
	// the environment themselves.
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	return &Tracing{provider: tp, sdk: tp, endpoint: endpoint}, nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

func resourceAttributes(cfg TracingConfig) ([]attribute.KeyValue, error) {
	var attrs []attribute.KeyValue
	seen := map[string]bool{}
	add := func(k, v string) {
		if v != "" && !seen[k] {
			seen[k] = true
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	add("service.name", cfg.ServiceName)
	add("service.instance.id", cfg.NodeName)
	add("service.namespace", Namespace)
	for _, kv := range strings.Split(cfg.ResourceAttributes, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%w: resource attribute %q: want key=value", ErrTracingConfig, kv)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%w: resource attribute %q: %w", ErrTracingConfig, kv, err)
		}
		add(strings.TrimSpace(k), dv)
	}
	return attrs, nil
}

// Provider is the tracer provider to hand to every part of the process;
// the no-op provider when t is off or nil.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil || t.provider == nil {
		return noop.NewTracerProvider()
	}
	return t.provider
}

// Exporting reports whether spans are exported (an endpoint was given).
func (t *Tracing) Exporting() bool { return t != nil && t.sdk != nil }

// Endpoint is the URL spans are exported to; "" when off.
func (t *Tracing) Endpoint() string {
	if t == nil {
		return ""
	}
	return t.endpoint
}

// Shutdown exports the spans still buffered, bounded by ctx, and stops
// the exporter. It is a no-op when off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Exporting() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// TracerProvider returns tp, or the global provider when tp is nil: the
// default of every Config's TracerProvider. The global one is the no-op
// provider unless a main set it (otel.SetTracerProvider).
func TracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return otel.GetTracerProvider()
	}
	return tp
}

// propagator is fixed rather than the global one: every process of the
// cluster must speak the same format on the grain envelopes whatever its
// main configured.
var propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Propagator is the trace context format the module speaks across
// processes: W3C traceparent/tracestate, and baggage.
func Propagator() propagation.TextMapPropagator { return propagator }

// TraceLogHandler wraps h so that every record logged with a context
// holding a span (InfoContext(ctx, ...) and the like) carries its ids
// under LogKeyTraceID and LogKeySpanID. Wrapping twice adds them once.
func TraceLogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(traceLogHandler); ok {
		return h
	}
	return traceLogHandler{h}
}

type traceLogHandler struct{ next slog.Handler }

func (h traceLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h traceLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			// The record may be shared with the caller's other handlers.
			r = r.Clone()
			r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h traceLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceLogHandler{h.next.WithAttrs(as)}
}

func (h traceLogHandler) WithGroup(name string) slog.Handler {
	return traceLogHandler{h.next.WithGroup(name)}
}
