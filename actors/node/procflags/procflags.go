// Package procflags binds the flags every ShoppingMall process shares —
// node name, store Redis URLs, cluster membership, logging, metrics — and
// their SHOPPINGMALL_<FLAG> environment defaults, and reads the standard
// OpenTelemetry variables that turn trace export on (tracing.go). Only
// mains import it: it reads the flag set and environment a main hands it,
// and no library package may depend on it.
package procflags

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
)

// Common holds the shared flags' values after Parse.
type Common struct {
	Node            string
	Redis           node.RedisURLs
	Provider        string
	Bind            string
	AdvertisedHost  string
	Port            int
	AutomanagedPort int
	Seeds           string
	Refresh         time.Duration
	// MetricsHTTP is the Prometheus /metrics listener's address, or
	// telemetry.MetricsOff.
	MetricsHTTP string
	LogFormat   string
	LogLevel    string
	// ClusterTLS is the cluster link's mutual TLS (PEM files); empty is
	// plain text.
	ClusterTLS cluster.TLS
	// StockLedgerMax is commerce.Config.LedgerMaxLen.
	StockLedgerMax int64
	// IdempotencyLegacyRead is !commerce.Config.SkipLegacyIdempotency.
	IdempotencyLegacyRead bool
	// RequireDurableStore refuses to start on a Redis master that would
	// lose acknowledged writes, and turns the process unready when one
	// appears later (node.WaitConfig.RequireDurable, node.WatchDurable).
	RequireDurableStore bool
	// RedisWaitReplicas and RedisWaitTimeout are redisurl.Replication: how
	// many replicas must hold a write before it is acknowledged.
	RedisWaitReplicas int
	RedisWaitTimeout  time.Duration
	// Archive is the PostgreSQL URL of the archive, the event store's
	// cold tier (eventstore/archive); empty runs without one.
	Archive string
	// IndexFinished is node.StoreOptions.IndexFinished: the workflow
	// member's main sets it with a retention above 0, before Open.
	IndexFinished bool
	// Fixtures builds the fixture store (node.StoreOptions.Fixtures). No
	// shared flag sets it: each main sets it from its own runner-only
	// flag (a workflow's -fixtures, an API's -self-check) before Open.
	Fixtures bool
	// service is the process kind (the flag set's name): the traces'
	// default service.name.
	service string
	// meter is the process's OpenTelemetry meter provider once Open set
	// it up; Cluster hands it to the member for protoactor's metrics.
	meter metric.MeterProvider
}

// Register adds the shared flags to fs with this process kind's defaults.
func (c *Common) Register(fs *flag.FlagSet, defaultNode string, defaultAutomanagedPort int) {
	c.service = fs.Name()
	fs.StringVar(&c.Node, "node", defaultNode, "node name (api-a, api-b, workflow-a, workflow-b)")
	fs.StringVar(&c.Redis.Default, "redis", "redis://127.0.0.1:6390/0", "default Redis URL for every store")
	fs.StringVar(&c.Redis.Events, "redis-events", "", "OrderEventStore Redis URL (default -redis)")
	fs.StringVar(&c.Redis.ReadModel, "redis-readmodel", "", "OrderReadModelStore Redis URL (default -redis)")
	fs.StringVar(&c.Redis.Commerce, "redis-commerce", "", "CommerceStateStore Redis URL (default -redis)")
	fs.StringVar(&c.Redis.Location, "redis-location", "", "Location Store Redis URL (default -redis)")
	fs.StringVar(&c.Redis.Relocation, "redis-relocation", "", "Relocation Store Redis URL (default -redis)")
	fs.StringVar(&c.Provider, "provider", string(cluster.ProviderAutomanaged), "membership provider: automanaged or k8s (built with -tags k8s)")
	fs.StringVar(&c.Bind, "bind", "127.0.0.1", "cluster remote bind host")
	fs.StringVar(&c.AdvertisedHost, "advertised-host", "", "cluster address other members dial (default bind:port)")
	fs.IntVar(&c.Port, "port", 0, "cluster remote port (0 picks one)")
	fs.IntVar(&c.AutomanagedPort, "automanaged-port", defaultAutomanagedPort, "this member's automanaged port")
	fs.StringVar(&c.Seeds, "seeds", "127.0.0.1:6331,127.0.0.1:6332,127.0.0.1:6333,127.0.0.1:6334", "every member's host:automanaged-port")
	fs.DurationVar(&c.Refresh, "refresh", 500*time.Millisecond, "membership refresh interval (bounds how fast a killed member is seen to leave)")
	fs.StringVar(&c.ClusterTLS.CertFile, "cluster-tls-cert", "", "cluster link mutual TLS: this member's certificate (PEM; serverAuth and clientAuth, a SAN for the advertised host)")
	fs.StringVar(&c.ClusterTLS.KeyFile, "cluster-tls-key", "", "cluster link mutual TLS: the certificate's private key (PEM)")
	fs.StringVar(&c.ClusterTLS.CAFile, "cluster-tls-ca", "", "cluster link mutual TLS: the CA every member's certificate must chain to (PEM)")
	fs.StringVar(&c.MetricsHTTP, "metrics-http", telemetry.DefaultMetricsAddr, "Prometheus /metrics listener, unauthenticated: keep it on loopback or a private network; port 0 picks one (logged as metrics); \"off\" serves none")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format on stderr: json or text")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&c.RequireDurableStore, "require-durable-store", false, "refuse to start when a store's Redis master runs without the append-only file, with appendfsync no, or with an eviction policy other than noeviction; checked again every 10s while running (unready when it fails)")
	fs.IntVar(&c.RedisWaitReplicas, "redis-wait-replicas", 0, "replicas of each store's Redis that must hold a write (WAIT) before it is acknowledged; fewer in time is 503 STORE_UNAVAILABLE and the step retries; 0 sends no WAIT")
	fs.DurationVar(&c.RedisWaitTimeout, "redis-wait-timeout", time.Second, "how long one WAIT for -redis-wait-replicas may take")
	fs.BoolVar(&c.IdempotencyLegacyRead, "idempotency-legacy-read", true, "read an idempotency key's mapping in the layout before it moved under its order's tag (sm:cs:idem:{<key>}) when the new one is missing: one command more per new start; set false once every order started before that layout is terminal and past its clients' retries")
	fs.StringVar(&c.Archive, "archive", "", "PostgreSQL URL (postgres://user@host:port/db) of the archive, the event store's cold tier (docs/archive.md): checked at start, its schema migrated; a process that cannot open it refuses to start; empty runs without one")
	fs.Int64Var(&c.StockLedgerMax, "stock-ledger-max", 0, "movements kept per SKU in the stock ledger, about (older ones are trimmed as new ones are appended); 0 = 10000, negative = keep every movement")
}

// Parse parses args, then fills every flag not given on the command line
// from SHOPPINGMALL_<FLAG> (upper case, '-' as '_'): the command line wins.
func (c *Common) Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := envDefaults(fs, os.LookupEnv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.Provider == string(cluster.ProviderTest) {
		return errors.New("-provider test works only inside one process; use automanaged")
	}
	if err := c.Replication().Validate(); err != nil {
		return err
	}
	if t := c.ClusterTLS; t.Enabled() && (t.CertFile == "" || t.KeyFile == "" || t.CAFile == "") {
		return errors.New("-cluster-tls-cert, -cluster-tls-key and -cluster-tls-ca go together")
	}
	return nil
}

func envDefaults(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		key := "SHOPPINGMALL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(key); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", key, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// Logger returns the process's slog logger on stderr, tagged with the
// node name. Evidence lines never go through it.
func (c *Common) Logger() (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler
	switch c.LogFormat {
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	default:
		return nil, fmt.Errorf("-log-format %q: want json or text", c.LogFormat)
	}
	// Lines logged with a context inside a trace carry its ids.
	return slog.New(telemetry.TraceLogHandler(h)).With("node", c.Node), nil
}

// Cluster returns the membership part of the process's configuration;
// after Open it turns protoactor's actor metrics on, served with the
// process's registry.
func (c *Common) Cluster(log *slog.Logger) cluster.Config {
	var seeds []string
	for _, p := range strings.Split(c.Seeds, ",") {
		if p = strings.TrimSpace(p); p != "" {
			seeds = append(seeds, p)
		}
	}
	return cluster.Config{
		NodeName: c.Node, Host: c.Bind, Port: c.Port, AdvertisedHost: c.AdvertisedHost,
		Provider: cluster.Provider(c.Provider), AutomanagedPort: c.AutomanagedPort,
		Seeds: seeds, RefreshTTL: c.Refresh, TLS: c.ClusterTLS, Logger: log,
		MeterProvider: c.meter,
	}
}

// Replication is the stores' write acknowledgement from
// -redis-wait-replicas and -redis-wait-timeout. It is configured, never
// detected: a replica that happens to be down at start-up must not turn
// the guarantee off.
func (c *Common) Replication() redisurl.Replication {
	return redisurl.Replication{Replicas: c.RedisWaitReplicas, Timeout: c.RedisWaitTimeout}
}

// EnvDefaults fills every flag of fs not given on the command line from
// SHOPPINGMALL_<FLAG>, for flag sets beyond Common (e.g. subcommands).
func EnvDefaults(fs *flag.FlagSet) error { return envDefaults(fs, os.LookupEnv) }

// Process is what every process opens before it joins the cluster: its
// logger (also slog's default), its metrics registry and listener, and
// the stores.
type Process struct {
	Log *slog.Logger
	// Metrics is the process's registry: every part that measures
	// something registers with it, and -metrics-http serves it.
	Metrics *telemetry.Registry
	// Tracing is the process's tracer provider (Tracing.Provider), which
	// exports over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and is the no-op
	// provider otherwise (tracing.go).
	Tracing *telemetry.Tracing
	Stores  *node.Stores
	// Archive is the open archive after WaitStores, nil without -archive.
	Archive *archive.Postgres
	metrics *telemetry.Server
	// requireDurable is Common.RequireDurableStore.
	requireDurable bool
	// archiveURL is Common.Archive.
	archiveURL string
}

// Open sets up the logger and the metrics registry, starts the metrics
// listener (unless -metrics-http is off) and builds the store clients,
// each store's Redis calls counted under its own label. It does not
// contact Redis: a process may start before its Redis answers, and waits
// for it with node.WaitStores once its probes listen. A taken metrics
// address fails here. Close undoes it.
func (c *Common) Open() (*Process, error) {
	log, err := c.Logger()
	if err != nil {
		return nil, err
	}
	slog.SetDefault(log)
	otelErrors(log)
	reg := telemetry.NewRegistry()
	// protoactor reports its actor metrics to the global meter provider,
	// which must be this one before the member starts (cluster.Config's
	// MeterProvider says why). Its reader is the registry's scrape: there
	// is nothing to flush at Close.
	meter, err := reg.MeterProvider()
	if err != nil {
		return nil, err
	}
	otel.SetMeterProvider(meter)
	c.meter = meter
	tr, err := c.openTracing(os.LookupEnv, log)
	if err != nil {
		return nil, err
	}
	rep := c.Replication()
	rep.Shortfalls = reg.ReplicaShortfalls()
	stores, err := node.NewStores(c.Redis, node.StoreOptions{StoreHook: storeHook(reg, tr), StockLedgerMax: c.StockLedgerMax,
		SkipLegacyIdempotency: !c.IdempotencyLegacyRead, Replication: rep, Fixtures: c.Fixtures, IndexFinished: c.IndexFinished})
	if err != nil {
		return nil, err
	}
	p := &Process{Log: log, Metrics: reg, Tracing: tr, Stores: stores, requireDurable: c.RequireDurableStore, archiveURL: c.Archive}
	if c.MetricsHTTP != telemetry.MetricsOff {
		if p.metrics, err = reg.Serve(c.MetricsHTTP, log); err != nil {
			stores.Close()
			return nil, err
		}
		log.Info("metrics listening", "metrics", p.metrics.Addr())
	}
	return p, nil
}

// MetricsAddr is the metrics listener's bound address; "" when off.
func (p *Process) MetricsAddr() string {
	if p.metrics == nil {
		return ""
	}
	return p.metrics.Addr()
}

// WaitStores waits, logging, until every store answers or ctx ends. With
// -require-durable-store it refuses an unsafe master (an error wrapping
// node.ErrUnsafeStore) and, once the stores pass, keeps checking them
// until ctx ends, reporting the verdict as ready's "durable" condition.
// With -archive it then opens the archive, which it refuses (an error
// wrapping the archive's) when that fails.
func (p *Process) WaitStores(ctx context.Context, ready *node.Readiness) error {
	err := node.WaitStores(ctx, p.Stores, node.WaitConfig{Logger: p.Log, RequireDurable: p.requireDurable})
	if err != nil {
		return err
	}
	if err := p.openArchive(ctx); err != nil {
		return err
	}
	if !p.requireDurable {
		return nil
	}
	p.Log.Info("every store's Redis master keeps acknowledged writes (append-only file on, noeviction)")
	ready.WatchDurable(node.WatchDurable(ctx, p.Stores, node.DurableWatchConfig{Logger: p.Log}))
	return nil
}

// openArchive opens -archive, once: an archive that cannot be reached, or
// whose schema this build cannot bring to its own, is a configuration to
// fix, not an outage to wait out, so the process refuses to start.
func (p *Process) openArchive(ctx context.Context) error {
	if p.archiveURL == "" {
		return nil
	}
	a, err := archive.Open(ctx, archive.Config{URL: p.archiveURL})
	if err != nil {
		return fmt.Errorf("refusing to start: -archive: %w", err)
	}
	p.Archive = a
	p.Log.Info("archive open", slog.Int64("schemaVersion", archive.SchemaVersion()))
	return nil
}

// Close closes the stores, exports the spans still buffered (for up to 5
// s), then closes the metrics listener: it is the last thing to go, so a
// scrape during a drain still answers.
func (p *Process) Close() {
	p.Stores.Close()
	if p.Archive != nil {
		p.Archive.Close()
	}
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), 5*time.Second)
	if err := p.Tracing.Shutdown(flushCtx); err != nil {
		p.Log.Warn("exporting the last spans failed", slog.Any("error", err))
	}
	cancelFlush()
	if p.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.metrics.Shutdown(ctx)
	}
}
