package edge

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// RouteObserverConfig configures a RouteObserver.
type RouteObserverConfig struct {
	// NodeID is this API process's node name.
	NodeID string
	// Names resolves a member id to its node name.
	Names MemberNames
	// Evidence receives the readiness lines; default discarded.
	Evidence io.Writer
	// Logger; default slog.Default().
	Logger *slog.Logger
	// ResolveTimeout bounds the wait for a left member's published name,
	// and is how long a joined member's name may stay missing before it
	// is logged (the wait itself goes on while the member is live);
	// default one minute.
	ResolveTimeout time.Duration
}

// RouteObserver turns passively observed topology into the object-route
// readiness evidence (docs/contract.md, "Readiness lines"): once a member
// hosting the order workflow kind has joined, it prints
// `shoppingmall-ready kind=object-route node=<NodeId> target=<WorkflowNodeId>`,
// once per workflow node name for the life of the process (a restarted
// workflow-a is the same route). When such a member leaves — a crash seen
// by membership, or a graceful stop — it prints
// `shoppingmall-topology left node=<NodeId> target=<WorkflowNodeId>`, the
// passive sign that this API now answers that member's orders Unavailable.
// It sends no request of its own.
type RouteObserver struct {
	cfg      RouteObserverConfig
	evidence *telemetry.Evidence
	log      *slog.Logger
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	printed map[string]bool // node names announced
	pending map[string]bool // member ids being resolved
	workers map[string]bool // member ids of workflow members seen joining
}

// NewRouteObserver returns an observer; register MemberJoined with the
// cluster before it starts.
func NewRouteObserver(cfg RouteObserverConfig) *RouteObserver {
	if cfg.Evidence == nil {
		cfg.Evidence = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ResolveTimeout <= 0 {
		cfg.ResolveTimeout = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &RouteObserver{cfg: cfg, evidence: telemetry.NewEvidence(cfg.Evidence, cfg.Logger), log: cfg.Logger,
		ctx: ctx, cancel: cancel, printed: map[string]bool{}, pending: map[string]bool{}, workers: map[string]bool{}}
}

// MemberJoined is the cluster's join callback. The cluster calls it while
// holding its member-list lock, so it only starts the name lookup and
// returns.
func (o *RouteObserver) MemberJoined(memberID, address string, kinds []string) {
	if !slices.Contains(kinds, grain.KindName) {
		return
	}
	o.mu.Lock()
	if o.pending[memberID] || o.ctx.Err() != nil {
		o.mu.Unlock()
		return
	}
	o.pending[memberID] = true
	o.workers[memberID] = true
	o.wg.Add(1)
	o.mu.Unlock()
	go o.resolve(memberID)
}

// MemberLeft is the cluster's leave callback; like MemberJoined it only
// starts the name lookup and returns.
func (o *RouteObserver) MemberLeft(memberID, address string) {
	o.mu.Lock()
	if !o.workers[memberID] || o.ctx.Err() != nil {
		o.mu.Unlock()
		return
	}
	delete(o.workers, memberID)
	o.wg.Add(1)
	o.mu.Unlock()
	go o.left(memberID)
}

func (o *RouteObserver) left(memberID string) {
	defer o.wg.Done()
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.ResolveTimeout)
	defer cancel()
	names, err := o.cfg.Names.MemberNames(ctx)
	name := names[memberID]
	if err != nil || name == "" {
		o.log.Warn("a workflow member left without a published name", slog.String("member", memberID), slog.Any("error", err))
		return
	}
	o.evidence.Line("shoppingmall-topology left node=" + o.cfg.NodeID + " target=" + name)
}

// resolve waits, with backoff, for the member's published node name and
// announces the route. It keeps trying for as long as the member is in
// the topology: a store outage when the member started only delays the
// record, which the member retries until it lands. It gives up when the
// member leaves or the observer closes.
func (o *RouteObserver) resolve(memberID string) {
	defer o.wg.Done()
	defer func() {
		o.mu.Lock()
		delete(o.pending, memberID)
		o.mu.Unlock()
	}()
	wait := retry.Backoff(10*time.Millisecond, 5*time.Second)
	warnAt := time.Now().Add(o.cfg.ResolveTimeout)
	for {
		ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
		names, err := o.cfg.Names.MemberNames(ctx)
		cancel()
		if name := names[memberID]; err == nil && name != "" {
			o.announce(name)
			return
		}
		if !warnAt.IsZero() && time.Now().After(warnAt) {
			o.log.Warn("no node name published for a workflow member yet; still waiting", slog.String("member", memberID), slog.Any("error", err))
			warnAt = time.Time{}
		}
		t := time.NewTimer(wait.NextBackOff())
		select {
		case <-o.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		o.mu.Lock()
		live := o.workers[memberID]
		o.mu.Unlock()
		if !live {
			return
		}
	}
}

func (o *RouteObserver) announce(name string) {
	o.mu.Lock()
	first := !o.printed[name]
	o.printed[name] = true
	o.mu.Unlock()
	if first {
		o.evidence.Line("shoppingmall-ready kind=object-route node=" + o.cfg.NodeID + " target=" + name)
	}
}

// Targets returns the workflow node names announced so far, sorted.
func (o *RouteObserver) Targets() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.printed))
	for n := range o.printed {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Close stops pending lookups and waits for them.
func (o *RouteObserver) Close() {
	o.mu.Lock()
	o.cancel()
	o.mu.Unlock()
	o.wg.Wait()
}
