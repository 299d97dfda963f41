package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// ActivatorName is the actor name of each member's activator.
const ActivatorName = "shoppingmall-activator"

// Config configures a Lookup.
type Config struct {
	Store location.Store
	// NodeName is this process's operator-facing name (api-a, workflow-b).
	NodeName string
	// Schema is the newest event schema this member's grains read, which
	// it advertises with its name (location.Members.PutMember) for the
	// compatibility level and placement; 0 for a member that hosts no
	// grains that read events (an API).
	Schema int
	// StateSchema returns the highest event schema an identity's state
	// holds (eventstore.SchemaReader), so that in a cluster of mixed
	// builds an activation goes only to a member that reads it
	// (versions.go); nil places without looking, every member's own
	// refusal deciding.
	StateSchema func(ctx context.Context, kind, id string) (int, error)
	// CreateLockTTL bounds how long a dead creator can block an identity.
	// A live creator extends it before asking each member, so it must
	// only exceed ActivationTimeout; default ActivationTimeout + 3s.
	CreateLockTTL time.Duration
	// ActivationTimeout bounds one activation request to one member,
	// including the grain's open. A member that does not answer in time
	// is skipped and the next one is asked; default 1s, well below the 2s
	// after which protoactor's health check drops a silent member, so a
	// paused member costs a cold start one second, not its failure.
	ActivationTimeout time.Duration
	// WaitTimeout bounds waiting for another caller's Creating or Moving.
	WaitTimeout time.Duration
	Logger      *slog.Logger
	// Metrics is the process's registry, for the activator's metrics
	// (metrics.go); nil counts into metrics served nowhere.
	Metrics *telemetry.Registry
	// TracerProvider makes the client span of every grain call through
	// this lookup's Context (trace.go); nil uses the global provider.
	TracerProvider trace.TracerProvider
	// Limits bound the work this member takes on as a host; the zero
	// value takes the defaults (DefaultLimits).
	Limits Limits
}

// Limits bound what one member hosts, so that a burst is answered
// Overloaded at once instead of queueing work that its callers give up
// on: memory, goroutines and the Location Store's round trips all grow
// with what a member holds. A value <= 0 takes its default.
type Limits struct {
	// MailboxCapacity is how many requests one hosted grain's mailbox
	// holds; the next one is answered Overloaded at once (mailbox.go).
	MailboxCapacity int
	// MaxHosted is how many grains the member hosts. Beyond it, a new
	// activation first passivates a grain that reported no work left (a
	// terminal or stuck order); when every hosted grain has work left it
	// is refused with ACTIVATION_FAILURE_OVERLOADED. A grain with work
	// left is never passivated to make room.
	MaxHosted int
	// MaxActivations is how many activations the member runs at once:
	// grains opening their state, first commands being delivered, and
	// grains passivating to make room. The next one is refused with
	// ACTIVATION_FAILURE_OVERLOADED.
	MaxActivations int
}

// DefaultLimits are the limits a zero Limits takes. An order grain holds
// its fold and a mailbox, a few KiB: 20,000 of them stay well inside a
// workflow container's memory. One activation is a few Location and
// stream round trips; 256 at once is far more than a member's store link
// completes in a second, and no more is useful. A grain answers one
// caller at a time and its callers are few (the order's client, an
// operator, a drain); 64 queued requests is a queue no caller outlives.
var DefaultLimits = Limits{MailboxCapacity: 64, MaxHosted: 20000, MaxActivations: 256}

func (l Limits) withDefaults() Limits {
	if l.MailboxCapacity <= 0 {
		l.MailboxCapacity = DefaultLimits.MailboxCapacity
	}
	if l.MaxHosted <= 0 {
		l.MaxHosted = DefaultLimits.MaxHosted
	}
	if l.MaxActivations <= 0 {
		l.MaxActivations = DefaultLimits.MaxActivations
	}
	return l
}

// Activation is what a grain learns when it is activated.
type Activation struct {
	Kind       string
	Identity   string
	Generation int64
	Reason     ActivationReason
	// Minted: the requester minted the identity just before asking (see
	// WithMintedIdentity), so no state can exist for it yet.
	Minted bool
	// Deadline is when the activation's requester gives up: a grain that
	// opens its state must be done by then. Zero means none.
	Deadline time.Time
	// Lookup lets the grain release its authority, confirm it, or move
	// itself.
	Lookup Placement

	report   func(*opened)
	retire   func(*actor.PID)
	work     func(*actor.PID, bool)
	stays    func(*actor.PID)
	reported atomic.Bool
	// workState is what WorkLeft last told the activator.
	workState atomic.Int32
	// ready is the Ready commit the activator left to the grain
	// (ReadyCarrier); nil while there is none.
	ready atomic.Pointer[deferredReady]
}

// Placement is what a grain may ask of the placement that activated it.
// Methods are safe for concurrent use; each is at most a few Location
// Store round trips and honours ctx.
type Placement interface {
	// Release makes the identity Missing if pid is still its Ready owner
	// (explicit close, idle passivation, an activation that owned
	// nothing). gen says whether the generation it took is kept or given
	// back (location.Generation).
	Release(ctx context.Context, kind, id string, pid *actor.PID, gen location.Generation) error
	// Confirm tells whether the Location record names pid, at generation,
	// as the Ready owner. A grain runs no work of its own before that.
	Confirm(ctx context.Context, kind, id string, pid *actor.PID, generation int64) (Confirmation, error)
	// Move relocates the identity with the same generation (see
	// (*Lookup).Move).
	Move(ctx context.Context, p MovePlan) (location.Record, error)
	// NodeNames returns member id → node name.
	NodeNames(ctx context.Context) (map[string]string, error)
	// Self is this member's id.
	Self() string
}

// Confirmation is what the Location record says of an activation.
type Confirmation int

const (
	// Confirmed: the record names the grain as its Ready owner.
	Confirmed Confirmation = iota
	// Pending: the record is Creating or Moving at the grain's generation;
	// its activator has not committed yet.
	Pending
	// Superseded: the record names another owner or generation, or none,
	// or this member is recorded gone or fenced itself. The grain owns
	// nothing and must stop without touching the record.
	Superseded
)

func (c Confirmation) String() string {
	switch c {
	case Confirmed:
		return "confirmed"
	case Pending:
		return "pending"
	case Superseded:
		return "superseded"
	}
	return fmt.Sprintf("Confirmation(%d)", int(c))
}

// Lookup is a cluster.IdentityLookup backed by the Location Store.
type Lookup struct {
	cfg     Config
	store   location.Store
	log     *slog.Logger
	cluster *pcluster.Cluster
	kinds   map[string]bool // kinds hosted here
	metrics *activatorMetrics

	mu        sync.Mutex
	members   map[string]*pcluster.Member // live members by id
	byAddress map[string]string           // address → member id
	leaving   map[string]chan struct{}    // address → closed when it leaves
	inflight  map[string]*resolveCall
	ready     chan struct{}
	readyOnce sync.Once
	draining  atomic.Bool
	rr        atomic.Uint64
	activator *actor.PID
	sub       *eventstream.Subscription
	onJoin    []func(memberID, address string, kinds []string)
	onLeave   []func(memberID, address string)
	named     chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	gone      goneState
	// links holds the verdicts on links that drop silently (link.go).
	links linkState
	// watch is the self-fence watch's state (selffence.go).
	watch watchState
	// schemas is the view of what each member reads (versions.go).
	schemas schemaView
}

type resolveCall struct {
	done chan struct{}
	pid  *actor.PID
	err  error
}

// New returns a Lookup; pass it to cluster.Configure.
func New(cfg Config) *Lookup {
	if cfg.ActivationTimeout == 0 {
		cfg.ActivationTimeout = time.Second
	}
	if cfg.CreateLockTTL <= cfg.ActivationTimeout {
		cfg.CreateLockTTL = cfg.ActivationTimeout + 3*time.Second
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	return &Lookup{
		cfg:       cfg,
		store:     cfg.Store,
		log:       cfg.Logger,
		members:   map[string]*pcluster.Member{},
		byAddress: map[string]string{},
		leaving:   map[string]chan struct{}{},
		inflight:  map[string]*resolveCall{},
		ready:     make(chan struct{}),
		named:     make(chan struct{}),
		metrics:   newActivatorMetrics(cfg.Metrics),
	}
}

// Store returns the Location Store behind the lookup.
func (l *Lookup) Store() location.Store { return l.store }

// OnMemberJoined registers f for every member that joins the topology,
// observed passively. Register before the cluster starts.
func (l *Lookup) OnMemberJoined(f func(memberID, address string, kinds []string)) {
	l.mu.Lock()
	l.onJoin = append(l.onJoin, f)
	l.mu.Unlock()
}

// OnMemberLeft registers f for every member that leaves the topology,
// observed passively. Register before the cluster starts.
func (l *Lookup) OnMemberLeft(f func(memberID, address string)) {
	l.mu.Lock()
	l.onLeave = append(l.onLeave, f)
	l.mu.Unlock()
}

// Setup implements cluster.IdentityLookup. It runs inside StartMember,
// before any member is known.
func (l *Lookup) Setup(c *pcluster.Cluster, kinds []string, isClient bool) {
	l.cluster = c
	l.startGone()
	l.startSchemas()
	l.kinds = map[string]bool{}
	for _, k := range kinds {
		if k != pcluster.TopicActorKind {
			l.kinds[k] = true
		}
	}
	sys := c.ActorSystem
	sub := sys.EventStream.Subscribe(func(ev any) {
		switch e := ev.(type) {
		case *pcluster.ClusterTopology:
			// Published under the member list's lock: touch only our state.
			l.onTopology(e)
		case *remote.EndpointTerminatedEvent:
			l.onEndpointTerminated(e.Address)
		case *GoneRecorded:
			l.nudgeGone()
		case *pcluster.ActivationTerminated:
			if e.ClusterIdentity != nil {
				c.PidCache.RemoveByValue(e.ClusterIdentity.Identity, e.ClusterIdentity.Kind, e.Pid)
			}
		}
	})
	l.sub = sub
	if !isClient && len(l.kinds) > 0 {
		pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
			return newActivator(l, hostMailbox(sys, l.cfg.Limits.MailboxCapacity, l.metrics.refusedMailbox))
		}, actor.WithDispatcher(hostDispatcher)), ActivatorName)
		if err != nil {
			l.log.Error("activator spawn failed", slog.Any("error", err))
		}
		l.activator = pid
	}
	if l.cfg.NodeName != "" {
		go l.publishName(sys.ID)
	}
}

// publishName records member id → node name and the schema it reads,
// retrying with capped backoff until it lands: readiness and topology
// evidence, relocation targets, the compatibility level and operators all
// read it, and a store outage at start-up must not leave it missing for
// the life of the process.
func (l *Lookup) publishName(memberID string) {
	wait := retry.Backoff(100*time.Millisecond, 5*time.Second)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.store.PutMember(ctx, memberID, l.cfg.NodeName, l.cfg.Schema)
		cancel()
		if err == nil {
			if attempt > 1 {
				l.log.Info("member name published", slog.String("node", l.cfg.NodeName), slog.Int("attempts", attempt))
			}
			close(l.named)
			return
		}
		backoff := wait.NextBackOff()
		l.log.Warn("publishing member name failed; retrying", slog.String("node", l.cfg.NodeName),
			slog.Int("attempt", attempt), slog.Duration("backoff", backoff), slog.Any("error", err))
		t := time.NewTimer(backoff)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// NamePublished is closed once this member's node name is recorded.
func (l *Lookup) NamePublished() <-chan struct{} { return l.named }

// Shutdown implements cluster.IdentityLookup.
func (l *Lookup) Shutdown() {
	if l.sub != nil && l.cluster != nil {
		l.cluster.ActorSystem.EventStream.Unsubscribe(l.sub)
	}
	l.stopOnce.Do(func() {
		if l.stop != nil {
			close(l.stop)
		}
	})
}

func (l *Lookup) onTopology(t *pcluster.ClusterTopology) {
	l.mu.Lock()
	members := map[string]*pcluster.Member{}
	byAddr := map[string]string{}
	for _, m := range t.Members {
		members[m.Id] = m
		byAddr[m.Address()] = m.Id
	}
	for _, m := range t.Left {
		if ch, ok := l.leaving[m.Address()]; ok {
			close(ch)
			delete(l.leaving, m.Address())
		}
	}
	l.members, l.byAddress = members, byAddr
	l.updateLiveGone()
	joins := append([]func(string, string, []string){}, l.onJoin...)
	leaves := append([]func(string, string){}, l.onLeave...)
	self := l.cluster != nil && members[l.cluster.ActorSystem.ID] != nil
	l.mu.Unlock()
	if self {
		l.readyOnce.Do(func() { close(l.ready) })
	}
	l.noteAPIs(t.Members)
	l.observeLeft(t.Left)
	if len(t.Joined) > 0 {
		l.nudgeSchemas()
	}
	for _, m := range t.Joined {
		for _, f := range joins {
			f(m.Id, m.Address(), m.Kinds)
		}
	}
	for _, m := range t.Left {
		for _, f := range leaves {
			f(m.Id, m.Address())
		}
	}
}

// onEndpointTerminated fails in-flight requests to an address as soon as
// remoting reports the connection gone; the topology confirms later.
func (l *Lookup) onEndpointTerminated(addr string) {
	l.mu.Lock()
	if ch, ok := l.leaving[addr]; ok {
		close(ch)
		delete(l.leaving, addr)
	}
	l.mu.Unlock()
}

// leaveSignal returns a channel closed when the member at addr leaves.
func (l *Lookup) leaveSignal(addr string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.leaving[addr]
	if !ok {
		ch = make(chan struct{})
		if _, live := l.byAddress[addr]; !live && addr != l.selfAddress() {
			close(ch)
			return ch
		}
		l.leaving[addr] = ch
	}
	return ch
}

func (l *Lookup) selfAddress() string {
	if l.cluster == nil {
		return ""
	}
	return l.cluster.ActorSystem.Address()
}

// WaitReady blocks until the first topology that holds this member.
func (l *Lookup) WaitReady(ctx context.Context) error {
	select {
	case <-l.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for first topology", location.ErrTimeout)
	}
}

// Live reports whether a member id is in the current topology.
func (l *Lookup) Live(memberID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.members[memberID] != nil
}

// EligibleIDs is Eligible's member ids.
func (l *Lookup) EligibleIDs(kind string) []string {
	ms := l.Eligible(kind)
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.Id
	}
	return ids
}

// Eligible returns the live members hosting kind that are not recorded
// gone, sorted by id.
func (l *Lookup) Eligible(kind string) []*pcluster.Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*pcluster.Member
	for _, m := range l.members {
		if m.HasKind(kind) && !l.isGone(m.Id) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// Get implements cluster.IdentityLookup for callers that go around our
// context; errors become nil as that interface demands.
func (l *Lookup) Get(ci *pcluster.ClusterIdentity) *actor.PID {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.WaitTimeout)
	defer cancel()
	pid, err := l.Resolve(ctx, ci.Kind, ci.Identity)
	if err != nil {
		return nil
	}
	return pid
}

// RemovePid implements cluster.IdentityLookup.
func (l *Lookup) RemovePid(ci *pcluster.ClusterIdentity, pid *actor.PID) {
	l.Forget(ci.Kind, ci.Identity, pid)
}

// Forget drops a cached pid so the next call reads the Location Store.
func (l *Lookup) Forget(kind, id string, pid *actor.PID) {
	if pid == nil {
		l.cluster.PidCache.Remove(id, kind)
		return
	}
	l.cluster.PidCache.RemoveByValue(id, kind, pid)
}

// Resolve returns the pid of the identity's owner, activating it when the
// identity is Missing. Warm calls are answered from the pid cache without a
// Redis round trip. A Ready identity whose owner has left the topology, or
// is recorded gone (even if this lookup still sees it live), is
// ErrUnavailable at once; nothing is activated anywhere.
func (l *Lookup) Resolve(ctx context.Context, kind, id string) (*actor.PID, error) {
	if token, ok := heldToken(ctx, kind, id); ok {
		pid, _, err := l.resolveHeld(ctx, kind, id, token, nil)
		return pid, err
	}
	if pid, ok := l.cluster.PidCache.Get(id, kind); ok && pid != nil {
		if !l.goneAddress(pid.Address) {
			return pid, nil
		}
		l.cluster.PidCache.RemoveByValue(id, kind, pid)
	}
	if err := l.WaitReady(ctx); err != nil {
		return nil, err
	}
	key := kind + "/" + id
	l.mu.Lock()
	if c, ok := l.inflight[key]; ok {
		l.mu.Unlock()
		select {
		case <-c.done:
			return c.pid, c.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: resolving %s", location.ErrTimeout, key)
		}
	}
	c := &resolveCall{done: make(chan struct{})}
	l.inflight[key] = c
	l.mu.Unlock()

	c.pid, c.err = l.resolve(ctx, kind, id)
	if c.err == nil {
		l.cluster.PidCache.Set(id, kind, c.pid)
	}
	l.mu.Lock()
	delete(l.inflight, key)
	l.mu.Unlock()
	close(c.done)
	return c.pid, c.err
}

// resolveHeld activates generation 1 of an identity whose caller minted
// it and holds its creation lock (WithHeldCreation): no other resolution
// can be creating it, so none is joined, and nothing can be cached for
// it. Having claimed the lock, it gives it back on every failure, as
// create does, so a retry need not wait for the lock to expire. With
// first, the member (or, for a ReadyCarrier, the grain's first write)
// records the grain Ready and the grain's reply to first comes back (see
// Activate.first); it is nil when first was not delivered.
func (l *Lookup) resolveHeld(ctx context.Context, kind, id, token string, first *firstCommand) (*actor.PID, any, error) {
	if err := l.WaitReady(ctx); err != nil {
		_ = l.store.AbortCreate(context.WithoutCancel(ctx), kind, id, token)
		return nil, nil, err
	}
	pid, reply, err := l.create(ctx, kind, id, token, 1, ActivationReason_ACTIVATION_REASON_COLD, first)
	if pid != nil {
		l.cluster.PidCache.Set(id, kind, pid)
	}
	return pid, reply, err
}

// firstCommand is a command sent with its identity's activation.
type firstCommand struct {
	msg      *Message
	headers  map[string]string
	deadline time.Time
}

// resolveSending is Resolve for a caller about to send message. When
// the caller holds the identity's creation lock (WithHeldCreation), the
// message travels with the activation, and the grain's reply is returned
// too; otherwise, and whenever the reply is nil, the caller sends message
// itself.
func (l *Lookup) resolveSending(ctx context.Context, kind, id string, message any) (*actor.PID, any, error) {
	token, ok := heldToken(ctx, kind, id)
	if !ok {
		pid, err := l.Resolve(ctx, kind, id)
		return pid, nil, err
	}
	msg, err := packMessage(message)
	if err != nil {
		pid, _, err := l.resolveHeld(ctx, kind, id, token, nil)
		return pid, nil, err
	}
	first := &firstCommand{msg: msg, deadline: deadline(ctx)}
	if h := headersOf(ctx); len(h) > 0 || trace.SpanContextFromContext(ctx).IsValid() {
		first.headers = map[string]string{}
		for k, v := range h {
			first.headers[k] = v
		}
		telemetry.Propagator().Inject(ctx, propagation.MapCarrier(first.headers))
	}
	return l.resolveHeld(ctx, kind, id, token, first)
}

func (l *Lookup) resolve(ctx context.Context, kind, id string) (*actor.PID, error) {
	wait := retry.Backoff(2*time.Millisecond, 64*time.Millisecond)
	for {
		token := uuid.NewString()
		acquired, gen, rec, err := l.store.BeginCreate(ctx, kind, id, token, l.cfg.CreateLockTTL)
		if err != nil {
			return nil, err
		}
		switch {
		case acquired:
			reason := ActivationReason_ACTIVATION_REASON_COLD
			if rec.TakenOver {
				reason = ActivationReason_ACTIVATION_REASON_TAKEOVER
			}
			pid, _, err := l.create(ctx, kind, id, token, gen, reason, nil)
			return pid, err
		case rec.Status == location.Ready:
			if !l.Live(rec.Owner) {
				if l.ownerUnreachable(ctx, rec.Owner) {
					return nil, fmt.Errorf("%w: %s is owned by member %s, which this member lost sight of but which is not recorded gone", ErrOwnerUnreachable, id, rec.Owner)
				}
				return nil, fmt.Errorf("%w: %s is owned by member %s, which has left", ErrUnavailable, id, rec.Owner)
			}
			if l.isGone(rec.Owner) {
				return nil, fmt.Errorf("%w: %s is owned by member %s, which is recorded gone", ErrUnavailable, id, rec.Owner)
			}
			return actor.NewPID(rec.PIDAddress, rec.PIDID), nil
		case rec.Status == location.Moving && !l.Live(rec.Owner) && l.ownerUnreachable(ctx, rec.Owner):
			return nil, fmt.Errorf("%w: %s is moving from member %s, which this member lost sight of but which is not recorded gone", ErrOwnerUnreachable, id, rec.Owner)
		case rec.Status == location.Moving && (!l.Live(rec.Owner) || l.isGone(rec.Owner)):
			return nil, fmt.Errorf("%w: %s is moving from member %s, which has left or is recorded gone", ErrUnavailable, id, rec.Owner)
		}
		// Creating or Moving: wait for Ready.
		t := time.NewTimer(wait.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: waiting for %s to become Ready", location.ErrTimeout, id)
		case <-t.C:
		}
	}
}

// create cold-activates an identity whose creation lock token holds, on
// the next eligible member round-robin, and records it Ready. reason is
// COLD, or TAKEOVER when a takeover reset the record: the activation is
// the same, only its cause is told (and counted) apart. A member
// that does not answer, or refuses, is skipped while the lock is extended,
// so one frozen member cannot fail a cold start. A member that is busy
// refuses at once (ACTIVATION_FAILURE_OVERLOADED) and is skipped too; when
// no member took the activation and one of them was busy or silent, the
// creation fails with ErrOverloaded, never ErrNoMember, which means that
// no member can host the kind at all. A grain that could not
// open its state aborts the creation: the lock is given back and the next
// command activates again.
//
// With first, the member records the grain Ready (the lock's token goes
// with the request) and answers with the grain's reply to first, returned
// here. Skipping such a member is as safe: the record names at most one
// grain, since a commit takes the lock it needs, and nothing a grain
// writes lands before its commit (a ReadyCarrier's first write is the
// commit, checked against the lock). A pid with an error is a grain
// recorded Ready that did not answer first in time.
func (l *Lookup) create(ctx context.Context, kind, id, token string, gen int64, reason ActivationReason, first *firstCommand) (*actor.PID, any, error) {
	abort := func() { _ = l.store.AbortCreate(context.WithoutCancel(ctx), kind, id, token) }
	candidates := l.Eligible(kind)
	if len(candidates) == 0 {
		abort()
		return nil, nil, fmt.Errorf("%w: kind %s", ErrNoMember, kind)
	}
	start := int(l.rr.Add(1))
	candidates = l.downLinksLast(candidates, start)
	// After the rotation, which readers keeps within its groups.
	candidates, err := l.readers(ctx, kind, id, candidates)
	if err != nil {
		abort()
		return nil, nil, err
	}
	start = 0
	var lastErr error
	// busy: a member refused for want of room, or did not answer in time.
	// Either way there are members for the kind, and a retry soon may
	// find room: the creation fails as ErrOverloaded, never ErrNoMember.
	// unreadable: a member's build could not read the state; unless one
	// was busy, the creation fails as ErrVersionUnsupported.
	busy, unreadable := false, false
	for i := range candidates {
		m := candidates[(start+i)%len(candidates)]
		if i > 0 {
			// The lock must outlive this attempt, or another caller could
			// create the identity on a third member meanwhile.
			if err := l.store.ExtendCreate(ctx, kind, id, token, l.cfg.CreateLockTTL); err != nil {
				abort()
				return nil, nil, err
			}
		}
		pid, reply, err := l.activateOn(ctx, m, kind, id, gen, reason, token, first)
		for raised := 0; err != nil && raised < maxFenceRaises; raised++ {
			var af *activationError
			if !errors.As(err, &af) || af.failure != ActivationFailure_ACTIVATION_FAILURE_FENCED || af.fenceAt < gen {
				break
			}
			// The state is fenced at or above the generation the record
			// gave: the record is older than the state (restored from an
			// older snapshot, or a write of it lost in a failover). The
			// fence keeps whoever wrote at that generation from writing
			// again once this activation opens above it, so moving up is
			// safe; staying would refuse every activation for good.
			if rerr := l.store.RaiseCreating(ctx, kind, id, token, af.fenceAt); rerr != nil {
				abort()
				return nil, nil, rerr
			}
			l.log.Warn("the identity's state is fenced above its Location record's generation; record raised", slog.String("identity", kind+"/"+id),
				slog.Int64("recordGeneration", gen-1), slog.Int64("fenceGeneration", af.fenceAt), slog.Int64("activating", af.fenceAt+1))
			gen = af.fenceAt + 1
			if rerr := l.store.ExtendCreate(ctx, kind, id, token, l.cfg.CreateLockTTL); rerr != nil {
				abort()
				return nil, nil, rerr
			}
			pid, reply, err = l.activateOn(ctx, m, kind, id, gen, reason, token, first)
		}
		if err != nil {
			if pid != nil {
				return pid, nil, err
			}
			lastErr = err
			var af *activationError
			if errors.As(err, &af) && (af.timeout || af.failure == ActivationFailure_ACTIVATION_FAILURE_OVERLOADED) {
				busy = true
			}
			if errors.As(err, &af) && (af.failure == ActivationFailure_ACTIVATION_FAILURE_VERSION_UNSUPPORTED || af.newer()) {
				unreadable = true
			}
			if errors.As(err, &af) && !af.tryNext() {
				abort()
				return nil, nil, err
			}
			if ctx.Err() != nil {
				break
			}
			if i+1 < len(candidates) {
				level := slog.LevelWarn
				if errors.Is(err, ErrOverloaded) {
					// Counted by the member that refused; a warning per
					// refusal would flood the log exactly when it matters.
					level = slog.LevelDebug
				}
				l.log.Log(ctx, level, "activation failed on a member; trying next member", slog.String("identity", kind+"/"+id),
					slog.String("member", m.Id), slog.Any("error", err))
			}
			continue
		}
		if first != nil {
			return pid, reply, nil
		}
		err = l.store.CommitReady(context.WithoutCancel(ctx), kind, id, token, location.Record{
			Owner: m.Id, PIDAddress: pid.Address, PIDID: pid.Id, Generation: gen,
		})
		if err != nil {
			// The grain cannot own what was not recorded: stop it. Should
			// the commit have landed after all, the record names a stopped
			// pid, which the next caller repairs on its dead letter.
			l.cluster.ActorSystem.Root.Stop(pid)
			return nil, nil, err
		}
		return pid, nil, nil
	}
	abort()
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("%w: activating %s: %v", location.ErrTimeout, id, lastErr)
	}
	if busy {
		// lastErr's text only: a member's timeout must not make this a
		// Timeout (nothing was done, and the caller may retry at once).
		return nil, nil, fmt.Errorf("%w: activating %s: no member had room in time: %v", ErrOverloaded, id, lastErr)
	}
	if unreadable {
		// A member of a build that reads the state may join (a rolling
		// upgrade): an outage of the builds, not a lack of members.
		return nil, nil, fmt.Errorf("%w: activating %s: %v", ErrVersionUnsupported, id, lastErr)
	}
	return nil, nil, fmt.Errorf("%w: activating %s: %v", ErrNoMember, id, lastErr)
}

// maxFenceRaises bounds how often one creation raises its record above a
// fenced state (ACTIVATION_FAILURE_FENCED) and tries again: once is the
// rule; a second covers a takeover's fence raised meanwhile.
const maxFenceRaises = 2

// activationError is a member's refusal or failure to activate.
type activationError struct {
	member  string
	failure ActivationFailure
	text    string
	timeout bool
	// fenceAt is the generation the state is fenced at, with
	// ACTIVATION_FAILURE_FENCED.
	fenceAt int64
}

func (e *activationError) Error() string {
	if e.timeout {
		return fmt.Sprintf("activate on %s: no answer in time", e.member)
	}
	return fmt.Sprintf("activate on %s: %s", e.member, e.text)
}

// Unwrap classes the failure with this package's sentinels.
func (e *activationError) Unwrap() error {
	switch {
	case e.timeout:
		return location.ErrTimeout
	case e.failure == ActivationFailure_ACTIVATION_FAILURE_STORE_UNAVAILABLE:
		return location.ErrStoreUnavailable
	case e.failure == ActivationFailure_ACTIVATION_FAILURE_OPEN_FAILED, e.failure == ActivationFailure_ACTIVATION_FAILURE_FENCED:
		return ErrOpen
	case e.failure == ActivationFailure_ACTIVATION_FAILURE_LOCK_LOST:
		return location.ErrLockLost
	case e.failure == ActivationFailure_ACTIVATION_FAILURE_UNANSWERED:
		return location.ErrTimeout
	case e.failure == ActivationFailure_ACTIVATION_FAILURE_OVERLOADED:
		return ErrOverloaded
	case e.failure == ActivationFailure_ACTIVATION_FAILURE_VERSION_UNSUPPORTED, e.newer():
		return ErrVersionUnsupported
	}
	return nil
}

// newer reports a failure this build has no name for: a newer build's
// refusal. Like a reason code it does not know (the grain's
// ErrUnknownReason), it is an outage of the builds, not a bug: the next
// member is asked, and with none left the creation is
// ErrVersionUnsupported, a well-formed 503, never a 500.
func (e *activationError) newer() bool {
	if e.timeout {
		return false
	}
	_, known := ActivationFailure_name[int32(e.failure)]
	return !known
}

// tryNext tells whether another member may succeed where this one failed:
// not when the grain's state itself could not be opened, nor when the
// creation lock is gone.
func (e *activationError) tryNext() bool {
	switch e.failure {
	case ActivationFailure_ACTIVATION_FAILURE_STORE_UNAVAILABLE, ActivationFailure_ACTIVATION_FAILURE_OPEN_FAILED,
		ActivationFailure_ACTIVATION_FAILURE_LOCK_LOST, ActivationFailure_ACTIVATION_FAILURE_UNANSWERED,
		ActivationFailure_ACTIVATION_FAILURE_FENCED:
		return false
	}
	return true
}

func (l *Lookup) activateOn(ctx context.Context, m *pcluster.Member, kind, id string, gen int64, reason ActivationReason,
	token string, first *firstCommand) (*actor.PID, any, error) {
	timeout := l.cfg.ActivationTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, nil, &activationError{member: m.Id, timeout: true}
	}
	deadline := time.Now().Add(timeout)
	req := &Activate{Kind: kind, Identity: id, Generation: gen, Reason: reason, DeadlineUnixMs: deadline.UnixMilli(),
		Minted: IsMinted(ctx, kind, id)}
	wait := timeout
	if first != nil {
		req.Token, req.First, req.FirstHeaders = token, first.msg, first.headers
		req.FirstDeadlineUnixMs = first.deadline.UnixMilli()
		wait = time.Until(first.deadline)
	}
	f := l.cluster.ActorSystem.Root.RequestFuture(actor.NewPID(m.Address(), ActivatorName), req, wait)
	res, err := l.activationResult(ctx, f, timeout, first != nil, m, kind, id, gen)
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return nil, nil, &activationError{member: m.Id, timeout: true}
		}
		return nil, nil, &activationError{member: m.Id, failure: ActivationFailure_ACTIVATION_FAILURE_REFUSED, text: err.Error()}
	}
	a, ok := res.(*Activated)
	if !ok {
		return nil, nil, &activationError{member: m.Id, failure: ActivationFailure_ACTIVATION_FAILURE_REFUSED, text: fmt.Sprintf("unexpected reply %T", res)}
	}
	var pid *actor.PID
	if a.PidId != "" {
		pid = actor.NewPID(a.PidAddress, a.PidId)
	}
	if a.Error != "" {
		if a.Failure != ActivationFailure_ACTIVATION_FAILURE_UNANSWERED {
			pid = nil
		}
		return pid, nil, &activationError{member: m.Id, failure: a.Failure, text: a.Error, fenceAt: a.FenceGeneration}
	}
	if a.Reply == nil {
		return pid, nil, nil
	}
	reply, err := unpackMessage(a.Reply)
	if err != nil {
		// The grain ran the command; what it said is lost to this caller.
		return pid, nil, &activationError{member: m.Id, failure: ActivationFailure_ACTIVATION_FAILURE_UNANSWERED, text: err.Error()}
	}
	return pid, reply, nil
}

// activationResult waits for an activation's answer for timeout. One that
// carries a first command may take longer, since the grain also runs it:
// past timeout, it is waited for only if the member recorded the grain
// Ready meanwhile (it owns the identity and runs the command); otherwise
// it is a timeout, and the caller may try another member.
func (l *Lookup) activationResult(ctx context.Context, f *actor.Future, timeout time.Duration, withFirst bool,
	m *pcluster.Member, kind, id string, gen int64) (any, error) {
	if !withFirst {
		return f.Result()
	}
	done := awaitFuture(f)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.res, r.err
	case <-t.C:
	}
	rec, err := l.store.Get(ctx, kind, id)
	if err != nil || rec.Status != location.Ready || rec.Owner != m.Id || rec.Generation != gen {
		endFuture(l.cluster.ActorSystem, f)
		return nil, actor.ErrTimeout
	}
	r := <-done
	return r.res, r.err
}

// Release gives up authority for an identity owned by pid (explicit close
// or idle passivation); gen says whether the generation it took is kept.
func (l *Lookup) Release(ctx context.Context, kind, id string, pid *actor.PID, gen location.Generation) error {
	var err error
	if r, ok := l.store.(location.OwnerReleaser); ok {
		// The grain runs here, so its record names this member: the
		// index entry can go in the release's own round trip.
		_, err = r.ReleaseAt(ctx, kind, id, l.Self(), pid.Id, gen)
	} else {
		_, err = l.store.Release(ctx, kind, id, pid.Id, gen)
	}
	l.cluster.PidCache.RemoveByValue(id, kind, pid)
	return err
}

// Confirm implements Placement.
func (l *Lookup) Confirm(ctx context.Context, kind, id string, pid *actor.PID, generation int64) (Confirmation, error) {
	if l.selfFenced() {
		return Superseded, nil
	}
	rec, err := l.store.Get(ctx, kind, id)
	if err != nil {
		return Pending, err
	}
	switch {
	case rec.Status == location.Creating && rec.Generation+1 == generation:
		// A creation records its generation only when it commits.
		return Pending, nil
	case rec.Generation != generation:
		return Superseded, nil
	case rec.Status == location.Ready && rec.PIDID == pid.Id && rec.PIDAddress == pid.Address:
		return Confirmed, nil
	case rec.Status == location.Moving:
		return Pending, nil
	}
	return Superseded, nil
}

// repairDeadPID makes a Ready record Missing when it still names pid at a
// live owner member that has just answered a dead letter for it: the grain
// provably does not exist there (its open failed after the record was
// written, or it stopped without releasing). Matching the member id, not
// the node name, keeps a restarted node's new incarnation out of it; the
// next activation's higher generation fences anything left behind.
func (l *Lookup) repairDeadPID(ctx context.Context, kind, id string, pid *actor.PID) (bool, error) {
	l.mu.Lock()
	owner, live := l.byAddress[pid.Address]
	l.mu.Unlock()
	if !live || l.isGone(owner) {
		// A gone member's records stay as they are until an operator
		// takes them over.
		return false, nil
	}
	ok, err := l.store.ReleaseDead(ctx, kind, id, owner, pid.Id)
	if ok {
		l.log.Warn("released a Ready record whose grain is gone", slog.String("identity", kind+"/"+id),
			slog.String("member", owner), slog.String("pid", pid.Id))
	}
	return ok, err
}

// SetDraining makes this member's activator refuse new activations, so a
// graceful stop can move its grains away without new ones arriving.
func (l *Lookup) SetDraining(v bool) { l.draining.Store(v) }

// NodeNames returns member id → node name for live members.
func (l *Lookup) NodeNames(ctx context.Context) (map[string]string, error) {
	return l.store.MemberNames(ctx)
}

// MemberByNode finds the live member id published under a node name,
// not recorded gone.
func (l *Lookup) MemberByNode(ctx context.Context, node string) (*pcluster.Member, error) {
	names, err := l.store.MemberNames(ctx)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, n := range names {
		if n == node && !l.isGone(id) {
			if m := l.members[id]; m != nil {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: no live member named %s", ErrNoMember, node)
}

// Cluster returns the protoactor cluster the lookup serves.
func (l *Lookup) Cluster() *pcluster.Cluster { return l.cluster }

// Self returns this member's id.
func (l *Lookup) Self() string { return l.cluster.ActorSystem.ID }

type mintedKey struct{}

// WithMintedIdentity marks ctx as coming from the caller that minted
// kind/id just before (a new order's id that won its idempotency
// reservation). No state can exist for such an identity, so an
// activation that a call under ctx causes tells its grain
// (Activation.Minted), whose first cold generation may skip reading any.
// A wrong claim costs only that saving: the grain's first write is still
// checked against what is stored.
func WithMintedIdentity(ctx context.Context, kind, id string) context.Context {
	return context.WithValue(ctx, mintedKey{}, kind+"/"+id)
}

// IsMinted reports whether ctx carries WithMintedIdentity for kind/id.
func IsMinted(ctx context.Context, kind, id string) bool {
	v, _ := ctx.Value(mintedKey{}).(string)
	return v != "" && v == kind+"/"+id
}

type heldCreationKey struct{}

type heldCreation struct {
	key, token string
	// used: only the first resolution under ctx may claim the lock; a
	// later one (a resend after a dead letter) finds the record as the
	// first left it.
	used *atomic.Bool
}

// WithHeldCreation tells a Lookup that the caller already holds kind/id's
// creation lock under token, taken for a Missing identity in the same
// step that minted it (see location.Creation): the first resolution of
// kind/id under ctx activates generation 1 with that token instead of
// taking the lock itself, a Location round trip fewer; a command sent
// under ctx travels with that activation (Activate.first). A claim that
// no longer holds (the lock expired) fails at the Ready commit with
// location.ErrLockLost, as any creator's does, and the grain it started
// is stopped before it received anything.
func WithHeldCreation(ctx context.Context, kind, id, token string) context.Context {
	return context.WithValue(ctx, heldCreationKey{}, heldCreation{key: kind + "/" + id, token: token, used: new(atomic.Bool)})
}

// heldToken claims the token of a WithHeldCreation for kind/id in ctx,
// once.
func heldToken(ctx context.Context, kind, id string) (string, bool) {
	h, _ := ctx.Value(heldCreationKey{}).(heldCreation)
	if h.token == "" || h.key != kind+"/"+id || !h.used.CompareAndSwap(false, true) {
		return "", false
	}
	return h.token, true
}

// CreateLockTTL is how long a creation lock lasts before its creator must
// extend it: what a caller that takes the lock itself (WithHeldCreation)
// must use.
func (l *Lookup) CreateLockTTL() time.Duration { return l.cfg.CreateLockTTL }
