package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func TestTracingOffIsTheNoopProvider(t *testing.T) {
	for _, cfg := range []TracingConfig{{}, {Endpoint: "http://127.0.0.1:4318", Disabled: true}} {
		tr, err := NewTracing(cfg)
		require.NoError(t, err)
		require.False(t, tr.Exporting())
		require.Empty(t, tr.Endpoint())
		_, span := tr.Provider().Tracer("t").Start(context.Background(), "x")
		require.False(t, span.IsRecording(), "the no-op provider records nothing")
		require.False(t, span.SpanContext().IsValid(), "and makes no ids: nothing is sent on the envelopes")
		require.NoError(t, tr.Shutdown(context.Background()))
	}
	var nilTracing *Tracing
	require.False(t, nilTracing.Exporting())
	require.NotNil(t, nilTracing.Provider())
	require.NoError(t, nilTracing.Shutdown(context.Background()))
}

func TestTracingConfigErrors(t *testing.T) {
	for _, cfg := range []TracingConfig{
		{Endpoint: "http://127.0.0.1:4318", Protocol: "thrift"},
		{Endpoint: "127.0.0.1:4318"},
		{TracesEndpoint: "ftp://collector/v1/traces"},
		{Endpoint: "http://127.0.0.1:4318", ResourceAttributes: "novalue"},
	} {
		_, err := NewTracing(cfg)
		require.ErrorIs(t, err, ErrTracingConfig, "%+v", cfg)
	}
}

// collector is an OTLP/HTTP endpoint that counts the trace exports it
// receives.
type collector struct {
	mu    sync.Mutex
	paths []string
	types []string
	bytes int
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	c.types = append(c.types, r.Header.Get("Content-Type"))
	c.bytes += len(b)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// With an endpoint, spans reach the collector over OTLP/HTTP at
// <endpoint>/v1/traces (or at the traces endpoint as given), at the
// latest when the process shuts tracing down.
func TestTracingExportsOverOTLPHTTP(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(base string) TracingConfig
		path string
	}{
		{"base endpoint", func(base string) TracingConfig { return TracingConfig{Endpoint: base + "/"} }, "/v1/traces"},
		{"traces endpoint", func(base string) TracingConfig {
			return TracingConfig{Endpoint: "http://127.0.0.1:1", TracesEndpoint: base + "/custom/traces"}
		}, "/custom/traces"},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := &collector{}
			srv := httptest.NewServer(col)
			defer srv.Close()
			tr, err := NewTracing(c.cfg(srv.URL))
			require.NoError(t, err)
			require.True(t, tr.Exporting())
			require.Equal(t, srv.URL+c.path, tr.Endpoint())
			_, span := tr.Provider().Tracer("t").Start(context.Background(), "exported")
			require.True(t, span.IsRecording())
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, tr.Shutdown(ctx))
			col.mu.Lock()
			defer col.mu.Unlock()
			require.Equal(t, []string{c.path}, col.paths)
			require.Equal(t, []string{"application/x-protobuf"}, col.types)
			require.Positive(t, col.bytes)
		})
	}
}

func TestResourceAttributes(t *testing.T) {
	attrs, err := resourceAttributes(TracingConfig{ServiceName: "order-workflow", NodeName: "workflow-a",
		ResourceAttributes: "deployment.environment=staging, service.name=ignored,team=a%20b"})
	require.NoError(t, err)
	require.ElementsMatch(t, []attribute.KeyValue{
		attribute.String("service.name", "order-workflow"),
		attribute.String("service.instance.id", "workflow-a"),
		attribute.String("service.namespace", Namespace),
		attribute.String("deployment.environment", "staging"),
		attribute.String("team", "a b"),
	}, attrs)
}

func TestTraceLogHandlerAddsTheSpansIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(TraceLogHandler(TraceLogHandler(slog.NewJSONHandler(&buf, nil)))).With("node", "api-a")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "request")
	defer span.End()

	log.InfoContext(ctx, "inside")
	log.Info("outside")
	var lines []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal(l, &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 2)
	require.Equal(t, span.SpanContext().TraceID().String(), lines[0][LogKeyTraceID])
	require.Equal(t, span.SpanContext().SpanID().String(), lines[0][LogKeySpanID])
	require.Equal(t, "api-a", lines[0]["node"])
	require.NotContains(t, lines[1], LogKeyTraceID, "a line logged outside a trace has no ids")
}

func TestRedisTraceHookSpansEachRoundTripInsideATrace(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := NewRegistry()
	opt, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	c := redis.NewClient(opt)
	defer c.Close()
	c.AddHook(JoinRedisHooks(nil, reg.RedisHook("events"), RedisTraceHook(tp, "events")))

	require.NoError(t, c.Set(ctx, "outside", "v", 0).Err(), "outside a trace: no span")
	require.Empty(t, rec.Ended())

	tctx, parent := tp.Tracer("t").Start(ctx, "turn")
	require.NoError(t, c.Set(tctx, "k", "v", 0).Err())
	require.ErrorIs(t, c.Get(tctx, "missing").Err(), redis.Nil)
	_, err = c.TxPipelined(tctx, func(p redis.Pipeliner) error {
		p.Incr(tctx, "n")
		p.Get(tctx, "k")
		return nil
	})
	require.NoError(t, err)
	require.Error(t, c.Do(tctx, "NOSUCHCOMMAND").Err())
	parent.End()

	var names []string
	for _, s := range rec.Ended() {
		if s.Name() == "turn" {
			continue
		}
		names = append(names, s.Name())
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "%s sits under the turn", s.Name())
		require.Equal(t, trace.SpanKindClient, s.SpanKind())
		switch s.Name() {
		case "GET":
			require.Equal(t, codes.Unset, s.Status().Code, "a missing key is an answer")
		case "NOSUCHCOMMAND":
			require.Equal(t, codes.Error, s.Status().Code)
		case "MULTI":
			require.Contains(t, s.Attributes(), attribute.StringSlice(AttrRedisCommands, []string{"MULTI", "INCR", "GET", "EXEC"}))
		}
		require.Contains(t, s.Attributes(), attribute.String(AttrStore, "events"))
	}
	require.Equal(t, []string{"SET", "GET", "MULTI", "NOSUCHCOMMAND"}, names, "one span per round trip, none for the handshake")

	// The metrics hook it was joined with still counts every round trip,
	// the one outside the trace included.
	got, err := Sum(reg.Gatherer(), MetricRedisRoundTrips, nil)
	require.NoError(t, err)
	require.Equal(t, 5.0, got)
	require.Nil(t, JoinRedisHooks(nil, nil))
	require.Nil(t, RedisTraceHook(nil, "events"))
}
