package placement

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/ctxext"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// Opener is implemented by grains that open their state when they start
// (replaying a stream, raising a fence). The activator answers an
// activation of such a grain only once it reported the outcome with
// Activation.Opened, so an identity is never recorded Ready at a grain
// that cannot serve.
type Opener interface {
	// OpensOnStart marks the grain; it is never called.
	OpensOnStart()
}

// ReadyCarrier is implemented by Opener grains that can record their
// own activation Ready in the step of their first write. For such a
// grain, an activation whose first command travels with it under a held
// creation lock leaves the Ready commit to the grain (Activation.TakeReady
// and EnsureReady) instead of making it before delivering the command:
// one Location round trip fewer, and still no write of the grain's lands
// before its record names it Ready.
type ReadyCarrier interface {
	Opener
	// CarriesReady marks the grain; it is never called.
	CarriesReady()
}

type hosted struct {
	key        string
	pid        *actor.PID
	act        *Activation
	carries    bool
	generation int64
	reason     ActivationReason
	// waiting are the requesters to answer once the grain opened; nil
	// once it has.
	waiting []waiter
	opening bool
	// noWork is the grain's last report (Activation.WorkLeft): it has no
	// work left, so it may be passivated to make room. A grain that never
	// reported has work left, as far as the activator knows.
	noWork bool
	// idle is h's place in activator.idle while it may be passivated:
	// opened, noWork, and not asked already.
	idle *list.Element
	// evicting: the grain was sent Passivate and has not yet left or
	// answered that it stays.
	evicting bool
	// callers are the addresses of the members that asked for the grain
	// (Activate), the only ones whose pid caches can hold it but for
	// members that read it from its Location record (forget).
	callers []string
}

// called notes that the member at addr asked for h's grain.
func (h *hosted) called(addr string) {
	if addr != "" && !slices.Contains(h.callers, addr) {
		h.callers = append(h.callers, addr)
	}
}

// waiter is a requester of an activation still opening, with its request
// when that carries a first command to deliver.
type waiter struct {
	pid *actor.PID
	req *Activate
}

// opened is a grain's report that it opened its state (err == nil) or
// could not.
type opened struct {
	pid     *actor.PID
	err     error
	failure ActivationFailure // when err != nil
	fenceAt int64             // with ACTIVATION_FAILURE_FENCED
}

// stoppedOpening: a grain stopped before its open was answered.
type stoppedOpening struct{ pid *actor.PID }

// activator hosts grains on one member. It is the only place that spawns
// them, so two activations of one identity on one member cannot happen.
type activator struct {
	lookup  *Lookup
	metrics *activatorMetrics
	grains  map[string]*hosted // kind/identity → grain
	// keys finds a grains entry by its pid's id: a grain's reports name
	// it by pid, and a member may host very many, so no report scans.
	keys map[string]string
	// serving counts the grains entries that opened: what Hosted lists
	// and MetricGrainsHosted shows, kept as they change rather than
	// counted per message, since a member may host very many.
	serving int
	// retired are grains that announced they are leaving, by pid id: a
	// new activation of their identity gets a new grain, never one that
	// is about to stop.
	retired map[string]retiredGrain
	// mailbox makes the hosted grains' mailboxes (mailbox.go).
	mailbox actor.MailboxProducer
	limits  Limits
	// opening counts the grains entries still opening; delivering the
	// first commands being delivered off the activator's turn (answer).
	opening, delivering int
	// idle lists the hosted grains that may be passivated to make room,
	// the one that went idle first at the front.
	idle *list.List
	// evictions are the grains sent Passivate, by pid id, until they
	// stop or answer that they stay; evictingHosted counts those still
	// in grains (not yet retired), which no longer count as hosted.
	evictions      map[string]struct{}
	evictingHosted int
}

// newActivator returns l's activator.
func newActivator(l *Lookup, mailbox actor.MailboxProducer) *activator {
	return &activator{lookup: l, metrics: l.metrics, grains: map[string]*hosted{}, keys: map[string]string{},
		mailbox: mailbox, limits: l.cfg.Limits, idle: list.New(), evictions: map[string]struct{}{}}
}

// Passivate is the activator's request to a grain that reported no work
// left (Activation.WorkLeft): leave now, releasing the identity as an
// idle passivation does, to make room for a new activation beyond
// Limits.MaxHosted. A grain that has work left by the time it reads it,
// or cannot release, stays and says so (Activation.Stays). It never
// leaves the process, and it does not postpone the grain's idle timeout.
type Passivate struct{}

// NotInfluenceReceiveTimeout implements actor.NotInfluenceReceiveTimeout.
func (*Passivate) NotInfluenceReceiveTimeout() {}

// workState is a grain's report of whether it has work left.
type workState struct {
	pid  *actor.PID
	left bool
}

// stays is a grain's answer to Passivate when it did not leave.
type stays struct{ pid *actor.PID }

// delivered: a first command's delivery (answer) ended.
type delivered struct{}

type retiredGrain struct {
	key     string
	pid     *actor.PID
	callers []string
}

// retiring is a grain's notice that it is leaving.
type retiring struct{ pid *actor.PID }

func (a *activator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Activate:
		if pid := a.activate(ctx, m); pid != nil {
			a.answer(ctx, waiter{pid: ctx.Sender(), req: m}, pid, nil)
		}
	case *opened:
		a.onOpened(ctx, m)
	case *workState:
		if _, h, ok := a.find(m.pid); ok {
			h.noWork = !m.left
			a.relist(h)
		}
	case *stays:
		// A grain that retired before its release failed is no longer
		// in grains, but it is no passivation in progress either.
		delete(a.evictions, m.pid.Id)
		if _, h, ok := a.find(m.pid); ok && h.evicting {
			h.evicting = false
			a.evictingHosted--
			a.relist(h)
		}
	case *delivered:
		a.delivering--
	case *retiring:
		if key, h, ok := a.find(m.pid); ok && !h.opening {
			a.drop(key, h)
			a.served(-1)
			if a.retired == nil {
				a.retired = map[string]retiredGrain{}
			}
			a.retired[h.pid.Id] = retiredGrain{key: key, pid: h.pid, callers: h.callers}
		}
	case *actor.Terminated:
		delete(a.evictions, m.Who.Id)
		if key, h, ok := a.find(m.Who); ok {
			if h.opening {
				// System messages overtake user messages: the grain's
				// report of its open may still be queued. Decide after
				// it, in a message of our own queued behind it.
				ctx.Send(ctx.Self(), &stoppedOpening{pid: h.pid})
			} else {
				a.forget(ctx, key, h, announceStop)
			}
		}
		if r, ok := a.retired[m.Who.Id]; ok {
			delete(a.retired, m.Who.Id)
			a.forget(ctx, r.key, &hosted{pid: r.pid, callers: r.callers}, announceStop)
		}
	case *stoppedOpening:
		if key, h, ok := a.find(m.pid); ok && h.opening {
			// It stopped without reporting its open (it failed past
			// its restarts): another member may do better.
			reply := &Activated{Error: "grain stopped while opening", Failure: ActivationFailure_ACTIVATION_FAILURE_REFUSED}
			for _, w := range h.waiting {
				ctx.Send(w.pid, reply)
			}
			a.metrics.aborted.WithLabelValues(Cause(h.reason)).Inc()
			a.forget(ctx, key, h, keepStopQuiet)
		}
	case *resumeHosted:
		for _, h := range a.grains {
			if !h.opening {
				ctx.Send(h.pid, &Resumed{})
			}
		}
	case *hostedQuery:
		out := make([]HostedGrain, 0, len(a.grains))
		for key, h := range a.grains {
			if h.opening {
				continue
			}
			kind, id := splitKey(key)
			out = append(out, HostedGrain{Kind: kind, Identity: id, PID: h.pid, Generation: h.generation})
		}
		ctx.Respond(out)
	}
}

// find returns the grains entry of pid, if it has one.
func (a *activator) find(pid *actor.PID) (key string, h *hosted, ok bool) {
	if pid == nil {
		return "", nil, false
	}
	key, ok = a.keys[pid.Id]
	if !ok {
		return "", nil, false
	}
	h, ok = a.grains[key]
	if !ok || !h.pid.Equal(pid) {
		return "", nil, false
	}
	return key, h, true
}

// drop removes h, the grains entry under key, and its pid's index entry.
// A grain asked to passivate stays in evictions until it has stopped.
func (a *activator) drop(key string, h *hosted) {
	delete(a.grains, key)
	delete(a.keys, h.pid.Id)
	if h.opening {
		h.opening = false
		a.opening--
	}
	if h.evicting {
		h.evicting = false
		a.evictingHosted--
	}
	a.relist(h)
}

// relist puts h in the idle list when it may be passivated to make room,
// and takes it out when it may not.
func (a *activator) relist(h *hosted) {
	_, present := a.grains[h.key]
	may := present && h.noWork && !h.opening && !h.evicting
	switch {
	case may && h.idle == nil:
		h.idle = a.idle.PushBack(h)
	case !may && h.idle != nil:
		a.idle.Remove(h.idle)
		h.idle = nil
	}
}

// admit makes room for a new activation, or says which limit refuses it.
// Beyond MaxHosted, the grain that went idle first is asked to passivate
// and no longer counts as hosted; it is gone before long, or says that it
// stays. Only grains that reported no work left are ever asked.
func (a *activator) admit(ctx actor.Context) (limit, why string) {
	if a.opening+a.delivering+len(a.evictions) >= a.limits.MaxActivations {
		return LimitActivations, fmt.Sprintf("member overloaded: %d activations and passivations in progress (limit %d)",
			a.opening+a.delivering+len(a.evictions), a.limits.MaxActivations)
	}
	if len(a.grains)-a.evictingHosted < a.limits.MaxHosted {
		return "", ""
	}
	e := a.idle.Front()
	if e == nil {
		return LimitHosted, fmt.Sprintf("member overloaded: it hosts %d grains (limit %d) and every one has work left",
			len(a.grains)-a.evictingHosted, a.limits.MaxHosted)
	}
	h := e.Value.(*hosted)
	h.evicting = true
	a.evictingHosted++
	a.evictions[h.pid.Id] = struct{}{}
	a.relist(h)
	a.metrics.passivated.Inc()
	ctx.Send(h.pid, &Passivate{})
	return "", ""
}

// stopNotice says whether forget tells the other members of a stop.
type stopNotice int

const (
	// announceStop: the grain may have been recorded somewhere, so every
	// member drops its cached route to it.
	announceStop stopNotice = iota
	// keepStopQuiet: the grain never served (its open failed or was
	// never answered), so no member can hold a route to it.
	keepStopQuiet
)

// forget drops a grain that stopped or failed to open (from grains, if it
// is still there under key), announcing the stop as notice says.
func (a *activator) forget(ctx actor.Context, key string, h *hosted, notice stopNotice) {
	if cur, ok := a.grains[key]; ok && cur.pid.Equal(h.pid) {
		wasServing := !cur.opening
		a.drop(key, cur)
		if wasServing {
			a.served(-1)
		}
	}
	kind, id := splitKey(key)
	if k, ok := a.lookup.cluster.TryGetClusterKind(kind); ok {
		k.Dec()
	}
	if notice == announceStop {
		a.announceStop(h, pcluster.NewClusterIdentity(id, kind))
	}
}

// announceStop tells the members that may hold h's pid in their caches
// that its grain stopped, so that none keeps calling it: this member, and
// the members that asked for the grain. Not every member: a stop costs a
// message per member that called the grain, not per member of the
// cluster, whose size would otherwise set the cost of every passivation.
// A member that read the pid from the grain's Location record instead is
// not told; its next call to the pid gets a dead letter, and it forgets
// the pid and resolves the identity again (Context.request), as it does
// when this notice is overtaken by its call.
func (a *activator) announceStop(h *hosted, ci *pcluster.ClusterIdentity) {
	sys := a.lookup.cluster.ActorSystem
	ev := &pcluster.ActivationTerminated{Pid: h.pid, ClusterIdentity: ci}
	sys.EventStream.Publish(ev)
	self := a.lookup.selfAddress()
	for _, addr := range h.callers {
		if addr != self {
			sys.Root.Send(actor.NewPID(addr, "eventstream"), ev)
		}
	}
}

func (a *activator) onOpened(ctx actor.Context, m *opened) {
	if key, h, ok := a.find(m.pid); ok && h.opening {
		if m.err == nil {
			h.opening = false
			a.opening--
			a.relist(h)
			a.served(+1)
			a.metrics.activations.WithLabelValues(Cause(h.reason)).Inc()
			for _, w := range h.waiting {
				a.answer(ctx, w, h.pid, h)
			}
			h.waiting = nil
			return
		}
		reply := &Activated{Error: "grain could not open: " + m.err.Error(), Failure: m.failure, FenceGeneration: m.fenceAt}
		for _, w := range h.waiting {
			ctx.Send(w.pid, reply)
		}
		a.metrics.aborted.WithLabelValues(Cause(h.reason)).Inc()
		// The grain stops itself; it was never recorded anywhere, so its
		// stop is nobody else's business.
		ctx.Unwatch(h.pid)
		ctx.Stop(h.pid)
		a.forget(ctx, key, h, keepStopQuiet)
		return
	}
}

// activate hosts m's identity. It returns the pid of a grain that serves
// it already; nil when it answered the requester itself (a refusal) or
// will once the grain opened.
func (a *activator) activate(ctx actor.Context, m *Activate) *actor.PID {
	refuse := func(failure ActivationFailure, text string) *actor.PID {
		ctx.Respond(&Activated{Error: text, Failure: failure})
		return nil
	}
	key := m.Kind + "/" + m.Identity
	if h, ok := a.grains[key]; ok {
		if h.generation != m.Generation {
			return refuse(ActivationFailure_ACTIVATION_FAILURE_REFUSED, "identity already hosted here with another generation")
		}
		if s := ctx.Sender(); s != nil {
			h.called(s.Address)
		}
		if h.opening {
			if s := ctx.Sender(); s != nil {
				h.waiting = append(h.waiting, waiter{pid: s, req: m})
			}
			return nil
		}
		return h.pid
	}
	if m.DeadlineUnixMs > 0 && time.Now().UnixMilli() > m.DeadlineUnixMs {
		// The requester has given up and may already have released the
		// creation lock: opening now could fence the owner it chose next.
		a.lookup.log.Warn("activation refused: it arrived after its deadline",
			slog.String("identity", key), slog.Int64("generation", m.Generation))
		return refuse(ActivationFailure_ACTIVATION_FAILURE_EXPIRED, "activation request arrived after its deadline")
	}
	if a.lookup.draining.Load() {
		return refuse(ActivationFailure_ACTIVATION_FAILURE_REFUSED, "member is draining")
	}
	if a.lookup.Suspended() {
		return refuse(ActivationFailure_ACTIVATION_FAILURE_STORE_UNAVAILABLE, "member suspended: the Location Store has not answered for longer than the lease")
	}
	kind, ok := a.lookup.cluster.TryGetClusterKind(m.Kind)
	if !ok || !a.lookup.kinds[m.Kind] {
		return refuse(ActivationFailure_ACTIVATION_FAILURE_REFUSED, "kind not hosted here: "+m.Kind)
	}
	if limit, why := a.admit(ctx); limit != "" {
		a.metrics.refused.WithLabelValues(limit).Inc()
		a.lookup.log.Debug("activation refused: overloaded", slog.String("identity", key), slog.String("limit", limit))
		return refuse(ActivationFailure_ACTIVATION_FAILURE_OVERLOADED, why)
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	act := &Activation{
		Kind: m.Kind, Identity: m.Identity, Generation: m.Generation, Reason: m.Reason, Minted: m.Minted,
		Deadline: deadlineOf(m), Lookup: a.lookup,
		report: func(o *opened) { root.Send(self, o) },
		retire: func(pid *actor.PID) { root.Send(self, &retiring{pid: pid}) },
		work:   func(pid *actor.PID, left bool) { root.Send(self, &workState{pid: pid, left: left}) },
		stays:  func(pid *actor.PID) { root.Send(self, &stays{pid: pid}) },
	}
	var opens, carries bool
	// Props must come from the Kind and carry the cluster identity, or the
	// grain never sees ClusterInit. The activation lives in the context's
	// extensions, which survive a restart after a panic: protoactor makes
	// a new actor then but runs no OnInit again.
	props := pcluster.WithClusterIdentity(kind.Props, pcluster.NewClusterIdentity(m.Identity, m.Kind)).
		Clone(actor.WithOnInit(func(c actor.Context) {
			c.Set(&activationExt{act: act})
			_, opens = c.Actor().(Opener)
			_, carries = c.Actor().(ReadyCarrier)
		}), actor.WithDispatcher(hostDispatcher), actor.WithMailbox(a.mailbox))
	pid := ctx.SpawnPrefix(props, m.Identity)
	ctx.Watch(pid)
	kind.Inc()
	h := &hosted{key: key, pid: pid, act: act, carries: carries, generation: m.Generation, reason: m.Reason, opening: opens}
	if s := ctx.Sender(); s != nil {
		h.called(s.Address)
	}
	a.grains[key] = h
	a.keys[pid.Id] = key
	if opens {
		a.opening++
	}
	a.lookup.log.Debug("activated", slog.String("identity", key), slog.Int64("generation", m.Generation), slog.String("reason", m.Reason.String()))
	if opens {
		if s := ctx.Sender(); s != nil {
			h.waiting = append(h.waiting, waiter{pid: s, req: m})
		}
		return nil
	}
	a.served(+1)
	a.metrics.activations.WithLabelValues(Cause(m.Reason)).Inc()
	return pid
}

// answer tells a requester that pid serves its activation. A request with
// a first command is answered once the grain is recorded Ready and has
// answered that command (deliverFirst), off the activator's turn: the
// Location round trip and the command must not hold up other activations.
//
// h is the grain just opened, nil for one that served already: only a
// ReadyCarrier just opened may take its Ready commit over.
func (a *activator) answer(ctx actor.Context, w waiter, pid *actor.PID, h *hosted) {
	if w.pid == nil {
		return
	}
	if w.req == nil || w.req.First == nil {
		ctx.Send(w.pid, &Activated{PidAddress: pid.Address, PidId: pid.Id})
		return
	}
	var act *Activation
	if h != nil && h.carries {
		act = h.act
	}
	sys, req, self := ctx.ActorSystem(), w.req, ctx.Self()
	// Counted until it ends, so that these goroutines stay within
	// Limits.MaxActivations.
	a.delivering++
	go func() {
		sys.Root.Send(w.pid, a.deliverFirst(sys, req, pid, act))
		sys.Root.Send(self, &delivered{})
	}()
}

// deliverFirst records pid as req's Ready owner under req.Token, then
// sends it req.First and returns its reply. A grain that could not be
// recorded is stopped before it received anything, so no command reaches
// a grain whose record does not name it, but for the case below, where no
// write of the grain's can land before the record names it.
//
// With act (a ReadyCarrier just opened) and a store that can spell the
// commit out (location.ReadyWrites), the commit is left to the grain
// instead: the command goes first, and the grain records itself Ready in
// the step of its first write, or commits before any other write. What
// the grain reports then decides: landed, the reply goes back; the lock
// lost, the grain is stopped unless the record names it all the same;
// not made or unknown, the commit is made here before anything is
// answered.
func (a *activator) deliverFirst(sys *actor.ActorSystem, req *Activate, pid *actor.PID, act *Activation) *Activated {
	dl := deadlineOf(req)
	if dl.IsZero() {
		dl = time.Now().Add(a.lookup.cfg.ActivationTimeout)
	}
	if time.Now().After(dl) {
		// The requester has moved on to another member (or given up):
		// this grain must not become the owner now.
		sys.Root.Stop(pid)
		return &Activated{Error: "grain opened after the activation's deadline", Failure: ActivationFailure_ACTIVATION_FAILURE_EXPIRED}
	}
	// The commit belongs to the caller's trace, as it did when the caller
	// made it.
	ctx := telemetry.Propagator().Extract(context.Background(), propagation.MapCarrier(req.FirstHeaders))
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	rec := location.Record{Owner: a.lookup.Self(), PIDAddress: pid.Address, PIDID: pid.Id, Generation: req.Generation}
	msg, unpackErr := unpackMessage(req.First)
	d := a.deferReady(act, req, rec, pid, unpackErr == nil)
	if d == nil {
		if failed := a.commitOrStop(ctx, sys, req, pid, rec); failed != nil {
			return failed
		}
	}
	done := &Activated{PidAddress: pid.Address, PidId: pid.Id}
	if unpackErr != nil {
		// Recorded Ready all the same: the requester sends the command
		// itself, as to any owner.
		a.lookup.log.Warn("first command not delivered", slog.String("identity", req.Kind+"/"+req.Identity), slog.Any("error", unpackErr))
		return done
	}
	// The command gets its caller's whole deadline, not the activation's.
	wait := time.Until(time.UnixMilli(req.FirstDeadlineUnixMs))
	if req.FirstDeadlineUnixMs == 0 || wait <= 0 {
		wait = a.lookup.cfg.ActivationTimeout
	}
	f := actor.NewFuture(sys, wait)
	env := &actor.MessageEnvelope{Message: msg, Sender: f.PID()}
	for k, v := range req.FirstHeaders {
		env.SetHeader(k, v)
	}
	sys.Root.Send(pid, env)
	res, err := f.Result()
	if d != nil {
		// The command's wait may have used up the activation's deadline.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), a.lookup.cfg.ActivationTimeout)
		outcome := d.resolve(cctx, true)
		named := false
		if errors.Is(outcome, location.ErrLockLost) {
			// An unread record counts as not naming the grain: the lock
			// settled lost, so the grain wrote nothing.
			named, _ = recordedAt(cctx, a.lookup.store, req, pid)
		}
		ccancel()
		switch {
		case outcome == nil:
		case named:
			// Another request of this activation recorded the grain first,
			// so the grain's own write was refused: it owns the identity,
			// and the requester sends the command itself.
			return done
		case !errors.Is(outcome, location.ErrLockLost) && d.mayHaveWritten():
			// The store failed, and the grain's write may have landed,
			// recording the order and the grain as its owner: stopped, it
			// would leave a recorded order that nobody drives. It stays,
			// and settles the commit before its next write.
			return readyFailed(outcome)
		default:
			sys.Root.Stop(pid)
			return readyFailed(outcome)
		}
	}
	if err != nil {
		done.Error, done.Failure = "first command: "+err.Error(), ActivationFailure_ACTIVATION_FAILURE_UNANSWERED
		return done
	}
	if done.Reply, err = packMessage(res); err != nil {
		done.Error, done.Failure = "first command: "+err.Error(), ActivationFailure_ACTIVATION_FAILURE_UNANSWERED
	}
	return done
}

// commitReady records pid as req's Ready owner under req.Token; a commit
// that fails while the record names pid anyway (a repeated request, or a
// commit that landed despite its error) counts as made.
//
// A lost lock whose record could not be read is not reported lost: the
// commit may have landed, and ErrLockLost settles a deferred commit.
func (a *activator) commitReady(ctx context.Context, req *Activate, pid *actor.PID, rec location.Record) error {
	err := a.lookup.store.CommitReady(ctx, req.Kind, req.Identity, req.Token, rec)
	if err == nil {
		return nil
	}
	named, getErr := recordedAt(ctx, a.lookup.store, req, pid)
	switch {
	case named:
		return nil
	case getErr != nil && errors.Is(err, location.ErrLockLost):
		return fmt.Errorf("record Ready: lock gone, record unread: %w", getErr)
	}
	return err
}

// commitOrStop is commitReady that stops the grain when the commit
// failed, and says why for the requester.
func (a *activator) commitOrStop(ctx context.Context, sys *actor.ActorSystem, req *Activate, pid *actor.PID, rec location.Record) *Activated {
	if err := a.commitReady(ctx, req, pid, rec); err != nil {
		// Should the commit have landed after all, the record names a
		// stopped pid, which the next caller repairs on its dead letter.
		sys.Root.Stop(pid)
		return readyFailed(err)
	}
	return nil
}

func readyFailed(err error) *Activated {
	failure := ActivationFailure_ACTIVATION_FAILURE_STORE_UNAVAILABLE
	if errors.Is(err, location.ErrLockLost) {
		failure = ActivationFailure_ACTIVATION_FAILURE_LOCK_LOST
	}
	return &Activated{Error: "record Ready: " + err.Error(), Failure: failure}
}

// readyWriter is a Location Store that can spell CommitReady out as
// writes for another store's step (location.Redis on one server).
type readyWriter interface {
	ReadyWritesFor(kind, id, token string, rec location.Record) (location.ReadyWrites, bool)
}

// deferReady leaves req's Ready commit to act's grain, when act carries
// it and the store can spell it out, and returns the hand-over; nil means
// the activator commits first, as for any grain. Only the first request
// of an activation may hand it over.
func (a *activator) deferReady(act *Activation, req *Activate, rec location.Record, pid *actor.PID, deliverable bool) *deferredReady {
	if act == nil || req.Token == "" || !deliverable {
		return nil
	}
	rw, ok := a.lookup.store.(readyWriter)
	if !ok {
		return nil
	}
	w, ok := rw.ReadyWritesFor(req.Kind, req.Identity, req.Token, rec)
	if !ok {
		return nil
	}
	d := newDeferredReady(w, func(ctx context.Context) error { return a.commitReady(ctx, req, pid, rec) })
	if !act.ready.CompareAndSwap(nil, d) {
		return nil
	}
	return d
}

// served moves the count of serving grains by delta and shows it.
func (a *activator) served(delta int) {
	a.serving += delta
	a.metrics.hosted.Set(float64(a.serving))
}

func deadlineOf(m *Activate) time.Time {
	if m.DeadlineUnixMs == 0 {
		return time.Time{}
	}
	return time.UnixMilli(m.DeadlineUnixMs)
}

func splitKey(key string) (string, string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}

var activationExtID = ctxext.NextContextExtensionID()

type activationExt struct{ act *Activation }

func (*activationExt) ExtensionID() ctxext.ContextExtensionID { return activationExtID }

// ActivationOf returns the activation a grain was spawned with by a
// member's activator. It is there from the grain's first Started on, and
// again after every restart.
func ActivationOf(ctx actor.Context) (*Activation, bool) {
	ext, ok := ctx.Get(activationExtID).(*activationExt)
	if !ok || ext == nil {
		return nil, false
	}
	return ext.act, true
}

// WithActivation returns props whose actors see act through ActivationOf,
// for hosting a grain outside an activator (tests of a grain alone).
func WithActivation(props *actor.Props, act *Activation) *actor.Props {
	return props.Clone(actor.WithOnInit(func(c actor.Context) { c.Set(&activationExt{act: act}) }))
}

// Opened reports to the activator that waits for it that the grain opened
// its state and serves. Only the first report of an activation counts
// (Opened or OpenFailed): a restarted grain that opens again reports
// nothing.
func (a *Activation) Opened(self *actor.PID) {
	a.reportOnce(&opened{pid: self})
}

// OpenFailed reports that the grain could not open its state, and why:
// ACTIVATION_FAILURE_STORE_UNAVAILABLE for a store that did not answer
// (the caller may retry), ACTIVATION_FAILURE_OPEN_FAILED for anything a
// retry does not cure. Only the first report of an activation counts.
func (a *Activation) OpenFailed(self *actor.PID, err error, failure ActivationFailure) {
	if failure == ActivationFailure_ACTIVATION_FAILURE_UNSPECIFIED {
		failure = ActivationFailure_ACTIVATION_FAILURE_OPEN_FAILED
	}
	a.reportOnce(&opened{pid: self, err: err, failure: failure})
}

// OpenFenced reports that the grain's state is fenced at generation,
// at or above the activation's own (ACTIVATION_FAILURE_FENCED): its
// creator raises the Location record and activates again above it.
func (a *Activation) OpenFenced(self *actor.PID, err error, generation int64) {
	a.reportOnce(&opened{pid: self, err: err, failure: ActivationFailure_ACTIVATION_FAILURE_FENCED, fenceAt: generation})
}

func (a *Activation) reportOnce(o *opened) {
	if a.reported.Swap(true) || a.report == nil {
		return
	}
	a.report(o)
}

type hostedQuery struct{}

// HostedGrain is one grain hosted by this member's activator.
type HostedGrain struct {
	Kind       string
	Identity   string
	PID        *actor.PID
	Generation int64
}

// Hosted lists the grains this member hosts and serves (not those still
// opening).
func (l *Lookup) Hosted() ([]HostedGrain, error) {
	if l.activator == nil {
		return nil, nil
	}
	res, err := l.cluster.ActorSystem.Root.RequestFuture(l.activator, &hostedQuery{}, l.cfg.ActivationTimeout).Result()
	if err != nil {
		return nil, err
	}
	out, _ := res.([]HostedGrain)
	return out, nil
}

// NewActivation returns an activation whose grain reports its first open
// to opened, for hosting a grain outside an activator (a grain's own
// tests). Activators make theirs themselves.
func NewActivation(kind, id string, generation int64, reason ActivationReason, p Placement,
	report func(pid *actor.PID, err error, failure ActivationFailure)) *Activation {
	return &Activation{
		Kind: kind, Identity: id, Generation: generation, Reason: reason, Lookup: p,
		report: func(o *opened) {
			if report != nil {
				report(o.pid, o.err, o.failure)
			}
		},
	}
}

// WorkLeft tells the activator whether the grain has work left (a step
// to run, a retry pending, an open to retry): one that has none may be
// passivated to make room (Passivate). Only a change is sent, so a grain
// may call it after every turn; until its first call the grain counts as
// having work left.
func (a *Activation) WorkLeft(self *actor.PID, left bool) {
	v := int32(workLeft)
	if !left {
		v = noWorkLeft
	}
	if a.workState.Swap(v) == v || a.work == nil {
		return
	}
	a.work(self, left)
}

// The values of Activation.workState; zero is unreported.
const (
	workLeft int32 = iota + 1
	noWorkLeft
)

// Stays answers a Passivate the grain did not act on: it has work left
// after all, or could not release its identity.
func (a *Activation) Stays(self *actor.PID) {
	if a.stays != nil {
		a.stays(self)
	}
}

// WatchHost makes an activation from NewActivation report what a grain
// tells its activator about its work (WorkLeft, Stays) to the given
// functions, for a grain's own tests; either may be nil.
func (a *Activation) WatchHost(work func(pid *actor.PID, left bool), stayed func(pid *actor.PID)) {
	a.work, a.stays = work, stayed
}

// Leaving tells the activator that the grain is about to give up its
// authority and stop: a new activation of the identity on this member,
// which may follow at once, gets a new grain instead of this one. Call it
// before releasing the record.
func (a *Activation) Leaving(self *actor.PID) {
	if a.retire != nil {
		a.retire(self)
	}
}

// Reported tells whether the grain already reported its first open: a
// grain that starts again after that was restarted after a failure.
func (a *Activation) Reported() bool { return a.reported.Load() }

// packMessage encodes a first command or its reply for Activate.first and
// Activated.reply.
func packMessage(m any) (*Message, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("placement: %T is not a protobuf message", m)
	}
	data, err := proto.Marshal(pm)
	if err != nil {
		return nil, fmt.Errorf("placement: encode %T: %w", m, err)
	}
	return &Message{Type: string(pm.ProtoReflect().Descriptor().FullName()), Data: data}, nil
}

// unpackMessage decodes what packMessage encoded; the type must be linked
// into this binary.
func unpackMessage(m *Message) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(m.GetType()))
	if err != nil {
		return nil, fmt.Errorf("placement: message type %q: %w", m.GetType(), err)
	}
	out := mt.New().Interface()
	if err := proto.Unmarshal(m.GetData(), out); err != nil {
		return nil, fmt.Errorf("placement: decode %s: %w", m.GetType(), err)
	}
	return out, nil
}

// recordedAt reports whether the Location record names pid as req's Ready
// owner.
func recordedAt(ctx context.Context, store location.Store, req *Activate, pid *actor.PID) (bool, error) {
	rec, err := store.Get(ctx, req.Kind, req.Identity)
	if err != nil {
		return false, err
	}
	return rec.Status == location.Ready && rec.Generation == req.Generation &&
		rec.PIDAddress == pid.Address && rec.PIDID == pid.Id, nil
}
