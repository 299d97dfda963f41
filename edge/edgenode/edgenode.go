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
	"io"
	"log/slog"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/edge"
)

// Config configures an API member.
type Config struct {
	// Cluster is the membership part; NodeName names this process (api-a).
	// Kinds, Location and OnMemberJoined are filled here.
	Cluster cluster.Config
	Stores  *node.Stores
	// RequestTimeout bounds each HTTP request (and is the grain call
	// default); 0 keeps edge's default.
	RequestTimeout time.Duration
	// SelfCheck enables the runner's /self-check/ hooks.
	SelfCheck bool
	// Admin enables /admin/.
	Admin bool
	// Evidence receives raw evidence lines; it must accept concurrent
	// writes (one Write per line), as os.Stdout does.
	Evidence io.Writer
	Logger   *slog.Logger
}

// API is a running CommerceApi member.
type API struct {
	Member *cluster.Member
	Server *edge.Server
	Routes *edge.RouteObserver
	Client *grain.Client
}

// topology counts live workflow members as this member sees them.
type topology struct{ l *location.Lookup }

func (t topology) WorkflowMembers() int { return len(t.l.Eligible(grain.KindName)) }

// Start joins the cluster and builds the HTTP edge; call Server.Serve to
// answer requests.
func Start(ctx context.Context, cfg Config) (*API, error) {
	if cfg.Stores == nil {
		return nil, errors.New("edgenode: Stores is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Evidence == nil {
		cfg.Evidence = io.Discard
	}
	st := cfg.Stores
	routes := edge.NewRouteObserver(edge.RouteObserverConfig{
		NodeID: cfg.Cluster.NodeName, Names: st.Location, Evidence: cfg.Evidence, Logger: cfg.Logger,
	})
	cc := cfg.Cluster
	cc.Kinds = nil
	cc.Location = st.Location
	cc.OnMemberJoined = routes.MemberJoined
	cc.OnMemberLeft = routes.MemberLeft
	if cc.RequestTimeout == 0 {
		cc.RequestTimeout = cfg.RequestTimeout
	}
	if cc.Logger == nil {
		cc.Logger = cfg.Logger
	}
	m, err := cluster.Start(ctx, cc)
	if err != nil {
		routes.Close()
		return nil, err
	}
	client := grain.NewClient(m.Lookup, grain.WithRelocations(st.Relocation))
	ecfg := edge.Config{
		NodeID:         cfg.Cluster.NodeName,
		Idempotency:    st.Commerce.Idempotency(),
		Carts:          st.Commerce.Carts(),
		ReadModel:      st.ReadModel,
		Orders:         client,
		Topology:       topology{m.Lookup},
		Operator:       client,
		Admin:          cfg.Admin,
		RequestTimeout: cfg.RequestTimeout,
		Evidence:       cfg.Evidence,
		Logger:         cfg.Logger,
	}
	if cfg.SelfCheck {
		ecfg.SelfCheck = &edge.SelfCheck{
			Fixtures:    st.Fixtures,
			Events:      st.Events,
			Authority:   st.Location,
			Relocations: st.Relocation,
			Envelopes:   node.Envelopes{Store: st.Relocation},
			Projections: st.ReadModel,
			Inventory:   st.Commerce.Inventory(),
			Payment:     st.Commerce.Payment(),
		}
	}
	srv, err := edge.New(ecfg)
	if err != nil {
		m.Stop()
		routes.Close()
		return nil, err
	}
	return &API{Member: m, Server: srv, Routes: routes, Client: client}, nil
}

// Stop shuts the HTTP edge down (waiting for requests in flight until ctx
// ends) and leaves the cluster. An API member hosts no grains, so leaving
// strands nothing.
func (a *API) Stop(ctx context.Context) error {
	err := a.Server.Shutdown(ctx)
	a.Routes.Close()
	a.Member.Stop()
	return err
}
