// Package node assembles ShoppingMall processes from their parts: Redis
// clients and stores, the workflow service, the order grain kind and the
// cluster member. Mains and in-process tests build members through it, so
// both run the same wiring.
//
// It reads no flags or environment (mains do); it must not import edge.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"google.golang.org/protobuf/proto"
)

// RedisURLs names each store's Redis. Empty ones default to Default, so
// one Redis serves everything unless the stores are split.
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
	Location   *location.Store
	Relocation *relocation.Store
	Fixtures   *fixture.Store
	// ProjectedAppend records an event and its projection in one round
	// trip; nil when the event store and the read model live on
	// different Redis deployments.
	ProjectedAppend workflow.ProjectedAppender
	clients         []storeClient
}

// storeClient is one distinct Redis. name is its URL without a password,
// fit for logs and probe replies.
type storeClient struct {
	name   string
	client *redis.Client
}

// StoreOptions tune store clients.
type StoreOptions struct {
	// Hook, if set, is added to every client (e.g. round-trip counting).
	Hook redis.Hook
	// PoolSize per client; 0 keeps go-redis' default.
	PoolSize int
}

// NewStores builds one client per distinct URL without contacting Redis.
// go-redis dials on first use and redials after a failure by itself, so a
// process can be started before its Redis answers and wait with
// WaitStores; only a malformed URL fails here.
func NewStores(urls RedisURLs, opt StoreOptions) (*Stores, error) {
	s := &Stores{}
	byURL := map[string]*redis.Client{}
	get := func(u string) (*redis.Client, error) {
		if u == "" {
			u = urls.Default
		}
		if c, ok := byURL[u]; ok {
			return c, nil
		}
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("redis url %q: %w", redactURL(u), err)
		}
		if opt.PoolSize > 0 {
			o.PoolSize = opt.PoolSize
		}
		c := redis.NewClient(o)
		if opt.Hook != nil {
			c.AddHook(opt.Hook)
		}
		byURL[u] = c
		s.clients = append(s.clients, storeClient{name: redactURL(u), client: c})
		return c, nil
	}
	var errs []error
	must := func(u string) *redis.Client {
		c, err := get(u)
		errs = append(errs, err)
		return c
	}
	ev, rm, cs, loc, rel := must(urls.Events), must(urls.ReadModel), must(urls.Commerce), must(urls.Location), must(urls.Relocation)
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return nil, err
	}
	events := eventstore.NewRedis(eventstore.RedisConfig{Client: ev})
	projections := readmodel.NewRedis(readmodel.RedisConfig{Client: rm})
	s.Events, s.ReadModel = events, projections
	if ev == rm {
		s.ProjectedAppend = projectedAppender{events: events, projections: projections}
	}
	s.Commerce = commerce.NewRedis(commerce.RedisConfig{Client: cs})
	s.Location = location.NewStore(location.StoreConfig{Client: loc})
	s.Relocation = relocation.New(relocation.Config{Client: rel})
	s.Fixtures = fixture.New(fixture.Config{Client: cs})
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
			if err := c.client.Ping(ctx).Err(); err != nil {
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

// Close closes every client.
func (s *Stores) Close() {
	for _, c := range s.clients {
		_ = c.client.Close()
	}
}

// redactURL drops a password from a Redis URL: store names end up in logs
// and in probe replies.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// projectedAppender writes the read model's record inside the event
// store's append script; both share one Redis and the order's hash tag.
type projectedAppender struct {
	events      *eventstore.Redis
	projections *readmodel.Redis
}

// AppendProjected implements workflow.ProjectedAppender. After the append
// of an order's first or terminal event landed it updates the read
// model's active-order index in a command of its own (the index shard is another hash slot), best-effort: the
// stuck-order report checks every index entry against its record, and an
// order the index missed is found by readmodel's RebuildActiveIndex.
func (p projectedAppender) AppendProjected(ctx context.Context, orderID string, expectedVersion int64, fence eventstore.Fence, events []eventstore.Envelope, state *contracts.OrderState) (int64, error) {
	key, encoded, err := p.projections.Record(orderID, state)
	if err != nil {
		return 0, err
	}
	v, err := p.events.AppendProjected(ctx, orderID, expectedVersion, fence, events, eventstore.Projection{
		Key: key, Version: expectedVersion + int64(len(events)), State: encoded,
	})
	if err != nil {
		return v, err
	}
	// Only the first and the last projection touch the index: two index
	// commands per order instead of one per event. In between the entry
	// keeps its Created score, which only bounds the order's last change
	// from below; the stuck report reads each candidate's projection for
	// its real age.
	if st := state.GetStatus(); st != contracts.OrderStatus_Created && !readmodel.Terminal(st) {
		return v, nil
	}
	if ierr := p.projections.IndexActive(ctx, orderID, state); ierr != nil {
		slog.Warn("active-order index not updated; the append and its projection are", slog.String("order", orderID), slog.Any("error", ierr))
	}
	return v, nil
}

// Envelopes adapts the Relocation Store's opaque first-activation
// envelopes to the workflow's typed ones.
type Envelopes struct{ Store *relocation.Store }

// SaveFirst implements workflow.Envelopes.
func (e Envelopes) SaveFirst(ctx context.Context, req *contracts.StartOrderWorkflowReq) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	return e.Store.SaveFirst(ctx, req.GetOrderId(), b)
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
	req := &contracts.StartOrderWorkflowReq{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("first activation envelope of %s: %w", orderID, err)
	}
	return req, nil
}

// WorkflowConfig configures an OrderWorkflow member.
type WorkflowConfig struct {
	// Cluster is the membership part; Kinds and Location are filled here.
	Cluster cluster.Config
	Stores  *Stores
	// IdleTimeout passivates idle grains; 0 disables.
	IdleTimeout time.Duration
	// Fixtures enables the runner's interrupt points (never in production).
	Fixtures bool
	// Evidence receives raw evidence lines.
	Evidence io.Writer
	Logger   *slog.Logger
}

// Workflow is a running OrderWorkflow member.
type Workflow struct {
	Member  *cluster.Member
	Service *workflow.Service
	Client  *grain.Client
	log     *slog.Logger
}

// StartWorkflow starts a member hosting shoppingmall.order-workflow.
func StartWorkflow(ctx context.Context, cfg WorkflowConfig) (*Workflow, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Evidence == nil {
		cfg.Evidence = io.Discard
	}
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
	}
	if cfg.Fixtures {
		wcfg.Fixtures = cfg.Stores.Fixtures
	}
	if cfg.Stores.ProjectedAppend != nil {
		wcfg.ProjectedAppend = cfg.Stores.ProjectedAppend
	}
	svc, err := workflow.New(wcfg)
	if err != nil {
		return nil, err
	}
	kind := grain.Kind(grain.Config{
		Service:     svc,
		Relocations: cfg.Stores.Relocation,
		IdleTimeout: cfg.IdleTimeout,
		Evidence:    cfg.Evidence,
		Now:         now,
		Logger:      cfg.Logger,
	})
	cc := cfg.Cluster
	cc.Kinds = append(cc.Kinds, kind)
	cc.Location = cfg.Stores.Location
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	m, err := cluster.Start(ctx, cc)
	if err != nil {
		return nil, err
	}
	return &Workflow{Member: m, Service: svc, Client: grain.NewClient(m.Lookup, grain.WithRelocations(cfg.Stores.Relocation)), log: cfg.Logger}, nil
}
