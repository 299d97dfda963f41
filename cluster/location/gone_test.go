package location

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"
)

// Of many members recording the same departure at once exactly one
// wins, and its record is the one every later read returns.
func TestMarkGoneFirstRecordWins(t *testing.T) {
	s := newStore(t)
	const racers = 64
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []int
	)
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			won, err := s.MarkGone(context.Background(), "member-x", fmt.Sprintf("node-%d", i), int64(1000+i))
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, winners, 1, "exactly one recorder wins")
	w := winners[0]
	want := GoneMember{MemberID: "member-x", Node: fmt.Sprintf("node-%d", w), LeftAtUnixMs: int64(1000 + w)}

	g, ok, err := s.IsGone(ctx(t), "member-x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, want, g, "the winner's record, not the last writer's")

	won, err := s.MarkGone(ctx(t), "member-x", "late", 99)
	require.NoError(t, err)
	require.False(t, won, "a later record never replaces the first")
	all, err := s.Gone(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]GoneMember{"member-x": want}, all)

	_, ok, err = s.IsGone(ctx(t), "member-y")
	require.NoError(t, err)
	require.False(t, ok)
	n, err := s.goneCount(ctx(t))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func TestMarkGoneRefusesEmptyMember(t *testing.T) {
	s := newStore(t)
	_, err := s.MarkGone(ctx(t), "", "workflow-a", 1)
	require.ErrorIs(t, err, ErrInvalidIdentity)
}

// A client that was closed (a stopped member) is recognisable, so the
// background loops end instead of retrying for ever.
func TestClosedStoreClientEndsGoneLoops(t *testing.T) {
	srv := newStore(t)
	c := srv.rdb
	s := NewStore(StoreConfig{Client: c})
	require.NoError(t, c.Close())
	_, err := s.Gone(ctx(t))
	require.ErrorIs(t, err, ErrStoreUnavailable)
	require.ErrorIs(t, err, errStoreClosed)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runWatch runs watchSelf in the background; the channel yields its
// result and when it returned.
type watchResult struct {
	err error
	at  time.Time
}

func runWatch(ctx context.Context, cfg SelfFenceConfig, probe func(context.Context) (GoneMember, bool, error)) <-chan watchResult {
	out := make(chan watchResult, 1)
	go func() {
		err := watchSelf(ctx, cfg.withDefaults(), probe, quietLog())
		out <- watchResult{err, time.Now()}
	}()
	return out
}

func TestWatchSelfFencesOnOwnGoneRecord(t *testing.T) {
	var gone atomic.Bool
	var probes atomic.Int32
	res := runWatch(ctx(t), SelfFenceConfig{Lease: 10 * time.Second, Interval: 10 * time.Millisecond},
		func(context.Context) (GoneMember, bool, error) {
			probes.Add(1)
			if gone.Load() {
				return GoneMember{MemberID: "m1", Node: "workflow-a", LeftAtUnixMs: 1}, true, nil
			}
			return GoneMember{}, false, nil
		})
	require.Eventually(t, func() bool { return probes.Load() >= 3 }, 5*time.Second, 5*time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("fenced while not gone: %v", r.err)
	default:
	}
	gone.Store(true)
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrEvicted)
		require.NotErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, "workflow-a")
	case <-time.After(5 * time.Second):
		t.Fatal("no fence after the member was recorded gone")
	}
}

// A store that stops answering fences the member once the lease ran out
// since the last successful read, not before.
func TestWatchSelfFencesWhenTheLeaseRunsOut(t *testing.T) {
	const lease = 300 * time.Millisecond
	var down atomic.Bool
	var downAt atomic.Int64
	boom := errors.New("connection refused")
	res := runWatch(ctx(t), SelfFenceConfig{Lease: lease, Interval: 10 * time.Millisecond},
		func(context.Context) (GoneMember, bool, error) {
			if down.Load() {
				return GoneMember{}, false, boom
			}
			return GoneMember{}, false, nil
		})
	downAt.Store(time.Now().UnixNano())
	down.Store(true)
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, boom.Error(), "the last failure is named")
		took := r.at.Sub(time.Unix(0, downAt.Load()))
		t.Logf("fenced %s after the store went away (lease %s)", took, lease)
		// The last good read may have begun up to one interval before.
		require.GreaterOrEqual(t, took, lease-20*time.Millisecond, "fenced before the lease ran out")
	case <-time.After(5 * time.Second):
		t.Fatal("no fence although the store stayed unreachable past the lease")
	}
}

// A probe that hangs is as good as a failed one: the lease still runs out.
func TestWatchSelfFencesWhenTheStoreHangs(t *testing.T) {
	res := runWatch(ctx(t), SelfFenceConfig{Lease: 200 * time.Millisecond, Interval: 10 * time.Millisecond},
		func(c context.Context) (GoneMember, bool, error) {
			<-c.Done()
			return GoneMember{}, false, c.Err()
		})
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
	case <-time.After(5 * time.Second):
		t.Fatal("a hanging store never fenced")
	}
}

// Failures shorter than the lease, with successful reads between them,
// never fence: a Redis restart is ridden out.
func TestWatchSelfRidesOutShortOutages(t *testing.T) {
	const lease = 400 * time.Millisecond
	var n atomic.Int32
	c, cancel := context.WithTimeout(context.Background(), 4*lease)
	defer cancel()
	res := runWatch(c, SelfFenceConfig{Lease: lease, Interval: 10 * time.Millisecond},
		func(context.Context) (GoneMember, bool, error) {
			// Ten failures (about 100 ms), then one success, over and over.
			if n.Add(1)%11 != 0 {
				return GoneMember{}, false, errors.New("LOADING")
			}
			return GoneMember{}, false, nil
		})
	r := <-res
	require.NoError(t, r.err, "fenced although every outage was shorter than the lease")
	require.Greater(t, n.Load(), int32(30), "the watch kept reading")
}

func TestSelfFenceConfigDefaults(t *testing.T) {
	c := SelfFenceConfig{}.withDefaults()
	require.Equal(t, 10*time.Second, c.Lease)
	require.Equal(t, 500*time.Millisecond, c.Interval)
	c = SelfFenceConfig{Lease: 100 * time.Millisecond, Interval: time.Second}.withDefaults()
	require.Equal(t, 50*time.Millisecond, c.Interval, "a check at least twice per lease")
}

// standaloneLookup is a lookup whose gone-record machinery runs without a
// cluster: enough to feed it departures by hand.
func standaloneLookup(t *testing.T, s *Store) *Lookup {
	t.Helper()
	l := New(Config{Store: s, Logger: quietLog()})
	l.cluster = &pcluster.Cluster{ActorSystem: actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog() }))}
	l.startGone()
	t.Cleanup(l.Shutdown)
	return l
}

func departed(id string) []*pcluster.Member {
	return []*pcluster.Member{{Id: id, Host: "127.0.0.1", Port: 1}}
}

// recorded reads the gone record. It runs inside Eventually and Never,
// whose last tick may outlive the test (and its store client), so it only
// reports; notRecorded asserts the outcome synchronously afterwards.
func recorded(_ *testing.T, s *Store, id string) bool {
	_, ok, err := s.IsGone(context.Background(), id)
	return err == nil && ok
}

func notRecorded(t *testing.T, s *Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, ok, err := s.IsGone(ctx(t), id)
		require.NoError(t, err)
		require.False(t, ok, "%s recorded gone", id)
	}
}

// A departure is recorded in the background; one seen right after this
// process stalled (its own health checks may have timed out, so live
// peers look gone) is not, nor is one seen by a member that is itself
// recorded gone.
func TestDeparturesAreRecordedUnlessThisProcessStalledOrIsGone(t *testing.T) {
	s := newStore(t)
	l := standaloneLookup(t, s)
	require.NoError(t, s.PutMemberName(ctx(t), "m-dead", "workflow-x"))
	l.observeLeft(departed("m-dead"))
	require.Eventually(t, func() bool { return recorded(t, s, "m-dead") }, 5*time.Second, 10*time.Millisecond)
	g, _, err := s.IsGone(ctx(t), "m-dead")
	require.NoError(t, err)
	require.Equal(t, "workflow-x", g.Node, "recorded under the name it published")
	require.Eventually(t, func() bool { return l.IsGone("m-dead") }, 5*time.Second, 10*time.Millisecond, "the view follows its own record")

	// The heartbeat has not run for 3 s: a stall just ended.
	l.gone.beat.Store(int64(time.Since(l.gone.epoch) - 3*time.Second))
	l.observeLeft(departed("m-live-1"))
	// The heartbeat notices and keeps a quarantine.
	require.Eventually(t, func() bool { return time.Duration(l.gone.quietUntil.Load()) > time.Since(l.gone.epoch) },
		5*time.Second, 10*time.Millisecond)
	_, stalled := l.stalled()
	require.True(t, stalled)
	l.observeLeft(departed("m-live-2"))
	require.Never(t, func() bool { return recorded(t, s, "m-live-1") || recorded(t, s, "m-live-2") },
		300*time.Millisecond, 20*time.Millisecond, "a stalled process recorded a departure")
	notRecorded(t, s, "m-live-1", "m-live-2")

	// Out of quarantine, but this member is itself recorded gone.
	l.gone.quietUntil.Store(0)
	_, err = s.MarkGone(ctx(t), l.Self(), "", time.Now().UnixMilli())
	require.NoError(t, err)
	l.observeLeft(departed("m-live-3"))
	require.Never(t, func() bool { return recorded(t, s, "m-live-3") },
		300*time.Millisecond, 20*time.Millisecond, "a member recorded gone recorded another")
	notRecorded(t, s, "m-live-3")
}
