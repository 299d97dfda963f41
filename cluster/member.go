// Package cluster owns joining the protoactor-go cluster
// shoppingmall.workflow: the membership provider chosen by configuration
// (the automanaged one's health endpoint bound to the member's host), the
// cluster link's optional mutual TLS, the Redis Location Store lookup and
// our cluster context. Its subpackages
// own the Location Store (location) and the Relocation Store (relocation).
//
// It knows nothing of orders or HTTP; it must not import actors/..., edge,
// eventstore or readmodel.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/remote"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// Name is the cluster every ShoppingMall process joins (spec: the
// RouteMesh shoppingmall.workflow).
const Name = "shoppingmall.workflow"

// remoteWindow is the fixed HTTP/2 flow-control window, per stream and per
// connection, of the members' gRPC links. A fixed window turns off
// grpc-go's bandwidth-delay estimation, which otherwise answers a burst
// of received data with a PING and its ACK: on a link of small request
// and reply messages that is an extra write and an extra wakeup on both
// members about once per request, for a window this traffic never fills.
// 1 MiB is far more than members have in flight to each other.
const remoteWindow = 1 << 20

// Provider names a membership provider.
type Provider string

const (
	// ProviderAutomanaged: protoactor's automanaged provider, for a local
	// cluster of processes that know each other's automanaged ports.
	ProviderAutomanaged Provider = "automanaged"
	// ProviderTest: the in-memory test agent, for several members in one
	// process.
	ProviderTest Provider = "test"
	// ProviderK8s: Kubernetes, compiled in with the k8s build tag.
	ProviderK8s Provider = "k8s"
)

// ErrConfig: the configuration cannot start a member.
var ErrConfig = errors.New("cluster: invalid configuration")

// Config configures one member.
type Config struct {
	// NodeName is the operator-facing name (api-a, workflow-b). Ownership
	// is recorded by member id, which is new at every start.
	NodeName string
	// Host and Port are the remote (gRPC) bind address; Port 0 picks one.
	Host string
	Port int
	// AdvertisedHost, if set, is the address other members dial.
	AdvertisedHost string
	// TLS, if set, makes the remote link mutual TLS: only members holding
	// a certificate from its CA can connect.
	TLS TLS

	Provider Provider
	// AutomanagedPort is this member's automanaged HTTP port; Seeds are
	// every member's host:automanagedPort.
	AutomanagedPort int
	Seeds           []string
	// RefreshTTL is the automanaged/test provider refresh interval: it
	// bounds how fast a killed member is seen to leave.
	RefreshTTL time.Duration
	// TestAgent is the shared in-memory agent for ProviderTest.
	TestAgent *test.InMemAgent

	// Kinds hosted here; none for an API member.
	Kinds []*pcluster.Kind
	// Schema is the newest event schema the hosted kinds read, advertised
	// with the node name (placement.Config.Schema); 0 for an API member.
	Schema int
	// StateSchema is placement.Config.StateSchema: the highest event
	// schema an identity's state holds, so that activations in a cluster
	// of mixed builds go only to members that read it; nil: by trial.
	StateSchema func(ctx context.Context, kind, id string) (int, error)
	// Location is the Location Store.
	Location location.Store
	// RequestTimeout is the default grain call timeout.
	RequestTimeout time.Duration
	// OnMemberJoined and OnMemberLeft observe topology passively
	// (readiness evidence). They run under protoactor's member-list lock:
	// they must return at once.
	OnMemberJoined func(memberID, address string, kinds []string)
	OnMemberLeft   func(memberID, address string)
	Logger         *slog.Logger
	// Metrics is the process's registry: the member's placement registers
	// its activator's metrics with it. Nil counts them nowhere.
	Metrics *telemetry.Registry
	// MeterProvider, if set, turns protoactor's actor metrics on
	// (protoactor_actor_..., protoactor_futures_..., deadletters). It must
	// be OpenTelemetry's global provider, set before Start (procflags
	// does): protoactor reports to the global meter whatever it is given,
	// and registers a callback there for every actor it spawns, which
	// otel's default global provider keeps forever (see actorMetrics).
	MeterProvider metric.MeterProvider
	// TracerProvider is the process's tracer provider: the client span of
	// every grain call made through this member's lookup. nil uses the
	// global provider (no-op unless a main set one).
	TracerProvider trace.TracerProvider
	// Limits bound what this member hosts (placement.Limits); the zero
	// value takes placement.DefaultLimits. Only a member with Kinds hosts.
	Limits placement.Limits
	// FrameworkLogLevel filters protoactor's own logs; nil means Warn.
	// A Leveler, not a Level, so that Info (the zero Level) can be chosen.
	FrameworkLogLevel slog.Leveler
}

func (c Config) frameworkLevel() slog.Level {
	if c.FrameworkLogLevel == nil {
		return slog.LevelWarn
	}
	return c.FrameworkLogLevel.Level()
}

// Member is a started cluster member.
type Member struct {
	Cluster  *pcluster.Cluster
	Lookup   *placement.Lookup
	System   *actor.ActorSystem
	provider pcluster.ClusterProvider
	cfg      Config
}

// Start joins the cluster and waits until this member sees itself in the
// topology.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Location == nil || cfg.NodeName == "" {
		return nil, fmt.Errorf("%w: NodeName and Location are required", ErrConfig)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.RefreshTTL == 0 {
		cfg.RefreshTTL = 500 * time.Millisecond
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	metricsOpt, err := actorMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	ropts := []remote.ConfigOption{}
	if cfg.AdvertisedHost != "" {
		ropts = append(ropts, remote.WithAdvertisedHost(cfg.AdvertisedHost))
	}
	server := []grpc.ServerOption{grpc.InitialWindowSize(remoteWindow), grpc.InitialConnWindowSize(remoteWindow)}
	dial := []grpc.DialOption{grpc.WithInitialWindowSize(remoteWindow), grpc.WithInitialConnWindowSize(remoteWindow)}
	if cfg.TLS.Enabled() {
		sc, dc, err := cfg.TLS.transport(dialHost(cfg))
		if err != nil {
			return nil, err
		}
		server, dial = append(server, sc), append(dial, dc)
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	// Both replace protoactor's defaults (insecure dialling, no server
	// options).
	ropts = append(ropts, remote.WithServerOptions(server...), remote.WithDialOptions(dial...))
	provider, health, err := newProvider(cfg)
	if err != nil {
		return nil, err
	}
	fw := cfg.Logger.Handler()
	sysOpts := []actor.ConfigOption{actor.WithLoggerFactory(func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(levelHandler{min: cfg.frameworkLevel(), Handler: fw}).With("lib", "protoactor")
	})}
	system := actor.NewActorSystem(append(sysOpts, metricsOpt...)...)
	lookup := placement.New(placement.Config{Store: cfg.Location, NodeName: cfg.NodeName, Schema: cfg.Schema, StateSchema: cfg.StateSchema, Logger: cfg.Logger, Metrics: cfg.Metrics,
		TracerProvider: cfg.TracerProvider, Limits: cfg.Limits})
	if cfg.OnMemberJoined != nil {
		lookup.OnMemberJoined(cfg.OnMemberJoined)
	}
	if cfg.OnMemberLeft != nil {
		lookup.OnMemberLeft(cfg.OnMemberLeft)
	}
	rc := remote.Configure(cfg.Host, cfg.Port, ropts...)
	pc := pcluster.Configure(Name, provider, lookup, rc,
		pcluster.WithKinds(cfg.Kinds...),
		pcluster.WithRequestTimeout(cfg.RequestTimeout),
		pcluster.WithClusterContextProducer(placement.ContextProducer(lookup)),
	)
	c := pcluster.New(system, pc)
	if health != nil {
		health.serve(c)
	}
	c.StartMember()
	m := &Member{Cluster: c, Lookup: lookup, System: system, provider: provider, cfg: cfg}
	if err := lookup.WaitReady(ctx); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// newProvider returns the membership provider and, for automanaged, the
// health server it will run, already bound to Host.
func newProvider(cfg Config) (pcluster.ClusterProvider, *healthServer, error) {
	switch cfg.Provider {
	case ProviderTest:
		if cfg.TestAgent == nil {
			return nil, nil, fmt.Errorf("%w: the test provider needs TestAgent", ErrConfig)
		}
		return test.NewTestProvider(cfg.TestAgent, test.WithTestProviderRefreshTtl(cfg.RefreshTTL)), nil, nil
	case ProviderAutomanaged, "":
		if cfg.AutomanagedPort == 0 || len(cfg.Seeds) == 0 {
			return nil, nil, fmt.Errorf("%w: automanaged needs AutomanagedPort and Seeds", ErrConfig)
		}
		h, err := bindHealth(cfg.Host, cfg.AutomanagedPort)
		if err != nil {
			return nil, nil, err
		}
		return automanaged.NewWithTesting(cfg.RefreshTTL, cfg.AutomanagedPort, h.echo, cfg.Seeds...), h, nil
	case ProviderK8s:
		p, err := newK8sProvider(cfg)
		return p, nil, err
	default:
		return nil, nil, fmt.Errorf("%w: unknown provider %q", ErrConfig, cfg.Provider)
	}
}

// Address returns the member's remote address.
func (m *Member) Address() string { return m.System.Address() }

// ID returns the member id of this incarnation.
func (m *Member) ID() string { return m.System.ID }

// Stop leaves the cluster gracefully. Grains still hosted become
// Unavailable (their records stay Ready): drain them first.
func (m *Member) Stop() {
	m.Cluster.Shutdown(true)
}

// Crash ends the member without leaving: it is deregistered from the test
// provider and its remoting stops, as if the process had been killed. Only
// for in-process tests.
func (m *Member) Crash() {
	if m.cfg.Provider == ProviderTest && m.cfg.TestAgent != nil {
		m.cfg.TestAgent.DeregisterService(m.System.ID)
	}
	m.Cluster.Remote.Shutdown(false)
}

type levelHandler struct {
	min slog.Level
	slog.Handler
}

func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return levelHandler{min: h.min, Handler: h.Handler.WithAttrs(a)}
}

func (h levelHandler) WithGroup(n string) slog.Handler {
	return levelHandler{min: h.min, Handler: h.Handler.WithGroup(n)}
}

// actorMetrics returns the actor system option that turns protoactor's
// metrics on with mp, none for a nil mp.
//
// protoactor's default spawner registers a mailbox-length callback on the
// global meter for every actor it spawns, without naming an instrument,
// and drops the Registration, so nothing ever unregisters it. The
// OpenTelemetry SDK ignores a callback that names no instrument: with an
// SDK provider set as the global one nothing piles up (and the mailbox
// gauge is never reported). otel's default global provider, though,
// keeps every callback until a provider is set, each holding its stopped
// actor: a member spawning a grain per activation would grow without
// bound. So mp must already be the global provider.
// protoactor_metrics_test.go measures both.
func actorMetrics(mp metric.MeterProvider) ([]actor.ConfigOption, error) {
	if mp == nil {
		return nil, nil
	}
	if !sameProvider(otel.GetMeterProvider(), mp) {
		return nil, fmt.Errorf("%w: MeterProvider must be the global OpenTelemetry meter provider (otel.SetMeterProvider before Start): protoactor reports to the global one", ErrConfig)
	}
	return []actor.ConfigOption{actor.WithMetricProviders(mp)}, nil
}

func sameProvider(a, b metric.MeterProvider) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}
