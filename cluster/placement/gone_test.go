package placement

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func newStore(t *testing.T) *location.Redis {
	t.Helper()
	c := redistest.Start(t).Client()
	t.Cleanup(func() { _ = c.Close() })
	s, err := location.NewRedis(location.Config{Client: c})
	require.NoError(t, err)
	return s
}

// standaloneLookup is a lookup whose gone-record machinery runs without a
// cluster: enough to feed it departures by hand.
func standaloneLookup(t *testing.T, s *location.Redis) *Lookup {
	t.Helper()
	l := New(Config{Store: s, Logger: quietLog()})
	l.cluster = &pcluster.Cluster{ActorSystem: actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quietLog() }))}
	l.startGone()
	t.Cleanup(l.Shutdown)
	return l
}

func departed(id string) []*pcluster.Member {
	return []*pcluster.Member{{Id: id, Host: "127.0.0.1", Port: 1, Kinds: []string{"k"}}}
}

// recorded reads the gone record. It runs inside Eventually and Never,
// whose last tick may outlive the test (and its store client), so it only
// reports; notRecorded asserts the outcome synchronously afterwards.
func recorded(_ *testing.T, s *location.Redis, id string) bool {
	_, ok, err := s.IsGone(context.Background(), id)
	return err == nil && ok
}

func notRecorded(t *testing.T, s *location.Redis, ids ...string) {
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
	require.NoError(t, s.PutMember(ctx(t), "m-dead", "workflow-x", 0))
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

// One observer's loss of sight is not enough: a lost member whose
// heartbeat is fresh is not recorded, its orders answer
// ErrOwnerUnreachable here, and the observer keeps asking until the
// heartbeat goes stale. A lost member without kinds hosts nothing and is
// never recorded. A lost member that still beats and answers a dial again
// is reported once (the API's cue to rejoin).
func TestALostMemberIsRecordedGoneOnlyOnceItsHeartbeatIsStale(t *testing.T) {
	s := newStore(t)
	l := standaloneLookup(t, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	reported := make(chan string, 4)
	l.OnLostMemberReachable(func(id, _ string) { reported <- id })

	beat := make(chan struct{})
	go func() {
		for {
			select {
			case <-beat:
				return
			case <-time.After(100 * time.Millisecond):
				_, _, _ = s.ProbeSelf(context.Background(), "m-cut", 600*time.Millisecond)
			}
		}
	}()
	_, _, err = s.ProbeSelf(ctx(t), "m-cut", 600*time.Millisecond)
	require.NoError(t, err)
	l.observeLeft([]*pcluster.Member{{Id: "m-cut", Host: host, Port: int32(p), Kinds: []string{"k"}}})
	l.observeLeft([]*pcluster.Member{{Id: "m-api", Host: "127.0.0.1", Port: 1}})
	require.Eventually(t, func() bool { return l.ownerUnreachable(context.Background(), "m-cut") }, 5*time.Second, 10*time.Millisecond,
		"judged alive by its fresh heartbeat")
	require.False(t, l.ownerUnreachable(context.Background(), "m-api"))
	require.Never(t, func() bool { return recorded(t, s, "m-cut") || recorded(t, s, "m-api") },
		time.Second, 50*time.Millisecond, "a beating member or a member without kinds was recorded gone")
	notRecorded(t, s, "m-cut", "m-api")
	select {
	case id := <-reported:
		require.Equal(t, "m-cut", id)
	case <-time.After(5 * time.Second):
		t.Fatal("a lost member that beats and answers a dial was not reported")
	}
	err = l.lostOwner(context.Background(), host+":"+port, "has left")
	require.ErrorIs(t, err, ErrOwnerUnreachable)

	// It stops beating: once the heartbeat is older than its bound, the
	// observer that kept asking records it.
	close(beat)
	require.Eventually(t, func() bool { return recorded(t, s, "m-cut") }, 5*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return l.IsGone("m-cut") && !l.ownerUnreachable(context.Background(), "m-cut") }, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, l.lostOwner(context.Background(), host+":"+port, "has left"), ErrUnavailable)
	notRecorded(t, s, "m-api")
}

// A hosting member that saw an API and then sees none for longer than
// its heartbeat bound withholds its heartbeat (the rule for a member
// that no API can reach); one that never saw an API keeps beating.
func TestAMemberIsolatedFromEveryAPIWithholdsItsHeartbeat(t *testing.T) {
	s := newStore(t)
	l := standaloneLookup(t, s)
	l.kinds = map[string]bool{"k": true}
	wf := &pcluster.Member{Id: "m-wf", Kinds: []string{"k"}}
	api := &pcluster.Member{Id: "m-api"}
	bound := 200 * time.Millisecond
	l.noteAPIs([]*pcluster.Member{wf})
	require.Equal(t, bound, l.beatBound(bound), "never saw an API: beats")
	l.noteAPIs([]*pcluster.Member{wf, api})
	require.Equal(t, bound, l.beatBound(bound))
	l.noteAPIs([]*pcluster.Member{wf})
	require.Equal(t, bound, l.beatBound(bound), "within the bound: still beats")
	require.Eventually(t, func() bool { return l.beatBound(bound) == 0 }, 2*time.Second, 20*time.Millisecond)
	_, _, err := s.ProbeSelf(ctx(t), "m-wf", l.beatBound(bound))
	require.NoError(t, err)
	v, err := s.MarkGoneIfStale(ctx(t), "m-wf", "", 1)
	require.NoError(t, err)
	require.True(t, v.Won, "no heartbeat was written: it can be recorded gone")
	l.noteAPIs([]*pcluster.Member{wf, api})
	require.Equal(t, bound, l.beatBound(bound), "an API in sight again: beats again")
}
