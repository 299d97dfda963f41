package placement

import (
	"context"
	"log/slog"
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
	return []*pcluster.Member{{Id: id, Host: "127.0.0.1", Port: 1}}
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
