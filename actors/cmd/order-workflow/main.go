// Command order-workflow runs an OrderWorkflow process: a member of the
// shoppingmall.workflow cluster hosting the order grains
// (shoppingmall.order-workflow).
//
//	order-workflow -node workflow-a -redis redis://127.0.0.1:6390/0 \
//	    -provider automanaged -automanaged-port 6333 -seeds 127.0.0.1:6331,...
//
// Every flag can also be set from the environment as SHOPPINGMALL_<FLAG>
// (upper case, '-' as '_'); a flag on the command line wins. Evidence lines
// go to stdout, logs to stderr. SIGTERM (or SIGINT) drains: live orders
// are relocated to another member (or closed when none is left) before the
// process leaves the cluster and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "order-workflow:", err)
		os.Exit(1)
	}
}

type options struct {
	statsFile                                         string
	node                                              string
	redis, redisEvents, redisReadModel, redisCommerce string
	redisLocation, redisRelocation                    string
	provider, bind, advertisedHost, seeds             string
	logFormat, logLevel                               string
	port, automanagedPort                             int
	fixtures                                          bool
	idleTimeout, requestTimeout, refresh, drain       time.Duration
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("order-workflow", flag.ContinueOnError)
	fs.StringVar(&o.node, "node", "workflow-a", "node name (workflow-a, workflow-b)")
	fs.StringVar(&o.redis, "redis", "redis://127.0.0.1:6390/0", "default Redis URL for every store")
	fs.StringVar(&o.redisEvents, "redis-events", "", "OrderEventStore Redis URL (default -redis)")
	fs.StringVar(&o.redisReadModel, "redis-readmodel", "", "OrderReadModelStore Redis URL (default -redis)")
	fs.StringVar(&o.redisCommerce, "redis-commerce", "", "CommerceStateStore Redis URL (default -redis)")
	fs.StringVar(&o.redisLocation, "redis-location", "", "Location Store Redis URL (default -redis)")
	fs.StringVar(&o.redisRelocation, "redis-relocation", "", "Relocation Store Redis URL (default -redis)")
	fs.StringVar(&o.provider, "provider", "automanaged", "membership provider: automanaged or k8s (built with -tags k8s)")
	fs.StringVar(&o.bind, "bind", "127.0.0.1", "cluster remote bind host")
	fs.StringVar(&o.advertisedHost, "advertised-host", "", "cluster address other members dial (default bind:port)")
	fs.IntVar(&o.port, "port", 0, "cluster remote port (0 picks one)")
	fs.IntVar(&o.automanagedPort, "automanaged-port", 6333, "this member's automanaged port")
	fs.StringVar(&o.seeds, "seeds", "127.0.0.1:6331,127.0.0.1:6332,127.0.0.1:6333,127.0.0.1:6334", "every member's host:automanaged-port")
	fs.DurationVar(&o.refresh, "refresh", 500*time.Millisecond, "membership refresh interval")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, "passivate an order idle this long (0 never)")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "default grain call timeout")
	fs.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "bound of the graceful drain")
	fs.BoolVar(&o.fixtures, "fixtures", false, "enable the runner's interrupt fixtures (never in production)")
	fs.StringVar(&o.statsFile, "stats-file", "", "write Redis round trips and CPU seconds as JSON to this file on SIGUSR1 and at exit ({node} = node name)")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format on stderr: json or text")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := envDefaults(fs); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.provider == string(cluster.ProviderTest) {
		return o, errors.New("-provider test works only inside one process; use automanaged")
	}
	return o, nil
}

// envDefaults sets every flag not given on the command line from
// SHOPPINGMALL_<NAME>, if present.
func envDefaults(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		key := "SHOPPINGMALL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(key); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", key, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func newLogger(format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want json or text", format)
}

func splitSeeds(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	log, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	log = log.With("node", o.node)
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	stats := node.StartStats(o.statsFile, o.node, log)
	defer stats.Close()

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stores, err := node.OpenStores(startCtx, node.RedisURLs{
		Default: o.redis, Events: o.redisEvents, ReadModel: o.redisReadModel, Commerce: o.redisCommerce,
		Location: o.redisLocation, Relocation: o.redisRelocation,
	}, node.StoreOptions{Hook: stats.Hook()})
	if err != nil {
		return err
	}
	defer stores.Close()

	w, err := node.StartWorkflow(startCtx, node.WorkflowConfig{
		Cluster: cluster.Config{
			NodeName: o.node, Host: o.bind, Port: o.port, AdvertisedHost: o.advertisedHost,
			Provider: cluster.Provider(o.provider), AutomanagedPort: o.automanagedPort,
			Seeds: splitSeeds(o.seeds), RefreshTTL: o.refresh, RequestTimeout: o.requestTimeout,
			Logger: log,
		},
		Stores:      stores,
		IdleTimeout: o.idleTimeout,
		Fixtures:    o.fixtures,
		Evidence:    os.Stdout,
		Logger:      log,
	})
	if err != nil {
		return err
	}
	log.Info("order-workflow started", "member", w.Member.ID(), "address", w.Member.Address(),
		"fixtures", o.fixtures, "idleTimeout", o.idleTimeout.String())

	<-ctx.Done()
	log.Info("draining")
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), o.drain)
	defer cancelDrain()
	if err := w.Drain(drainCtx); err != nil {
		// Orders not handed off stay Ready at this member and become
		// Unavailable; an operator resolves them.
		log.Warn("drain incomplete", "error", err)
	}
	log.Info("stopped")
	return nil
}
