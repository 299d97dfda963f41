package placement

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// The gone records themselves are the Location Store's (location.Members;
// why they exist is told in location/gone.go). Here is a lookup's side of
// them: its in-memory view, read on the warm path without a round trip,
// the recording of the departures it sees, and the stall heartbeat that
// keeps a process that did not run for a while from recording live peers
// gone.

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
	fenced    atomic.Bool

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
	count := int64(-1)
	var full time.Time
	for {
		if l.stopped() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), goneReadTimeout)
		n, err := l.store.GoneCount(ctx)
		if err == nil && (n != count || time.Since(full) > goneFullRefresh) {
			var m map[string]location.GoneMember
			if m, err = l.store.Gone(ctx); err == nil {
				l.setGone(m)
				count, full = int64(len(m)), time.Now()
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
		if m.Id == self {
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
		go l.recordGone(m.Id, now)
	}
	l.nudgeGone()
}

// recordGone records memberID gone, retrying with capped backoff until it
// lands: the Location Store may be down when the member leaves, and the
// record is what every other lookup and the member itself go by.
func (l *Lookup) recordGone(memberID string, leftAt time.Time) {
	defer l.gone.recording.Delete(memberID)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if l.stopped() {
			return
		}
		err := l.tryRecordGone(memberID, leftAt)
		if err == nil || errors.Is(err, location.ErrClosed) {
			return
		}
		if attempt == 1 || attempt%10 == 0 {
			l.log.Warn("recording a member gone failed; retrying", slog.String("member", memberID),
				slog.Int("attempt", attempt), slog.Any("error", err))
		}
		select {
		case <-l.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *Lookup) tryRecordGone(memberID string, leftAt time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), goneRecordTimeout)
	defer cancel()
	// A member that is itself recorded gone is the one whose view is
	// wrong (it was paused or cut off): it records nobody.
	if _, gone, err := l.store.IsGone(ctx, l.Self()); err != nil {
		return err
	} else if gone {
		l.log.Warn("not recording a member gone: this member is itself recorded gone", slog.String("member", memberID))
		return nil
	}
	_, err := l.RecordGone(ctx, memberID, leftAt)
	return err
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
	l.nudgeGone()
	if l.cluster != nil && l.cluster.MemberList != nil {
		l.cluster.MemberList.BroadcastEvent(&GoneRecorded{MemberId: memberID}, false)
	}
	return won, nil
}
