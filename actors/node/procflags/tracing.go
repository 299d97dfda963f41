package procflags

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// The standard OpenTelemetry variables a process honors. Traces are
// exported over OTLP only when an endpoint is set; otherwise the process
// runs the no-op tracer provider and adds no Redis tracing hook. The
// exporter and the SDK read the variables that only tune them
// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE,
// OTEL_TRACES_SAMPLER, OTEL_BSP_...) themselves.
const (
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	// EnvTracesExporter: "otlp" (the default) or "none" (off).
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	// EnvSDKDisabled: "true" turns tracing off.
	EnvSDKDisabled = "OTEL_SDK_DISABLED"
	// EnvServiceName overrides service.name, by default the process kind
	// (commerce-api, order-workflow).
	EnvServiceName        = "OTEL_SERVICE_NAME"
	EnvResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"

	defaultTracesExporter  = "otlp"
	disabledTracesExporter = "none"
)

// tracingConfig reads the OpenTelemetry environment. service is the
// process kind (the flag set's name), the default service.name.
func tracingConfig(lookup func(string) (string, bool), service, node string) (telemetry.TracingConfig, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	cfg := telemetry.TracingConfig{
		Endpoint:           get(EnvOTLPEndpoint),
		TracesEndpoint:     get(EnvOTLPTracesEndpoint),
		Protocol:           get(EnvOTLPProtocol),
		Disabled:           strings.EqualFold(get(EnvSDKDisabled), "true"),
		ServiceName:        get(EnvServiceName),
		NodeName:           node,
		ResourceAttributes: get(EnvResourceAttributes),
	}
	if p := get(EnvOTLPTracesProtocol); p != "" {
		cfg.Protocol = p
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = service
	}
	switch e := strings.ToLower(get(EnvTracesExporter)); e {
	case "", defaultTracesExporter:
	case disabledTracesExporter:
		cfg.Disabled = true
	default:
		return cfg, fmt.Errorf("%s=%q: only %q and %q are supported", EnvTracesExporter, e, defaultTracesExporter, disabledTracesExporter)
	}
	return cfg, nil
}

// openTracing builds the process's tracing from the environment and, when
// it exports, makes it the global provider too (for anything left on the
// default).
func (c *Common) openTracing(lookup func(string) (string, bool), log *slog.Logger) (*telemetry.Tracing, error) {
	cfg, err := tracingConfig(lookup, c.service, c.Node)
	if err != nil {
		return nil, err
	}
	tr, err := telemetry.NewTracing(cfg)
	if err != nil {
		return nil, err
	}
	if tr.Exporting() {
		otel.SetTracerProvider(tr.Provider())
		log.Info("traces exported over OTLP", "otlpEndpoint", tr.Endpoint(), "service", cfg.ServiceName)
	}
	return tr, nil
}

// otelErrors sends the OpenTelemetry SDK's own errors (a collector that
// does not answer, a metric that cannot be exported) to log instead of
// the standard logger.
func otelErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", slog.Any("error", err))
	}))
}

// storeHook is each store client's hook: its metrics and, when traces
// are exported, its spans.
func storeHook(reg *telemetry.Registry, tr *telemetry.Tracing) func(store string) redis.Hook {
	return func(store string) redis.Hook {
		if !tr.Exporting() {
			return reg.RedisHook(store)
		}
		return telemetry.JoinRedisHooks(reg.RedisHook(store), telemetry.RedisTraceHook(tr.Provider(), store))
	}
}
