package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// The gone records themselves are the Location Store's (location.Members;
// why they exist is told in location/gone.go). Here is a lookup's side of
// them: its in-memory view, read on the warm path without a round trip,
// the recording of the departures it sees (only once the departed
// member's Location Store heartbeat is stale: one observer's loss of sight
// is no evidence), the judging of a lost member that still beats
// (OWNER_UNREACHABLE, and the API's rejoin once it answers again), the
// rule for a member that no API can reach, and the stall heartbeat that
// keeps a process that did not run for a while from recording live peers
// gone. The store heartbeat gates only the recording of gone: topology
// and eligibility stay protoactor's.

const (
	// A lookup reads the gone records again when its topology changes,
	// when a member announces that it recorded one (GoneRecorded), and
	// besides every goneRefresh as a safety net for a record written
	// without an announcement (an operator tool) about a member this
	// lookup still sees live. The gone member itself does not wait for
	// any of these: its self-fence watch reads its own record. The
	// periodic read is one HLEN; the records are read in full when their
	// count changed, and every goneFullRefresh anyway. Polling every
	// second would make every member's background traffic show up in the
	// per-request round-trip figures.
	goneRefresh     = 30 * time.Second
	goneFullRefresh = 10 * time.Minute
	// goneReadTimeout bounds one read of the gone records.
	goneReadTimeout = 2 * time.Second
	// goneRecordTimeout bounds one attempt at recording a departure.
	goneRecordTimeout = 5 * time.Second

	// A process that did not run for a while (a GC pause, a VM stall,
	// SIGSTOP) may have let its own membership health checks time out:
	// protoactor then reports live peers as having left. Its view is not
	// to be trusted for a while, or a paused member would record the
	// healthy members gone and make them fence themselves. The heartbeat
	// notices such a stall; departures seen during or shortly after one
	// are not recorded (the members that did not stall record real ones).
	heartbeatEvery  = 100 * time.Millisecond
	stallThreshold  = time.Second
	stallQuarantine = 5 * time.Second

	// goneRecheck is how often an observer asks again whether a member it
	// lost, whose Location Store heartbeat was still fresh, is gone now.
	goneRecheck = 250 * time.Millisecond
	// reachDialTimeout bounds the dial that tells whether a member this
	// lookup lost, but which still beats, can be reached again.
	reachDialTimeout = 300 * time.Millisecond
)

// goneState is a lookup's in-memory view of the gone records, read on the
// warm path without a round trip.
type goneState struct {
	// byID is the last read of the gone records (nil before the first).
	byID atomic.Pointer[map[string]location.GoneMember]
	// liveGone maps the address of every member this lookup still sees
	// live, but which is recorded gone, to its id; nil when there is none,
	// which keeps the warm path at one atomic load.
	liveGone atomic.Pointer[map[string]string]
	nudge    chan struct{}
	// recording holds the member ids whose departure is being recorded.
	recording sync.Map
	// unreachable holds the members this lookup lost from its topology
	// and is judging (*lostMember by id): once their heartbeat was found
	// fresh, their orders answer ErrOwnerUnreachable here rather than
	// ErrUnavailable, since the cluster's evidence says they are alive.
	unreachable sync.Map
	// reachable, if set, is told once of a member in unreachable that
	// still beats and answers a dial again (see OnLostMemberReachable).
	reachable atomic.Pointer[func(memberID, address string)]
	fenced    atomic.Bool
	// apiSeen: the topology held an API member once; apiLostAt: since
	// when it holds none (unix ns, 0 while it holds one); isolated: the
	// heartbeat is withheld for it.
	apiSeen   atomic.Bool
	apiLostAt atomic.Int64
	isolated  atomic.Bool

	epoch time.Time
	// beat is the time of the last heartbeat and quietUntil the end of
	// the quarantine after a stall, both as monotonic offsets from epoch.
	beat       atomic.Int64
	quietUntil atomic.Int64
	lastStall  atomic.Int64
}

// startGone starts the background work of gone records: the refresh of
// the in-memory view and the stall heartbeat. It runs once, from Setup.
func (l *Lookup) startGone() {
	if l.stop == nil {
		l.stop = make(chan struct{})
	}
	l.gone.nudge = make(chan struct{}, 1)
	l.gone.epoch = time.Now()
	l.gone.beat.Store(0)
	go l.heartbeat()
	go l.refreshGoneLoop()
}

func (l *Lookup) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return l.cluster != nil && l.cluster.ActorSystem.IsStopped()
	}
}

func (l *Lookup) heartbeat() {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if l.stopped() {
			return
		}
		now := time.Since(l.gone.epoch)
		if gap := now - time.Duration(l.gone.beat.Load()); gap > stallThreshold {
			l.gone.lastStall.Store(int64(gap))
			l.gone.quietUntil.Store(int64(now + stallQuarantine))
			l.log.Info("this process did not run for a while; members it sees leave soon after are not recorded gone",
				slog.Duration("stall", gap.Round(time.Millisecond)), slog.Duration("quarantine", stallQuarantine))
		}
		l.gone.beat.Store(int64(now))
	}
}

// stalled reports whether this process stalled just now (the heartbeat
// has not run for too long) or recently (still in quarantine).
func (l *Lookup) stalled() (time.Duration, bool) {
	now := time.Since(l.gone.epoch)
	if gap := now - time.Duration(l.gone.beat.Load()); gap > stallThreshold {
		return gap, true
	}
	if now < time.Duration(l.gone.quietUntil.Load()) {
		return time.Duration(l.gone.lastStall.Load()), true
	}
	return 0, false
}

// isGone reports whether memberID is recorded gone, from memory.
func (l *Lookup) isGone(memberID string) bool {
	m := l.gone.byID.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[memberID]
	return ok
}

// goneAddress reports whether addr is a member this lookup sees live but
// which is recorded gone.
func (l *Lookup) goneAddress(addr string) bool {
	m := l.gone.liveGone.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[addr]
	return ok
}

// selfFenced reports whether this member must not host: it fenced
// itself, or it is recorded gone and has not noticed yet.
func (l *Lookup) selfFenced() bool {
	return l.gone.fenced.Load() || (l.cluster != nil && l.isGone(l.Self()))
}

// Fenced reports whether this member fenced itself (RunSelfFence).
func (l *Lookup) Fenced() bool { return l.gone.fenced.Load() }

// IsGone reports whether memberID is recorded gone, as this lookup last
// read the records: at once for a member recorded by one it sees, else at
// its next topology change or periodic read.
func (l *Lookup) IsGone(memberID string) bool { return l.isGone(memberID) }

// GoneMembers reads every gone record from the Location Store, by member
// id, and refreshes the lookup's view with it.
func (l *Lookup) GoneMembers(ctx context.Context) (map[string]location.GoneMember, error) {
	m, err := l.store.Gone(ctx)
	if err != nil {
		return nil, err
	}
	l.setGone(m)
	out := make(map[string]location.GoneMember, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out, nil
}

func (l *Lookup) setGone(m map[string]location.GoneMember) {
	l.gone.byID.Store(&m)
	l.mu.Lock()
	l.updateLiveGone()
	l.mu.Unlock()
}

// updateLiveGone recomputes liveGone from the members and the gone view.
// Callers hold l.mu.
func (l *Lookup) updateLiveGone() {
	var live map[string]string
	for id, m := range l.members {
		if l.isGone(id) {
			if live == nil {
				live = map[string]string{}
			}
			live[m.Address()] = id
		}
	}
	if live == nil {
		l.gone.liveGone.Store(nil)
		return
	}
	l.gone.liveGone.Store(&live)
}

// nudgeGone asks the refresh loop to look now.
func (l *Lookup) nudgeGone() {
	select {
	case l.gone.nudge <- struct{}{}:
	default:
	}
}

func (l *Lookup) refreshGoneLoop() {
	t := time.NewTicker(goneRefresh)
	defer t.Stop()
	version := int64(-1)
	var full time.Time
	for {
		if l.stopped() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), goneReadTimeout)
		n, err := l.store.GoneVersion(ctx)
		if err == nil && (n != version || time.Since(full) > goneFullRefresh) {
			var m map[string]location.GoneMember
			if m, err = l.store.Gone(ctx); err == nil {
				l.setGone(m)
				version, full = n, time.Now()
			}
		}
		cancel()
		if errors.Is(err, location.ErrClosed) {
			return
		}
		if err != nil {
			// The self-fence watcher reports a store it cannot reach;
			// this view keeps its last state meanwhile.
			l.log.Debug("refreshing gone members failed", slog.Any("error", err))
		}
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.gone.nudge:
		}
	}
}

// observeLeft records, in the background, every member of left as gone.
// It runs in onTopology, under protoactor's member-list lock, so it only
// starts work.
func (l *Lookup) observeLeft(left []*pcluster.Member) {
	if len(left) == 0 || l.gone.nudge == nil {
		return
	}
	now := time.Now()
	self := l.Self()
	for _, m := range left {
		if m.Id == self || !hostsKinds(m) {
			// A member without kinds hosts nothing: there is nothing to
			// mark Unavailable, and it keeps no heartbeat.
			continue
		}
		if stall, ok := l.stalled(); ok {
			l.log.Warn("not recording a member gone: this process stalled just before it saw the member leave, so its view is suspect",
				slog.String("member", m.Id), slog.String("address", m.Address()), slog.Duration("stall", stall.Round(time.Millisecond)))
			continue
		}
		if _, busy := l.gone.recording.LoadOrStore(m.Id, true); busy {
			continue
		}
		lm := &lostMember{addr: m.Address(), judged: make(chan struct{})}
		l.gone.unreachable.Store(m.Id, lm)
		go l.recordGone(m.Id, lm, now)
	}
	l.nudgeGone()
}

// hostsKinds reports whether m hosts any kind besides protoactor's own
// topic kind, which every member carries.
func hostsKinds(m *pcluster.Member) bool {
	for _, k := range m.Kinds {
		if k != pcluster.TopicActorKind {
			return true
		}
	}
	return false
}

// lostMember is a member this lookup lost from its topology, while its
// departure is being judged.
type lostMember struct {
	addr string
	// judged is closed at the first verdict on its heartbeat; fresh says
	// whether that (or a later) verdict found it alive.
	judged chan struct{}
	once   sync.Once
	fresh  atomic.Bool
}

func (m *lostMember) judge(fresh bool) {
	m.fresh.Store(fresh)
	m.once.Do(func() { close(m.judged) })
}

// judgeWait bounds how long a call waits for the first verdict on an
// owner that just left its caller's topology: one round trip, normally.
const judgeWait = time.Second

// ownerUnreachable reports whether memberID is a member this lookup lost
// but which is not recorded gone: its heartbeat says it is alive. A call
// that comes while the first verdict is still out waits for it (within
// ctx and judgeWait), so that a member that is only cut off never answers
// OWNER_GONE.
func (l *Lookup) ownerUnreachable(ctx context.Context, memberID string) bool {
	v, ok := l.gone.unreachable.Load(memberID)
	if !ok {
		return false
	}
	m := v.(*lostMember)
	select {
	case <-m.judged:
	default:
		t := time.NewTimer(judgeWait)
		select {
		case <-m.judged:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return m.fresh.Load() && !l.isGone(memberID)
}

// lostOwner is the error of a call whose owner, at addr, left this
// lookup's topology or lost its connection: ErrUnavailable when it is
// recorded gone or left with no hope (not a member this lookup is still
// judging), ErrOwnerUnreachable while the cluster's evidence says it is
// alive. The command may have run: neither is resent.
func (l *Lookup) lostOwner(ctx context.Context, addr, what string) error {
	l.mu.Lock()
	id, live := l.byAddress[addr]
	l.mu.Unlock()
	if live && !l.isGone(id) {
		// Still in the topology: the link broke, the member did not go.
		return fmt.Errorf("%w: owner at %s %s (connection lost)", ErrOwnerUnreachable, addr, what)
	}
	if !live {
		var found string
		l.gone.unreachable.Range(func(k, v any) bool {
			if v.(*lostMember).addr == addr {
				found = k.(string)
				return false
			}
			return true
		})
		if found != "" && l.ownerUnreachable(ctx, found) {
			return fmt.Errorf("%w: owner %s at %s %s; it is not recorded gone", ErrOwnerUnreachable, found, addr, what)
		}
	}
	return fmt.Errorf("%w: owner at %s %s", ErrUnavailable, addr, what)
}

// The rule for a member that is alive and beating but that no API can
// reach: it would hold its orders where no client can get at them, and no
// observer would record it gone while it beats. So a hosting member that
// has seen an API member (a member without kinds) in its topology, and has
// then seen none for longer than its heartbeat bound, withholds its
// heartbeat: the APIs that lost it record it gone once the heartbeat is
// stale, it finds its own record at its next probe and fences, and its
// orders answer OWNER_GONE until an operator (or the takeover policy)
// acts. A member that never saw an API (a cluster without one, a test)
// keeps beating; a rolling restart of the APIs keeps one in sight, and
// while every API is down nobody lost the member, so nobody records it.
// Two workflow members cut apart from each other while no API is up
// would record each other gone once both withhold their heartbeats.

// heartbeatBound is how old this member's heartbeat may grow before an
// observer that lost it may record it gone: four probe intervals (three
// missed probes are not a death), at least 2 s, and never more than the
// lease, after which an unprobed member stops serving anyway.
func (c SelfFenceConfig) heartbeatBound() time.Duration {
	return min(c.Lease, max(4*c.Interval, 2*time.Second))
}

// noteAPIs records whether the topology holds an API member. It runs in
// onTopology.
func (l *Lookup) noteAPIs(members []*pcluster.Member) {
	self := l.selfID()
	for _, m := range members {
		if m.Id != self && !hostsKinds(m) {
			l.gone.apiSeen.Store(true)
			l.gone.apiLostAt.Store(0)
			return
		}
	}
	if l.gone.apiSeen.Load() {
		l.gone.apiLostAt.CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (l *Lookup) selfID() string {
	if l.cluster == nil || l.cluster.ActorSystem == nil {
		return ""
	}
	return l.cluster.ActorSystem.ID
}

// beatBound is the bound this member's probe publishes with its
// heartbeat, or 0 (no heartbeat) while it is isolated from every API.
func (l *Lookup) beatBound(bound time.Duration) time.Duration {
	if at := l.gone.apiLostAt.Load(); len(l.kinds) > 0 && at != 0 && time.Since(time.Unix(0, at)) > bound {
		if l.gone.isolated.CompareAndSwap(false, true) {
			l.log.Warn("no API member in sight for longer than the heartbeat bound: withholding the heartbeat so that this member is recorded gone",
				slog.Duration("bound", bound))
		}
		return 0
	}
	if l.gone.isolated.CompareAndSwap(true, false) {
		l.log.Info("an API member is in sight again: heartbeat resumed")
	}
	return bound
}

// OnLostMemberReachable registers f, told once per member, when a member
// this lookup lost from its topology is not recorded gone, still beats,
// and answers a dial to its address again: protoactor has blocked its id
// here for good, so only a new incarnation of this process (a new member
// id, a new view) serves its orders from here again. An API member
// rejoins so; see package edgenode.
func (l *Lookup) OnLostMemberReachable(f func(memberID, address string)) {
	l.gone.reachable.Store(&f)
}

// recordGone records memberID gone, retrying with capped backoff until it
// lands: the Location Store may be down when the member leaves, and the
// record is what every other lookup and the member itself go by. The
// record is written only once the member's heartbeat is stale (one
// observer's loss of sight is no evidence) by store time (a heartbeat the
// member could not write while the store was down does not count, see
// location.HeartbeatVerdict.Pending); until then the observer asks again
// every goneRecheck, as long as the member is not back in its topology.
func (l *Lookup) recordGone(memberID string, lm *lostMember, leftAt time.Time) {
	defer l.gone.recording.Delete(memberID)
	// Whatever ends this, nobody waits for a verdict any longer.
	defer lm.judge(false)
	address := lm.addr
	// Not cluster/retry's jittered backoff: how soon a failed write of a
	// gone record is tried again is part of how soon a lost member's
	// orders become Unavailable rather than unanswered, a timing this
	// loop owns (100 ms doubling to 5 s, then goneRecheck while fresh).
	backoff := 100 * time.Millisecond
	told, fresh, pending := false, 0, 0
	for attempt := 1; ; attempt++ {
		if l.stopped() {
			return
		}
		if l.Live(memberID) {
			l.gone.unreachable.Delete(memberID)
			l.log.Info("a lost member is back in the topology; not recording it gone", slog.String("member", memberID))
			return
		}
		v, err := l.tryRecordGone(memberID, leftAt)
		wait := goneRecheck
		switch {
		case errors.Is(err, location.ErrClosed):
			return
		case err != nil:
			if attempt == 1 || attempt%10 == 0 {
				l.log.Warn("recording a member gone failed; retrying", slog.String("member", memberID),
					slog.Int("attempt", attempt), slog.Any("error", err))
			}
			wait, backoff = backoff, min(backoff*2, 5*time.Second)
		case v.Gone:
			lm.judge(false)
			l.gone.unreachable.Delete(memberID)
			return
		case v.Pending:
			// Stale, but the store just came back (or nobody beats):
			// the member gets one bound of store time to beat before it
			// counts. No verdict yet: its callers wait as for the first.
			pending++
			if pending == 1 {
				l.log.Info("a lost member's heartbeat is stale but the store was not steady; asking again before recording it gone",
					slog.String("member", memberID), slog.Duration("age", v.Age), slog.Duration("bound", v.Bound))
			}
		case v.Fresh:
			lm.judge(true)
			fresh++
			if fresh == 1 {
				l.log.Warn("not recording a lost member gone: its heartbeat is fresh, so it is alive and only unreachable from here",
					slog.String("member", memberID), slog.String("address", address),
					slog.Duration("age", v.Age), slog.Duration("bound", v.Bound))
			}
			if f := l.gone.reachable.Load(); f != nil && !told && l.dialable(address) {
				told = true
				l.log.Warn("a lost member that is not recorded gone answers again", slog.String("member", memberID), slog.String("address", address))
				(*f)(memberID, address)
			}
		default:
			// This member is itself recorded gone: it records nobody.
			return
		}
		select {
		case <-l.stop:
			return
		case <-time.After(wait):
		}
	}
}

// dialable reports whether a TCP connection to addr opens now.
func (l *Lookup) dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, reachDialTimeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// tryRecordGone is one attempt. The zero verdict means this member is
// itself recorded gone and recorded nothing.
func (l *Lookup) tryRecordGone(memberID string, leftAt time.Time) (location.HeartbeatVerdict, error) {
	ctx, cancel := context.WithTimeout(context.Background(), goneRecordTimeout)
	defer cancel()
	// A member that is itself recorded gone is the one whose view is
	// wrong (it was paused or cut off): it records nobody.
	if _, gone, err := l.store.IsGone(ctx, l.Self()); err != nil {
		return location.HeartbeatVerdict{}, err
	} else if gone {
		l.log.Warn("not recording a member gone: this member is itself recorded gone", slog.String("member", memberID))
		return location.HeartbeatVerdict{}, nil
	}
	node, err := l.store.MemberName(ctx, memberID)
	if err != nil {
		return location.HeartbeatVerdict{}, err
	}
	v, err := l.store.MarkGoneIfStale(ctx, memberID, node, leftAt.UnixMilli())
	if err != nil || !v.Gone {
		return v, err
	}
	if v.Won {
		l.log.Info("member recorded gone", slog.String("member", memberID), slog.String("node", node),
			slog.Int64("leftAtUnixMs", leftAt.UnixMilli()))
	}
	l.announceGone(memberID)
	return v, nil
}

// RecordGone records memberID gone as of leftAt, under the node name it
// published, and tells every member it sees to read the gone records
// again. The first record of a member wins (won reports whether this one
// did); a member is gone for good. Recording a live member gone evicts
// it: every lookup answers Unavailable for its orders and it fences
// itself.
func (l *Lookup) RecordGone(ctx context.Context, memberID string, leftAt time.Time) (won bool, err error) {
	node, err := l.store.MemberName(ctx, memberID)
	if err != nil {
		return false, err
	}
	won, err = l.store.MarkGone(ctx, memberID, node, leftAt.UnixMilli())
	if err != nil {
		return false, err
	}
	if won {
		l.log.Info("member recorded gone", slog.String("member", memberID), slog.String("node", node),
			slog.Int64("leftAtUnixMs", leftAt.UnixMilli()))
	}
	l.announceGone(memberID)
	return won, nil
}

// announceGone tells every member this one sees to read the gone records
// again.
func (l *Lookup) announceGone(memberID string) {
	l.nudgeGone()
	if l.cluster != nil && l.cluster.MemberList != nil {
		l.cluster.MemberList.BroadcastEvent(&GoneRecorded{MemberId: memberID}, false)
	}
}
