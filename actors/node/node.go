// Package node assembles ShoppingMall processes from their parts: Redis
// clients and stores, the workflow service, the order grain kind and the
// cluster member. Mains and in-process tests build members through it, so
// both run the same wiring.
//
// It reads no flags or environment (mains do); it must not import edge.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// RedisURLs names each store's Redis. Empty ones default to Default, so
// one Redis serves everything unless the stores are split.
//
// A URL is in one of cluster/redisurl's forms: one server (redis://,
// rediss://, unix://), a Redis Cluster given by its seeds
// (redis+cluster://), whose client routes each command to its slot's
// master and follows MOVED and ASK redirects (every store keeps each
// script's keys in one slot), or a primary with replicas watched by
// Redis Sentinel (redis+sentinel://), whose failover client talks to one
// server at a time, the one the sentinels name primary, so every store
// treats it as a single server.
type RedisURLs struct {
	Default    string
	Events     string
	ReadModel  string
	Commerce   string
	Location   string
	Relocation string
}

// ErrStoresUnavailable: a store's Redis did not answer a PING: it is
// down, unreachable, or still loading its data set (LOADING).
var ErrStoresUnavailable = errors.New("node: stores unavailable")

// Stores are the opened stores of one process.
type Stores struct {
	Events     eventstore.Store
	ReadModel  readmodel.Store
	Commerce   *commerce.Redis
	Location   location.Store
	Relocation relocation.Store
	// Fixtures answers the runner's interrupt points; nil unless
	// StoreOptions.Fixtures asked for it (never in production).
	Fixtures *fixture.Store
	// Commits commits an order's unit of work (eventstore.Unit) with its
	// projection, in one round trip on every topology: every key of the
	// unit is in the order's hash slot, and the stores are one deployment
	// (ErrSplitDeployment).
	Commits readmodel.Committer
	// Locations is the Location Store itself (Location may be a wrapper):
	// on one server a start's key reservation takes the order's creation
	// lock in the same script, as the store spells it out
	// (location.Redis.CreationFor, which says when it cannot).
	Locations *location.Redis
	// Barrier is the event store when every store's writes wait for
	// replicas (StoreOptions.Replication), nil otherwise: the workflow
	// and the edge pass it before acknowledging state they did not write
	// (eventstore.Barrier).
	Barrier eventstore.Barrier
	// Probe is the Location Store on a client of its own (a
	// redisurl.Options.Probe client)
	// for the self-fence probe, which load on the shared pool must not
	// starve.
	Probe   location.Store
	clients []storeClient
	// own are store clients with a connection pool of their own (see
	// storeClientFor), closed with the others.
	own []redis.UniversalClient
	// probe is Probe's client.
	probe redis.UniversalClient
}

// The store labels of StoreOptions.StoreHook: one client per store, so a
// metric says which store paid for a Redis call.
const (
	StoreEvents     = "events"
	StoreReadModel  = "readmodel"
	StoreCommerce   = "commerce"
	StoreLocation   = "location"
	StoreRelocation = "relocation"
)

// storeClient is one distinct Redis. name is its URL without a password,
// fit for logs and probe replies.
type storeClient struct {
	name   string
	client redis.UniversalClient
}

// StoreOptions tune store clients.
type StoreOptions struct {
	// Hook, if set, is added to every client.
	Hook redis.Hook
	// StoreHook, if set, gives each store's client a hook of its own,
	// told the store's label (StoreEvents, ...): e.g.
	// telemetry.Registry.RedisHook. It may return nil.
	StoreHook func(store string) redis.Hook
	// PoolSize per client; 0 keeps go-redis' default.
	PoolSize int
	// StockLedgerMax is commerce.Config.LedgerMaxLen.
	StockLedgerMax int64
	// SkipLegacyIdempotency is commerce.Config.SkipLegacyIdempotency.
	SkipLegacyIdempotency bool
	// Replication makes every store's writes wait for replicas (WAIT);
	// the zero value waits for none.
	Replication redisurl.Replication
	// Fixtures builds the fixture store (Stores.Fixtures) for the
	// runner's interrupt points: a workflow's -fixtures, an API's
	// -self-check. Production wiring leaves it off and has none.
	Fixtures bool
	// IndexFinished is readmodel.Config.IndexFinished: the terminal step
	// lists the order for the archiver (a retention above 0).
	IndexFinished bool
}

// ErrSplitDeployment: the stores that hold one order's keys are not one
// Redis deployment and database, so no one script could commit an
// order's write. The error names the URLs and says what to set.
var ErrSplitDeployment = errors.New("node: the stores are split over several Redis deployments")

// oneDeployment refuses URLs that put the stores on more than one Redis
// deployment or database (redisurl.URL.Deployment). Every store holds a
// part of each order (its stream, record, Location and Relocation
// records, idempotency mapping), and commerce also holds the modules'
// records, which none may keep elsewhere either: this project commits an
// order's write in one script. The Relocation Store shares the
// deployment, under its own prefix.
func oneDeployment(urls RedisURLs) error {
	stores := []struct{ flag, url string }{
		{"-redis-events", urls.Events}, {"-redis-readmodel", urls.ReadModel}, {"-redis-commerce", urls.Commerce},
		{"-redis-location", urls.Location}, {"-redis-relocation", urls.Relocation},
	}
	var deps []string
	var named []string
	for _, st := range stores {
		u := cmp.Or(st.url, urls.Default)
		p, err := redisurl.Parse(u)
		if err != nil {
			return err
		}
		d := p.Deployment()
		if !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
		named = append(named, fmt.Sprintf("%s %s (%s)", st.flag, redisurl.Redact(u), d))
	}
	if len(deps) > 1 {
		return fmt.Errorf("%w: one order's keys must be committable by one script, so every store must be one Redis deployment and database, but %s; set -redis alone, or every -redis-<store> to a URL of the same deployment and database",
			ErrSplitDeployment, strings.Join(named, ", "))
	}
	return nil
}

// NewStores builds one client per distinct URL without contacting Redis.
// go-redis dials on first use and redials after a failure by itself, so a
// process can be started before its Redis answers and wait with
// WaitStores; only a malformed URL, or stores split over several
// deployments (ErrSplitDeployment), fail here.
func NewStores(urls RedisURLs, opt StoreOptions) (*Stores, error) {
	if err := opt.Replication.Validate(); err != nil {
		return nil, err
	}
	if err := oneDeployment(urls); err != nil {
		return nil, err
	}
	s := &Stores{}
	byURL := map[string]redis.UniversalClient{}
	get := func(u string) (redis.UniversalClient, error) {
		if u == "" {
			u = urls.Default
		}
		if c, ok := byURL[u]; ok {
			return c, nil
		}
		c, err := redisurl.NewClient(u, redisurl.Options{PoolSize: opt.PoolSize})
		if err != nil {
			return nil, err
		}
		if opt.Hook != nil {
			c.AddHook(opt.Hook)
		}
		byURL[u] = c
		s.clients = append(s.clients, storeClient{name: redisurl.Redact(u), client: c})
		return c, nil
	}
	var errs []error
	must := func(u, store string) redis.UniversalClient {
		c, err := get(u)
		errs = append(errs, err)
		if err != nil {
			return nil
		}
		return s.storeClientFor(c, store, opt)
	}
	ev, rm, cs, loc, rel := must(urls.Events, StoreEvents), must(urls.ReadModel, StoreReadModel), must(urls.Commerce, StoreCommerce),
		must(urls.Location, StoreLocation), must(urls.Relocation, StoreRelocation)
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return nil, err
	}
	// After every store's client exists: a clone made later would inherit
	// a hook bound to the client it was cloned from.
	if err := redisurl.WaitForReplicas(opt.Replication, ev, rm, cs, loc, rel); err != nil {
		s.Close()
		return nil, err
	}
	events, err1 := eventstore.NewRedis(eventstore.Config{Client: ev})
	// An archived order's final state stays in its sealed record, which
	// the read model reads where its own record is gone.
	var sealed readmodel.SealedReader
	if err1 == nil {
		sealed = events
	}
	projections, err2 := readmodel.NewRedis(readmodel.Config{Client: rm, IndexFinished: opt.IndexFinished, Sealed: sealed})
	commerceStore, err3 := commerce.NewRedis(commerce.Config{Client: cs, LedgerMaxLen: opt.StockLedgerMax, SkipLegacyIdempotency: opt.SkipLegacyIdempotency})
	if err := errors.Join(err1, err2, err3); err != nil {
		s.Close()
		return nil, err
	}
	s.Events, s.ReadModel, s.Commerce = events, projections, commerceStore
	if opt.Replication.Replicas > 0 {
		s.Barrier = events
	}
	if opt.Fixtures {
		var err error
		if s.Fixtures, err = fixture.NewRedis(fixture.Config{Client: cs}); err != nil {
			s.Close()
			return nil, err
		}
	}
	// Every store is on one deployment (oneDeployment): a step's event
	// and its projection are one script (readmodel.RedisCommitter), and
	// so is a new order's start with the other stores' writes.
	pa, err := readmodel.NewRedisCommitter(readmodel.RedisCommitterConfig{Events: events, ReadModel: projections})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Commits = pa
	// An archived (or sealing) order is activated by no one: the Location
	// Store's activation script reads the order's seal mark in its slot.
	sealMark := func(kind, id string) (string, string, bool) {
		if kind != grain.KindName {
			return "", "", false
		}
		key, field, err := events.SealMark(id)
		return key, field, err == nil
	}
	locations, err5 := location.NewRedis(location.Config{Client: loc, Sealed: sealMark})
	relocations, err6 := relocation.NewRedis(relocation.Config{Client: rel})
	if err := errors.Join(err5, err6); err != nil {
		s.Close()
		return nil, err
	}
	s.Location, s.Locations, s.Relocation = locations, locations, relocations
	pc, err := redisurl.NewClient(cmp.Or(urls.Location, urls.Default), redisurl.Options{Probe: true})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.probe = pc
	if s.Probe, err = location.NewRedis(location.Config{Client: pc}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// OpenStores is NewStores followed by one Ping, for callers (tests, tools)
// whose Redis must already answer: they fail at once rather than wait.
// Processes use NewStores and WaitStores instead.
func OpenStores(ctx context.Context, urls RedisURLs, opt StoreOptions) (*Stores, error) {
	s, err := NewStores(urls, opt)
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Ping sends one PING to every distinct Redis, concurrently so one that
// hangs does not hide the others, and returns nil when all of them
// answer. Otherwise the error wraps ErrStoresUnavailable and names each
// Redis that failed.
func (s *Stores) Ping(ctx context.Context) error {
	errs := make([]error, len(s.clients))
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ping(ctx, c.client); err != nil {
				errs[i] = fmt.Errorf("redis %s: %w", c.name, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrStoresUnavailable, err)
	}
	return nil
}

// ping asks one server, or every master of a cluster: a cluster with a
// master down serves only part of the keyspace.
func ping(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
	}
	return c.Ping(ctx).Err()
}

// Close closes every client.
func (s *Stores) Close() {
	if s.probe != nil {
		_ = s.probe.Close()
	}
	for _, c := range s.own {
		_ = c.Close()
	}
	for _, c := range s.clients {
		_ = c.client.Close()
	}
}

// storeClientFor returns the client a store uses on shared, its URL's
// client: shared itself without a StoreHook, otherwise a go-redis
// WithTimeout clone (same connection pool, hooks of its own) carrying
// opt.Hook and the store's hook. WithTimeout sets one timeout for reads
// and writes, so a URL that sets them apart gets a client with a pool of
// its own instead, and so does a cluster client, which has no such clone.
func (s *Stores) storeClientFor(shared redis.UniversalClient, store string, opt StoreOptions) redis.UniversalClient {
	if opt.StoreHook == nil {
		return shared
	}
	h := opt.StoreHook(store)
	if h == nil {
		return shared
	}
	var c redis.UniversalClient
	switch sc := shared.(type) {
	case *redis.Client:
		// A failover client's pool is the one the sentinels' switch of
		// primary empties; a client of its own would keep connections to
		// the old primary, so it shares the pool, with its read timeout
		// for writes too.
		if o := sc.Options(); o.ReadTimeout == o.WriteTimeout || redisurl.IsFailoverClient(sc) {
			c = sc.WithTimeout(o.ReadTimeout)
		} else {
			own := *o
			c = redis.NewClient(&own)
			s.own = append(s.own, c)
		}
	case *redis.ClusterClient:
		own := *sc.Options()
		c = redis.NewClusterClient(&own)
		s.own = append(s.own, c)
	default:
		return shared
	}
	if opt.Hook != nil {
		c.AddHook(opt.Hook)
	}
	c.AddHook(h)
	return c
}

// StateSchema is cluster.Config.StateSchema over the event store: an
// order's highest event schema from its fence hash, one field read, for
// placement in a cluster of mixed builds; nil when the event store does
// not keep it.
func (s *Stores) StateSchema() func(ctx context.Context, kind, id string) (int, error) {
	r, ok := s.Events.(eventstore.SchemaReader)
	if !ok {
		return nil
	}
	return func(ctx context.Context, kind, id string) (int, error) {
		if kind != grain.KindName {
			return 1, nil
		}
		return r.HighestSchema(ctx, id)
	}
}

// Envelopes adapts the Relocation Store's opaque first-activation
// envelopes to the workflow's typed ones.
type Envelopes struct{ Store relocation.Store }

// AddFirst implements workflow.Envelopes.
func (e Envelopes) AddFirst(u *eventstore.Unit, req *contracts.StartOrderWorkflowReq) error {
	b, err := workflow.EncodeEnvelope(req)
	if err != nil {
		return err
	}
	return e.Store.AddFirstEnvelope(u, b)
}

// LoadFirst implements workflow.Envelopes.
func (e Envelopes) LoadFirst(ctx context.Context, orderID string) (*contracts.StartOrderWorkflowReq, error) {
	b, err := e.Store.LoadFirst(ctx, orderID)
	if errors.Is(err, relocation.ErrNotFound) {
		return nil, fmt.Errorf("%w: no first activation envelope for %s", workflow.ErrNotFound, orderID)
	}
	if err != nil {
		return nil, err
	}
	return workflow.DecodeEnvelope(orderID, b)
}

// ErrFixturesMissing: a member was asked to answer the runner's
// interrupt points from stores built without the fixture store.
var ErrFixturesMissing = errors.New("node: no fixture store")

// WorkflowConfig configures an OrderWorkflow member.
type WorkflowConfig struct {
	// Cluster is the membership part; Kinds and Location are filled here.
	Cluster cluster.Config
	Stores  *Stores
	// IdleTimeout passivates idle grains; 0 disables.
	IdleTimeout time.Duration
	// Fixtures mounts the grain's interceptor of the runner's interrupt
	// points, answered by Stores.Fixtures, which the stores must have
	// been built with (StoreOptions.Fixtures; never in production).
	Fixtures bool
	// Evidence receives raw evidence lines.
	Evidence io.Writer
	Logger   *slog.Logger
	// Metrics is the process's registry: the workflow service, the order
	// grains and the member's placement register their metrics with it
	// (unless Cluster.Metrics names another). Nil counts them nowhere.
	// One member per registry: each metric is registered once.
	Metrics *telemetry.Registry
	// TracerProvider makes the member's spans: its grain calls (unless
	// Cluster.TracerProvider names another) and the grains' turns and
	// background steps. Nil uses the global provider.
	TracerProvider trace.TracerProvider
	// SchemaAutoRaise raises the compatibility level by itself once every
	// live workflow member reads a newer event schema (compat.GateConfig);
	// off, only `commerce-api admin schema raise` does.
	SchemaAutoRaise bool
	// SchemaEvery is how often the member reads the level again; 0 takes
	// compat's default.
	SchemaEvery time.Duration
	// Codec is the event codec the member's workflow reads and writes
	// with, and whose schema it advertises; nil is workflow.Events, this
	// build's. Tests run a member of another schema beside this build's.
	Codec *workflow.Codec
}

// Workflow is a running OrderWorkflow member.
type Workflow struct {
	Member  *cluster.Member
	Service *workflow.Service
	Client  *grain.Client
	// Schema is the member's view of the compatibility level, which its
	// writes stamp; RunSchemaGate keeps it current.
	Schema *compat.Gate
	log    *slog.Logger
	// probe is the Location Store the self-fence watch reads through
	// (Stores.Probe).
	probe location.Store
	// stores are the member's stores (ResumeReadable).
	stores *Stores
}

// StartWorkflow starts a member hosting shoppingmall.order-workflow.
func StartWorkflow(ctx context.Context, cfg WorkflowConfig) (*Workflow, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// One writer, one lock, for the workflow's lines and the grains'.
	cfg.Evidence = telemetry.NewEvidence(cfg.Evidence, cfg.Logger)
	now := func() int64 { return time.Now().UnixMilli() }
	wcfg := workflow.Config{
		Kind:        grain.KindName,
		Events:      cfg.Stores.Events,
		ReadModel:   cfg.Stores.ReadModel,
		Idempotency: cfg.Stores.Commerce.Idempotency(),
		Inventory:   cfg.Stores.Commerce.Inventory(),
		Payment:     cfg.Stores.Commerce.Payment(),
		Envelopes:   Envelopes{Store: cfg.Stores.Relocation},
		Now:         now,
		Evidence:    cfg.Evidence,
		Logger:      cfg.Logger,
		Metrics:     cfg.Metrics,
	}
	wcfg.Commits = cfg.Stores.Commits
	wcfg.Barrier = cfg.Stores.Barrier
	wcfg.Codec = cfg.Codec
	codec := workflow.Events
	if cfg.Codec != nil {
		codec = *cfg.Codec
	}
	// The gate asks the member's topology, which exists only once the
	// member started: until then it counts nobody and raises nothing.
	var member atomic.Pointer[cluster.Member]
	gate := compat.NewGate(compat.GateConfig{
		Store: cfg.Stores.Location, Own: codec.Schema, AutoRaise: cfg.SchemaAutoRaise,
		Node: cfg.Cluster.NodeName, Interval: cfg.SchemaEvery, Logger: cfg.Logger,
		Live: func() []string {
			if m := member.Load(); m != nil {
				return m.Lookup.EligibleIDs(grain.KindName)
			}
			return nil
		},
	})
	wcfg.SchemaLevel = gate.Level
	svc, err := workflow.New(wcfg)
	if err != nil {
		return nil, err
	}
	gcfg := grain.Config{
		Service:     svc,
		Relocations: cfg.Stores.Relocation,
		IdleTimeout: cfg.IdleTimeout,
		Evidence:    cfg.Evidence,
		Now:         now,
		Logger:      cfg.Logger,
		Metrics:     cfg.Metrics,

		TracerProvider: cfg.TracerProvider,
	}
	if cfg.Fixtures {
		if cfg.Stores.Fixtures == nil {
			return nil, fmt.Errorf("%w: fixtures asked for, but the stores were built without the fixture store (StoreOptions.Fixtures)", ErrFixturesMissing)
		}
		// The grain's interceptor answers the runner's interrupt points
		// from the fixture store; without -fixtures no interceptor exists.
		gcfg.Interrupts = cfg.Stores.Fixtures
	}
	kind := grain.Kind(gcfg)
	cc := cfg.Cluster
	cc.Kinds = append(cc.Kinds, kind)
	cc.Schema = codec.Schema
	cc.StateSchema = cfg.Stores.StateSchema()
	cc.Location = cfg.Stores.Location
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	if cc.Metrics == nil {
		cc.Metrics = cfg.Metrics
	}
	if cc.TracerProvider == nil {
		cc.TracerProvider = cfg.TracerProvider
	}
	m, err := cluster.Start(ctx, cc)
	if err != nil {
		return nil, err
	}
	member.Store(m)
	// One read before the first order: a level raised long ago is what
	// this member writes from its first event. A store that does not
	// answer leaves it at the base schema, which every member reads.
	if err := gate.Refresh(ctx); err != nil {
		cfg.Logger.Warn("the compatibility level was not read at start; writing the base schema until it is", slog.Any("error", err))
	}
	return &Workflow{Member: m, Service: svc, Client: grain.NewClient(m.Lookup, grain.WithRelocations(cfg.Stores.Relocation)), Schema: gate,
		log: cfg.Logger, probe: cfg.Stores.Probe, stores: cfg.Stores}, nil
}

// RunSchemaGate keeps the member's view of the compatibility level
// current until ctx ends (compat.Gate.Run).
func (w *Workflow) RunSchemaGate(ctx context.Context) { w.Schema.Run(ctx) }
