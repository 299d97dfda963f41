// Package telemetry owns what a ShoppingMall process shows operators about
// itself: its Prometheus registry (with the process and Go runtime
// collectors), the /metrics handler and the listener that serves it, the
// pprof handlers a process mounts on its private listener, and the go-redis
// hook that counts the stores' Redis commands and round trips. For traces
// it owns the process's tracer provider (OTLP export, or the no-op
// provider: tracing.go), the trace context format every process speaks
// (Propagator), the slog handler that puts a span's ids on log lines, and
// the go-redis hook that makes a span per round trip (redistrace.go); for
// libraries that report through OpenTelemetry metrics, a meter provider
// served with the registry (otelmetrics.go). It owns the writer of the
// spec's evidence lines that every part of a process shares
// (evidence.go), and what the private listeners that serve all this
// share: the bearer token check and the JSON reply (listener.go).
//
// A process builds one Registry and hands it, through Config structs, to
// every part that measures something; each part creates its metrics with
// Registry.Factory, so one registry holds everything the process serves.
// Metric names follow Prometheus conventions (Namespace prefix, _total
// for counters, base units such as _seconds) and are listed in
// docs/observability.md.
//
// It must not import protoactor, gin, or any package of this module:
// every layer may depend on it, and it decides nothing about orders.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Namespace prefixes every metric of this module (shoppingmall_...).
const Namespace = "shoppingmall"

// Registry is one process's metrics. A nil *Registry is valid: its
// Factory makes metrics that count but are served nowhere, and its
// RedisHook is nil, so tests and tools need not build one.
type Registry struct {
	reg   *prometheus.Registry
	redis *redisMetrics
}

// NewRegistry returns a registry holding the process collector
// (process_cpu_seconds_total, process_resident_memory_bytes, open file
// descriptors, ...) and the Go runtime collector (go_goroutines,
// go_memstats_..., go_gc_duration_seconds, ...), plus this package's
// Redis metrics.
func NewRegistry() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	r := &Registry{reg: reg}
	r.redis = newRedisMetrics(r.Factory())
	return r
}

// Factory creates metrics registered with r: the one way other packages
// add theirs, e.g.
//
//	started := reg.Factory().NewCounter(prometheus.CounterOpts{
//		Namespace: telemetry.Namespace, Name: "orders_started_total", Help: "..."})
//
// A name registered twice panics, as with promauto: metrics are created
// once, when their owner is built.
func (r *Registry) Factory() promauto.Factory {
	if r == nil {
		return promauto.With(nil)
	}
	return promauto.With(r.reg)
}

// Registerer is r's registerer, for collectors built elsewhere (e.g. an
// OpenTelemetry Prometheus exporter).
func (r *Registry) Registerer() prometheus.Registerer { return r.reg }

// Gatherer is r's gatherer: what /metrics serves, readable in-process.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves r in the Prometheus exposition formats, and counts its
// own scrapes (promhttp_metric_handler_requests_total).
func (r *Registry) Handler() http.Handler {
	return promhttp.InstrumentMetricHandler(r.reg, promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		Registry:            r.reg,
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
}

// Sum adds up the current value of every sample of the metric family
// name in g whose labels include every pair of match (nil matches all):
// a counter's or gauge's value, a histogram's or summary's sample count.
// A family that is absent sums to 0. Tests and tools read deltas with it.
func Sum(g prometheus.Gatherer, name string, match map[string]string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	return sumFamilies(mfs, name, match), nil
}

func sumFamilies(mfs []*dto.MetricFamily, name string, match map[string]string) float64 {
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, match) {
				total += sampleValue(m)
			}
		}
	}
	return total
}

func matches(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k {
				found = lp.GetValue() == v
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	}
	return 0
}

// DefaultMetricsAddr is the -metrics-http default: loopback, on a port the
// kernel picks (logged as "metrics"), so that several processes on one
// host never collide; a pod sets a fixed address its scraper reaches.
const DefaultMetricsAddr = "127.0.0.1:0"

// MetricsOff is the -metrics-http value that serves no /metrics.
const MetricsOff = "off"

// MetricsPath is where the metrics listener serves the registry.
const MetricsPath = "/metrics"

// Server is a running metrics listener.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Serve binds addr and serves r at MetricsPath until Shutdown; every
// other path is 404. A taken or malformed address fails here. The
// listener has no authentication (as scrapers expect): keep it on
// loopback or a private network.
func (r *Registry) Serve(addr string, log *slog.Logger) (*Server, error) {
	if r == nil {
		return nil, errors.New("telemetry: Serve on a nil Registry")
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, r.Handler())
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener ended", slog.Any("error", err))
		}
	}()
	return s, nil
}

// Addr is the bound address (the real port when addr asked for 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the listener, waiting for scrapes in flight until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
