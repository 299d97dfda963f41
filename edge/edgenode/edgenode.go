// Package edgenode assembles a CommerceApi process: it joins the cluster as
// a member without kinds, observes the topology for readiness evidence,
// and binds the opened stores and the grain client to edge's interfaces.
// The commerce-api main and in-process tests build API members through it,
// so both run the same wiring.
//
// It reads no flags or environment; edge must not import it.
package edgenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/actors/archiver"
	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/takeover"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Config configures an API member.
type Config struct {
	// Cluster is the membership part; NodeName names this process (api-a).
	// Kinds, Location and OnMemberJoined are filled here.
	Cluster cluster.Config
	Stores  *node.Stores
	// Readiness, optional, is the process's: a store found not durable at
	// run time (-require-durable-store) turns the edge's /readyz unready
	// like a store that does not answer.
	Readiness *node.Readiness
	// RequestTimeout bounds each HTTP request (and is the grain call
	// default); 0 keeps edge's default.
	RequestTimeout time.Duration
	// Admission is the edge's in-flight budget per route kind; its zero
	// value takes edge.DefaultAdmission.
	Admission edge.Admission
	// Archive, optional, is the event store's cold tier (-archive): with
	// it the API answers rebuild-projection and the timeline of an
	// archived order from it; without it they are 503 STORE_UNAVAILABLE.
	Archive archive.Store
	// SelfCheck enables the runner's /self-check/ hooks.
	SelfCheck bool
	// Admin enables /admin/.
	Admin bool
	// AdminToken is the bearer token of the admin listener
	// (API.Server.ServeAdmin), which serves /admin/, /self-check/ and
	// /debug/pprof/; required with Admin or SelfCheck.
	AdminToken string
	// OrderIDSecret is the cluster's secret OrderIds are derived under
	// (edge.Config.OrderIDSecret): required, and the same in every API
	// process of the cluster.
	OrderIDSecret []byte
	// TakeoverAfter, when positive, turns on the takeover policy
	// (cluster/takeover.Policy): an order whose command found its owner
	// gone is taken over once the owner's gone record is this old. Zero
	// keeps Unavailable until an operator acts.
	TakeoverAfter time.Duration
	// Evidence receives raw evidence lines, one Write per line; nil
	// discards them.
	Evidence io.Writer
	// Logger is wrapped with edge.LogHandler, so that every line logged
	// with a request's context, by the edge or what it calls, carries the
	// request's id.
	Logger *slog.Logger
	// Metrics is the process's registry, for the edge's HTTP metrics;
	// nil counts them but serves them nowhere.
	Metrics *telemetry.Registry
	// TracerProvider makes the API's spans: each request's server span
	// and its grain calls (unless Cluster.TracerProvider names another).
	// Nil uses the global provider.
	TracerProvider trace.TracerProvider
}

// API is a running CommerceApi member.
type API struct {
	Member *cluster.Member
	Server *edge.Server
	Routes *edge.RouteObserver
	Client *grain.Client
	// Takeover takes lost owners' orders over (the admin routes); Policy
	// is the -takeover-after policy, nil when off.
	Takeover *takeover.Service
	Policy   *takeover.Policy
	// Terminal is the process's one subscription to the read model's
	// terminal notices, which wakes GET /orders/{id}?waitFor=terminal;
	// nil when the read model is not on Redis.
	Terminal *readmodel.TerminalFeed
	rejoin   chan string
}

// RejoinExitCode is the exit status of a commerce-api process that leaves
// to rejoin the cluster as a new member (see Rejoin). Its supervisor (the
// local cluster's, or Kubernetes with restartPolicy Always) starts it
// again.
const RejoinExitCode = 4

// Rejoin receives, once, why this API must rejoin the cluster under a new
// member id. protoactor blocks a member id for good in the view of each
// member that lost it, so after a partition between this API and a
// workflow member heals, neither sees the other again: this API's
// topology no longer holds the workflow member, and the workflow member
// refuses this API's connections. The member is not recorded gone (its
// heartbeat stayed fresh) and answers a dial again, so its orders are
// served through the other APIs and would answer OWNER_UNREACHABLE here
// for good. A new incarnation of this process has a new id and a fresh
// view; an API hosts no grains, so leaving strands nothing. protoactor's
// public API offers no way to unblock an id or to restart a member in
// place, which is why the process, not the member, is restarted.
func (a *API) Rejoin() <-chan string { return a.rejoin }

// schemaControl answers the admin schema routes (edge.SchemaControl)
// against the workflow members this API sees live.
type schemaControl struct {
	store  compat.Store
	lookup *placement.Lookup
}

func (c schemaControl) SchemaStatus(ctx context.Context) (compat.Report, error) {
	return compat.Status(ctx, c.store, c.lookup.EligibleIDs(grain.KindName))
}

func (c schemaControl) RaiseSchema(ctx context.Context, to int, by string) (location.SchemaLevel, bool, error) {
	return compat.Raise(ctx, c.store, c.lookup.EligibleIDs(grain.KindName), to, by, false, time.Now())
}

// stuckVersions tells the stuck report what the live workflow members read
// (edge.StuckVersions).
type stuckVersions struct {
	eventstore.SchemaReader
	store  location.Store
	lookup *placement.Lookup
}

func (v stuckVersions) Readable(ctx context.Context) (newest, level int, err error) {
	schemas, err := v.store.MemberSchemas(ctx)
	if err != nil {
		return 0, 0, err
	}
	lvl, err := v.store.SchemaLevel(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, id := range v.lookup.EligibleIDs(grain.KindName) {
		newest = max(newest, compat.Reads(schemas, id))
	}
	return newest, lvl.Level, nil
}

// topology counts live workflow members as this member sees them, and
// checks the stores for the edge's /readyz (edge.StoreCheck).
type topology struct {
	l      *placement.Lookup
	stores *node.Stores
	ready  *node.Readiness
}

func (t topology) WorkflowMembers() int { return len(t.l.Eligible(grain.KindName)) }

func (t topology) CheckStores(ctx context.Context) error {
	if err := t.stores.Ping(ctx); err != nil {
		return err
	}
	if t.ready != nil {
		return t.ready.DurableErr()
	}
	return nil
}

// StartingHandler answers on the public listener (node.ServeInterim) while
// the API waits for its stores and joins: /healthz 200, and /readyz and
// every other route 503 UNAVAILABLE as the edge's problem details (/readyz
// naming what is still missing), so clients retry instead of failing on a
// refused connection.
func StartingHandler(ready *node.Readiness) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			_ = telemetry.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"}) // strings: always encodes
			return
		}
		detail, reason := "starting", edge.ReasonStarting
		if r.URL.Path == "/readyz" {
			ctx, cancel := context.WithTimeout(r.Context(), node.DefaultReadyzTimeout)
			// Like the edge's own /readyz, the public reply names the
			// reason, not the Redis address or error.
			for _, c := range ready.Check(ctx) {
				if c.Err == nil {
					continue
				}
				detail = "starting: " + startingReasons[c.Name]
				if c.Name == "stores" {
					reason = edge.ReasonStoreUnavailable
				}
				break
			}
			cancel()
		}
		edge.WriteProblem(w, http.StatusServiceUnavailable, edge.CodeUnavailable, reason, detail, 1)
	})
}

var startingReasons = map[string]string{
	"stores": "the stores do not answer",
	"member": "the cluster member has not joined",
}

// Start joins the cluster and builds the HTTP edge; call Server.Serve to
// answer requests.
func Start(ctx context.Context, cfg Config) (*API, error) {
	if cfg.Stores == nil {
		return nil, errors.New("edgenode: Stores is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(edge.LogHandler(cfg.Logger.Handler()))
	// One writer, one lock, for the route observer's lines and the edge's.
	cfg.Evidence = telemetry.NewEvidence(cfg.Evidence, cfg.Logger)
	st := cfg.Stores
	var cold *archiver.Cold
	if cfg.Archive != nil {
		var err error
		if cold, err = node.NewCold(st, cfg.Archive); err != nil {
			return nil, err
		}
	}
	routes := edge.NewRouteObserver(edge.RouteObserverConfig{
		NodeID: cfg.Cluster.NodeName, Names: st.Location, Evidence: cfg.Evidence, Logger: cfg.Logger,
	})
	cc := cfg.Cluster
	cc.Kinds = nil
	cc.Location = st.Location
	cc.StateSchema = st.StateSchema()
	cc.OnMemberJoined = routes.MemberJoined
	cc.OnMemberLeft = routes.MemberLeft
	if cc.RequestTimeout == 0 {
		cc.RequestTimeout = cfg.RequestTimeout
	}
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	if cc.TracerProvider == nil {
		cc.TracerProvider = cfg.TracerProvider
	}
	m, err := cluster.Start(ctx, cc)
	if err != nil {
		routes.Close()
		return nil, err
	}
	client := grain.NewClient(m.Lookup, grain.WithRelocations(st.Relocation))
	tk, err := takeover.New(takeover.Config{
		Kind: grain.KindName, Location: st.Location, Relocations: st.Relocation, Fences: st.Events,
		Live: m.Lookup.Live, DropRoute: m.Lookup.DropRoute, Logger: cfg.Logger,
	})
	if err != nil {
		m.Stop()
		routes.Close()
		return nil, err
	}
	var orders edge.Orders = client
	var policy *takeover.Policy
	if cfg.TakeoverAfter > 0 {
		policy, err = takeover.NewPolicy(takeover.PolicyConfig{Service: tk, After: cfg.TakeoverAfter,
			Caller: "policy -takeover-after=" + cfg.TakeoverAfter.String() + " at " + cfg.Cluster.NodeName, Logger: cfg.Logger})
		if err != nil {
			m.Stop()
			routes.Close()
			return nil, err
		}
		orders = edge.OrdersWithTakeoverPolicy(client, policy)
	}
	ecfg := edge.Config{
		NodeID:         cfg.Cluster.NodeName,
		Idempotency:    st.Commerce.Idempotency(),
		Carts:          st.Commerce.Carts(),
		CartReserve:    cartReserver(st, m.Lookup.CreateLockTTL()),
		ReadModel:      st.ReadModel,
		Orders:         orders,
		Topology:       topology{l: m.Lookup, stores: st, ready: cfg.Readiness},
		Operator:       client,
		Admin:          cfg.Admin,
		AdminToken:     cfg.AdminToken,
		OrderIDSecret:  cfg.OrderIDSecret,
		Takeover:       tk,
		Admission:      cfg.Admission,
		RequestTimeout: cfg.RequestTimeout,
		Evidence:       cfg.Evidence,
		Logger:         cfg.Logger,
		Metrics:        cfg.Metrics,
		TracerProvider: cfg.TracerProvider,
	}
	ecfg.Streams = streams(st)
	if cold != nil {
		ecfg.Archive = cold
	}
	ecfg.Barrier = st.Barrier
	var feed *readmodel.TerminalFeed
	if rm, ok := st.ReadModel.(*readmodel.Redis); ok {
		feed = rm.NewTerminalFeed()
		ecfg.Terminal = feed
		// The grains of the starts this API tracks tell it of their end
		// over the cluster link (grain.NoticeTo).
		ecfg.NoticeTo, err = grain.ServeNotices(m.System, feed.Deliver, feed.VoidVouches)
		if err == nil {
			feed.UseLinkNotices()
		}
	}
	if idx, ok := st.ReadModel.(edge.ActiveOrders); ok && cfg.Admin {
		ecfg.Stuck = &edge.Stuck{Index: idx, Authority: st.Location, Members: m.Lookup}
		if r, ok := st.Events.(eventstore.SchemaReader); ok {
			ecfg.Stuck.Versions = stuckVersions{SchemaReader: r, store: st.Location, lookup: m.Lookup}
		}
	}
	if cfg.Admin {
		ecfg.Timeline = &edge.Timeline{Events: st.Events, Ownership: st.Location, Operations: st.Relocation,
			Inventory: st.Commerce.Inventory(), Payment: st.Commerce.Payment()}
		ecfg.Mounts = append(ecfg.Mounts, edge.StockAdmin{Ledger: st.Commerce.Ledger()},
			edge.SchemaAdmin{Control: schemaControl{store: st.Location, lookup: m.Lookup}})
	}
	if cfg.SelfCheck && err == nil {
		// The runner's hooks are test machinery: mounted on the admin
		// listener only with -self-check, otherwise their paths are 404.
		var hooks *selfcheck.Hooks
		hooks, err = selfcheck.New(selfcheck.Config{
			Idempotency: st.Commerce.Idempotency(),
			Orders:      client,
			Fixtures:    st.Fixtures,
			Events:      st.Events,
			Authority:   st.Location,
			Relocations: st.Relocation,
			Envelopes:   node.Envelopes{Store: st.Relocation},
			Projections: st.ReadModel,
			Inventory:   st.Commerce.Inventory(),
			Payment:     st.Commerce.Payment(),
		})
		ecfg.Mounts = append(ecfg.Mounts, hooks)
	}
	var srv *edge.Server
	if err == nil {
		srv, err = edge.New(ecfg)
	}
	if err != nil {
		if feed != nil {
			_ = feed.Close()
		}
		if policy != nil {
			policy.Close()
		}
		m.Stop()
		routes.Close()
		return nil, err
	}
	rejoin := make(chan string, 1)
	m.Lookup.OnLostMemberReachable(func(memberID, address string) {
		select {
		case rejoin <- fmt.Sprintf("member %s at %s, lost from this API's topology, is not recorded gone and answers again", memberID, address):
		default:
		}
	})
	return &API{Member: m, Server: srv, Routes: routes, Client: client, Takeover: tk, Policy: policy, Terminal: feed, rejoin: rejoin}, nil
}

// Stop shuts the HTTP edge down (waiting for requests in flight until ctx
// ends) and leaves the cluster. An API member hosts no grains, so leaving
// strands nothing.
func (a *API) Stop(ctx context.Context) error {
	// Shutdown answers the waits in flight first; then nothing listens.
	err := a.Server.Shutdown(ctx)
	if a.Terminal != nil {
		_ = a.Terminal.Close()
	}
	if a.Policy != nil {
		a.Policy.Close()
	}
	a.Routes.Close()
	a.Member.Stop()
	return err
}

// streams is the event store's existence check, so that a command on an
// order without a stream is answered from it, without a cold activation;
// nil when the event store has none (the grain answers the same 404).
func streams(st *node.Stores) edge.Streams {
	if sc, ok := st.Events.(eventstore.StreamChecker); ok {
		return sc
	}
	return nil
}

// cartReserver is the commerce store as the edge's one-step cart read and
// key reservation, which also takes the minted order's creation lock
// (lockingReserver), where the stores are one Redis server; nil (two
// round trips) on a Redis Cluster, where the keys are in different slots.
// The stores are never split (node.ErrSplitDeployment), so one server
// for commerce is one for the Location Store.
func cartReserver(st *node.Stores, ttl time.Duration) edge.CartReserver {
	if !st.Commerce.SingleServer() {
		return nil
	}
	return lockingReserver{Redis: st.Commerce, locks: st.Locations, ttl: ttl}
}

// lockingReserver is the one-step cart read and key reservation that also
// takes the creation lock of the order it mints, so the start's cold
// activation needs no Location round trip of its own to take it
// (placement.WithHeldCreation).
type lockingReserver struct {
	*commerce.Redis
	locks *location.Redis
	ttl   time.Duration
}

// ReserveForCart implements edge.CartReserver.
func (r lockingReserver) ReserveForCart(ctx context.Context, cartID, key string, candidate commerce.Mapping) (commerce.CartReservation, error) {
	c, ok := r.locks.CreationFor(grain.KindName, candidate.OrderID)
	if !ok {
		return r.Redis.ReserveForCart(ctx, cartID, key, candidate)
	}
	return r.ReserveForCartLocking(ctx, cartID, key, candidate, commerce.CreationLock{
		Lock: c.Lock, Record: c.Record, Field: c.StatusField, Value: c.Creating, Token: uuid.NewString(), TTL: r.ttl,
		Unless: c.Sealed, UnlessField: c.SealedField,
	})
}

// Unreserve implements edge.CartReserver: the mapping goes back as
// commerce.Redis.Unreserve says, and a lock the reservation took with it.
func (r lockingReserver) Unreserve(ctx context.Context, cartID, key string, res commerce.CartReservation) (bool, error) {
	kept, err := r.Redis.Unreserve(ctx, cartID, key, res)
	if res.LockToken != "" {
		if lerr := r.locks.AbortCreate(ctx, grain.KindName, res.Mapping.OrderID, res.LockToken); lerr != nil {
			err = errors.Join(err, fmt.Errorf("give back the creation lock of %s: %w", res.Mapping.OrderID, lerr))
		}
	}
	return kept, err
}
