package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// scrape GETs /metrics as a scraper does and parses the text format.
func scrape(t *testing.T, base string) []*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + MetricsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	return out
}

func serve(t *testing.T, reg *Registry) string {
	t.Helper()
	srv, err := reg.Serve("127.0.0.1:0", nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
	})
	return "http://" + srv.Addr()
}

func TestMetricsListenerServesProcessAndGoCollectors(t *testing.T) {
	reg := NewRegistry()
	base := serve(t, reg)
	mfs := scrape(t, base)
	names := map[string]dto.MetricType{}
	for _, mf := range mfs {
		names[mf.GetName()] = mf.GetType()
	}
	for _, n := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} {
		require.Contains(t, names, n, "process collector")
	}
	require.Equal(t, dto.MetricType_COUNTER, names["process_cpu_seconds_total"])
	for _, n := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds"} {
		require.Contains(t, names, n, "Go collector")
	}
	require.Greater(t, sumFamilies(mfs, "process_resident_memory_bytes", nil), 0.0)

	// The handler counts its own scrapes: the second sees the first.
	again := scrape(t, base)
	require.Equal(t, 1.0, sumFamilies(again, "promhttp_metric_handler_requests_total", map[string]string{"code": "200"}))

	resp, err := http.Get(base + "/debug/pprof/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the metrics listener serves /metrics only")
}

// One store's known calls move its counters by exactly their round trips
// and commands, and leave the other store's alone.
func TestRedisHookCountsRoundTripsAndCommandsByStore(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := NewRegistry()
	base := serve(t, reg)
	opt, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	shared := redis.NewClient(opt)
	defer shared.Close()
	// Two stores on one connection pool, as the processes wire them.
	events := shared.WithTimeout(shared.Options().ReadTimeout)
	events.AddHook(reg.RedisHook("events"))
	readModel := shared.WithTimeout(shared.Options().ReadTimeout)
	readModel.AddHook(reg.RedisHook("readmodel"))

	before := scrape(t, base)
	ev := map[string]string{LabelStore: "events"}
	rm := map[string]string{LabelStore: "readmodel"}
	// The series exist, at 0, before the first call.
	require.Equal(t, 0.0, sumFamilies(before, MetricRedisRoundTrips, ev))

	require.NoError(t, events.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, "v", events.Get(ctx, "k").Val())
	require.ErrorIs(t, events.Get(ctx, "missing").Err(), redis.Nil)
	_, err = events.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "n")
		p.Incr(ctx, "n")
		p.Get(ctx, "k")
		return nil
	})
	require.NoError(t, err)
	// A script not yet cached costs EVALSHA (NOSCRIPT, a failed round
	// trip) then EVAL; the second run one EVALSHA.
	s := redis.NewScript(`return 1`)
	require.NoError(t, s.Run(ctx, events, nil).Err())
	require.NoError(t, s.Run(ctx, events, nil).Err())
	require.Error(t, events.Do(ctx, "NOSUCHCOMMAND").Err())
	_, err = readModel.HMGet(ctx, "h", "a", "b").Result()
	require.NoError(t, err)

	after := scrape(t, base)
	delta := func(name string, match map[string]string) float64 {
		return sumFamilies(after, name, match) - sumFamilies(before, name, match)
	}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	// set, get, get, pipeline, evalsha, eval, evalsha, nosuchcommand.
	require.Equal(t, 8.0, delta(MetricRedisRoundTrips, ev))
	require.Equal(t, 8.0, delta(MetricRedisRoundTripDuration, ev), "one latency observation per round trip")
	require.Equal(t, 1.0, delta(MetricRedisPipelines, ev))
	require.Equal(t, 2.0, delta(MetricRedisRoundTripErrors, ev), "NOSCRIPT and the unknown command; redis.Nil is an answer")
	require.Equal(t, 10.0, delta(MetricRedisCommands, ev))
	for cmd, n := range map[string]float64{"set": 1, "get": 3, "incr": 2, "evalsha": 2, "eval": 1, "nosuchcommand": 1} {
		require.Equal(t, n, delta(MetricRedisCommands, with(ev, "command", cmd)), cmd)
	}
	// The connection handshake went through the hooks and is not counted.
	require.Zero(t, sumFamilies(after, MetricRedisCommands, map[string]string{"command": "hello"}))
	require.Zero(t, sumFamilies(after, MetricRedisCommands, map[string]string{"command": "client"}))

	require.Equal(t, 1.0, delta(MetricRedisRoundTrips, rm))
	require.Equal(t, 1.0, delta(MetricRedisCommands, with(rm, "command", "hmget")))
	require.Equal(t, 0.0, delta(MetricRedisPipelines, rm))

	// In-process readers see the same figures as the scrape.
	got, err := Sum(reg.Gatherer(), MetricRedisRoundTrips, nil)
	require.NoError(t, err)
	require.Equal(t, 9.0, got)
}

func TestNilRegistryCountsNowhere(t *testing.T) {
	var reg *Registry
	require.Nil(t, reg.RedisHook("events"))
	c := reg.Factory().NewCounter(prometheus.CounterOpts{Name: "nil_registry_total", Help: "test"})
	c.Inc()
	_, err := reg.Serve("127.0.0.1:0", nil)
	require.Error(t, err)
}

func TestPprofServesIndexAndNamedProfiles(t *testing.T) {
	h := Pprof()
	for _, p := range []string{PprofPrefix, PprofPrefix + "cmdline", PprofPrefix + "goroutine?debug=1", PprofPrefix + "heap"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, nil))
		require.Equal(t, http.StatusOK, w.Code, p)
		_, _ = io.Copy(io.Discard, w.Body)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, PprofPrefix+"goroutine?debug=1", nil))
	require.Contains(t, w.Body.String(), "goroutine")
}
