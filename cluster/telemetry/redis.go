package telemetry

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
)

// The Redis metrics' full names; their label is "store" (and "command"
// for MetricRedisCommands).
const (
	// MetricRedisCommands counts commands sent, pipelined ones included,
	// by store and lower-case command name.
	MetricRedisCommands = Namespace + "_redis_commands_total"
	// MetricRedisRoundTrips counts round trips: one per single command,
	// one per pipeline or transaction however many commands it carries.
	MetricRedisRoundTrips = Namespace + "_redis_round_trips_total"
	// MetricRedisPipelines counts the round trips that were pipelines or
	// transactions.
	MetricRedisPipelines = Namespace + "_redis_pipelines_total"
	// MetricRedisRoundTripErrors counts round trips that failed (a
	// missing key, redis.Nil, is an answer, not a failure).
	MetricRedisRoundTripErrors = Namespace + "_redis_round_trip_errors_total"
	// MetricRedisRoundTripDuration is the client-side latency of one
	// round trip: a single command, or a whole pipeline.
	MetricRedisRoundTripDuration = Namespace + "_redis_round_trip_duration_seconds"
	// MetricRedisReplicaShortfalls counts writes refused because fewer
	// replicas than -redis-wait-replicas confirmed them in time (WAIT):
	// each answered 503 STORE_UNAVAILABLE, in doubt. A steady rate means
	// the deployment has fewer live replicas than the writes wait for.
	MetricRedisReplicaShortfalls = Namespace + "_redis_replica_shortfalls_total"
)

// LabelStore names the store a Redis metric's client serves.
const LabelStore = "store"

// redisBuckets span a local Redis' tens of microseconds up to the
// seconds of a Redis that loads or stalls.
var redisBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

type redisMetrics struct {
	commands   *prometheus.CounterVec
	roundTrips *prometheus.CounterVec
	pipelines  *prometheus.CounterVec
	errors     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	shortfalls prometheus.Counter
}

func newRedisMetrics(f promauto.Factory) *redisMetrics {
	return &redisMetrics{
		commands: f.NewCounterVec(prometheus.CounterOpts{Name: MetricRedisCommands,
			Help: "Redis commands sent by the store's client, pipelined ones included, by lower-case command name."},
			[]string{LabelStore, "command"}),
		roundTrips: f.NewCounterVec(prometheus.CounterOpts{Name: MetricRedisRoundTrips,
			Help: "Redis round trips of the store's client: one per single command, one per pipeline or transaction."},
			[]string{LabelStore}),
		pipelines: f.NewCounterVec(prometheus.CounterOpts{Name: MetricRedisPipelines,
			Help: "Redis round trips of the store's client that carried a pipeline or transaction."},
			[]string{LabelStore}),
		errors: f.NewCounterVec(prometheus.CounterOpts{Name: MetricRedisRoundTripErrors,
			Help: "Redis round trips of the store's client that failed (redis.Nil, a missing key, is not a failure)."},
			[]string{LabelStore}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: MetricRedisRoundTripDuration,
			Help: "Client-side latency of one Redis round trip of the store's client (a single command or a whole pipeline).", Buckets: redisBuckets},
			[]string{LabelStore}),
		shortfalls: f.NewCounter(prometheus.CounterOpts{Name: MetricRedisReplicaShortfalls,
			Help: "Writes refused (503 STORE_UNAVAILABLE, in doubt) because fewer replicas than -redis-wait-replicas confirmed them within the wait timeout."}),
	}
}

// ReplicaShortfalls is the count of MetricRedisReplicaShortfalls, for
// redisurl.Replication.Shortfalls; nil on a nil Registry.
func (r *Registry) ReplicaShortfalls() func() {
	if r == nil {
		return nil
	}
	return r.redis.shortfalls.Inc
}

// RedisHook returns a go-redis hook that records the round trips of one
// store's client under store (e.g. "events"); nil on a nil Registry.
// Give each store a client of its own (go-redis' WithTimeout clones share
// one connection pool) so that the label says which store paid.
//
// The connection handshake go-redis sends through the hooks on every new
// pooled connection (HELLO, AUTH, SELECT, CLIENT SETINFO) is a cost of
// the pool, not of the store's calls, and is left out. A Script.Run that
// finds no cached script sends EVALSHA and then EVAL: both count, as
// both crossed the network.
func (r *Registry) RedisHook(store string) redis.Hook {
	if r == nil {
		return nil
	}
	m := r.redis
	return &redisHook{
		commands:   m.commands.MustCurryWith(prometheus.Labels{LabelStore: store}),
		roundTrips: m.roundTrips.WithLabelValues(store),
		pipelines:  m.pipelines.WithLabelValues(store),
		errors:     m.errors.WithLabelValues(store),
		duration:   m.duration.WithLabelValues(store),
	}
}

type redisHook struct {
	commands                      *prometheus.CounterVec
	roundTrips, pipelines, errors prometheus.Counter
	duration                      prometheus.Observer
	// byName caches commands' child per command name: the hook runs on
	// every command, and a label lookup hashes the labels each time.
	byName sync.Map // string → prometheus.Counter
}

var _ redis.Hook = (*redisHook)(nil)

// setupCommands are the commands go-redis sends when it opens a
// connection; the stores never send them themselves.
var setupCommands = map[string]bool{"hello": true, "auth": true, "select": true, "client": true}

func isSetup(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if !isSetupName(c.Name()) {
			return false
		}
	}
	return len(cmds) > 0
}

func isSetupName(name string) bool { return setupCommands[strings.ToLower(name)] }

// DialHook implements redis.Hook; a dial is a connection, not a round
// trip.
func (h *redisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook: one round trip per command, counted
// whether or not it succeeds.
func (h *redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isSetupName(cmd.Name()) {
			return next(ctx, cmd)
		}
		h.command(cmd)
		t0 := time.Now()
		err := next(ctx, cmd)
		h.done(t0, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: one round trip per pipeline
// or transaction, each of its commands counted by name.
func (h *redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isSetup(cmds) {
			return next(ctx, cmds)
		}
		h.pipelines.Inc()
		for _, c := range cmds {
			h.command(c)
		}
		t0 := time.Now()
		err := next(ctx, cmds)
		h.done(t0, err)
		return err
	}
}

func (h *redisHook) command(c redis.Cmder) {
	name := c.Name()
	if ctr, ok := h.byName.Load(name); ok {
		ctr.(prometheus.Counter).Inc()
		return
	}
	// go-redis names commands in lower case already; ToLower keeps the
	// label stable for a command built from raw arguments.
	ctr := h.commands.WithLabelValues(strings.ToLower(name))
	h.byName.Store(name, ctr)
	ctr.Inc()
}

func (h *redisHook) done(t0 time.Time, err error) {
	h.duration.Observe(time.Since(t0).Seconds())
	h.roundTrips.Inc()
	if err != nil && !errors.Is(err, redis.Nil) {
		h.errors.Inc()
	}
}
