package compat_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func newStore(t *testing.T) *location.Redis {
	t.Helper()
	c := redistest.Start(t).Client()
	t.Cleanup(func() { _ = c.Close() })
	s, err := location.NewRedis(location.Config{Client: c})
	require.NoError(t, err)
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func put(t *testing.T, s *location.Redis, id, node string, schema int) {
	t.Helper()
	require.NoError(t, s.PutMember(ctx(t), id, node, schema))
}

var at = time.UnixMilli(1_765_000_000_000)

// A raise waits for every live workflow member: one that reads less, or
// one of an older build that advertises nothing (it reads the base
// schema), refuses it before anything is written. Members that are not
// live, and APIs, do not count.
func TestRaiseWaitsForEveryLiveWorkflowMember(t *testing.T) {
	s := newStore(t)
	put(t, s, "m-new", "workflow-a", 2)
	put(t, s, "m-old", "workflow-b", 1)
	put(t, s, "m-api", "api-a", 0)
	put(t, s, "m-left", "workflow-c", 1)

	_, _, err := compat.Raise(ctx(t), s, []string{"m-new", "m-old"}, 2, "alice", false, at)
	var behind *compat.BehindError
	require.ErrorAs(t, err, &behind)
	require.ErrorIs(t, err, compat.ErrMembersBehind)
	require.Equal(t, errkind.FailedPrecondition, errkind.Of(err))
	require.Equal(t, 2, behind.Schema)
	require.Len(t, behind.Behind, 1)
	require.Equal(t, "workflow-b", behind.Behind[0].Node)
	require.Contains(t, err.Error(), "workflow-b reads up to 1")

	put(t, s, "m-pre", "workflow-d", 0) // a build that predates the advertisement
	_, _, err = compat.Raise(ctx(t), s, []string{"m-new", "m-pre"}, 2, "alice", false, at)
	require.ErrorAs(t, err, &behind)
	require.Equal(t, location.BaseSchema, behind.Behind[0].Schema)
	require.False(t, behind.Behind[0].Advertised)

	_, _, err = compat.Raise(ctx(t), s, nil, 2, "alice", false, at)
	require.ErrorIs(t, err, compat.ErrNoWorkflowMembers)
	l, err := s.SchemaLevel(ctx(t))
	require.NoError(t, err)
	require.Equal(t, location.SchemaLevel{Level: location.BaseSchema}, l, "nothing refused was written")

	l, raised, err := compat.Raise(ctx(t), s, []string{"m-new"}, 2, "alice", false, at)
	require.NoError(t, err)
	require.True(t, raised)
	require.Equal(t, location.SchemaLevel{Level: 2, RaisedBy: "alice", RaisedAtUnixMs: at.UnixMilli(), From: 1}, l)

	_, _, err = compat.Raise(ctx(t), s, []string{"m-new"}, 1, "alice", false, at)
	require.ErrorIs(t, err, location.ErrSchemaLevelLower, "the level never drops")
}

// The report shows the level, its history and every published member,
// the live workflow members first, with the newest schema all of them
// read.
func TestStatusReportsWhatEveryMemberReads(t *testing.T) {
	s := newStore(t)
	put(t, s, "m-a", "workflow-a", 3)
	put(t, s, "m-b", "workflow-b", 2)
	put(t, s, "m-api", "api-a", 0)
	put(t, s, "m-gone", "workflow-0", 1)
	_, _, err := compat.Raise(ctx(t), s, []string{"m-a", "m-b"}, 2, "bob", false, at)
	require.NoError(t, err)

	rep, err := compat.Status(ctx(t), s, []string{"m-b", "m-a"})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Level.Level)
	require.Len(t, rep.History, 1)
	require.Equal(t, "bob", rep.History[0].RaisedBy)
	require.Equal(t, 2, rep.Readable)
	require.Equal(t, []compat.Member{
		{ID: "m-a", Node: "workflow-a", Schema: 3, Advertised: true, Workflow: true},
		{ID: "m-b", Node: "workflow-b", Schema: 2, Advertised: true, Workflow: true},
		{ID: "m-api", Node: "api-a"},
		{ID: "m-gone", Node: "workflow-0", Schema: 1, Advertised: true},
	}, rep.Members)

	rep, err = compat.Status(ctx(t), s, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Readable)
}

// A writer stamps the lower of the level and its own schema: a new build
// writes the old schema until the level rises, and an old build never
// writes past its own whatever the level.
func TestGateWritesTheLowerOfLevelAndOwnSchema(t *testing.T) {
	s := newStore(t)
	put(t, s, "m-a", "workflow-a", 2)
	newer := compat.NewGate(compat.GateConfig{Store: s, Own: 2, Interval: time.Hour})
	older := compat.NewGate(compat.GateConfig{Store: s, Own: 1, Interval: time.Hour})
	require.NoError(t, newer.Refresh(ctx(t)))
	require.NoError(t, older.Refresh(ctx(t)))
	require.Equal(t, 1, newer.Writes())
	require.Equal(t, 1, older.Writes())

	_, _, err := compat.Raise(ctx(t), s, []string{"m-a"}, 2, "alice", false, at)
	require.NoError(t, err)
	require.Equal(t, 1, newer.Writes(), "the view moves only when read again")
	require.NoError(t, newer.Refresh(ctx(t)))
	require.NoError(t, older.Refresh(ctx(t)))
	require.Equal(t, 2, newer.Writes())
	require.Equal(t, 2, older.Level())
	require.Equal(t, 1, older.Writes())
}

// A gate whose store does not answer stays at the base schema, which
// every build reads, and says why.
func TestGateStaysAtTheBaseSchemaWithoutItsStore(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s, err := location.NewRedis(location.Config{Client: c})
	require.NoError(t, err)
	g := compat.NewGate(compat.GateConfig{Store: s, Own: 3})
	require.Error(t, g.Refresh(ctx(t)))
	require.Equal(t, location.BaseSchema, g.Writes())
}

// With AutoRaise the level rises by itself once every live workflow
// member reads a newer schema, recorded with the raising node; not while
// one of them does not, and never without AutoRaise.
func TestGateRaisesByItselfOnlyWhenEveryLiveMemberReads(t *testing.T) {
	s := newStore(t)
	put(t, s, "m-a", "workflow-a", 2)
	put(t, s, "m-b", "workflow-b", 1)
	live := []string{"m-a", "m-b"}
	gate := func(auto bool) *compat.Gate {
		return compat.NewGate(compat.GateConfig{Store: s, Own: 2, AutoRaise: auto, Node: "workflow-a",
			Live: func() []string { return live }, Now: func() time.Time { return at }})
	}
	auto, manual := gate(true), gate(false)
	require.NoError(t, auto.Refresh(ctx(t)))
	require.Equal(t, 1, auto.Level(), "workflow-b reads only 1")

	put(t, s, "m-b", "workflow-b", 2) // workflow-b upgraded in place
	require.NoError(t, manual.Refresh(ctx(t)))
	require.Equal(t, 1, manual.Level(), "without AutoRaise only an operator raises")
	require.NoError(t, auto.Refresh(ctx(t)))
	require.Equal(t, 2, auto.Level())
	l, err := s.SchemaLevel(ctx(t))
	require.NoError(t, err)
	require.Equal(t, location.SchemaLevel{Level: 2, RaisedBy: "workflow-a", RaisedAtUnixMs: at.UnixMilli(), Auto: true, From: 1}, l)
	require.NoError(t, manual.Refresh(ctx(t)))
	require.Equal(t, 2, manual.Writes())
}

// Run keeps the view current until its context ends.
func TestGateRunFollowsARaise(t *testing.T) {
	s := newStore(t)
	put(t, s, "m-a", "workflow-a", 2)
	g := compat.NewGate(compat.GateConfig{Store: s, Own: 2, Interval: 20 * time.Millisecond})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(runCtx); close(done) }()
	_, _, err := compat.Raise(ctx(t), s, []string{"m-a"}, 2, "alice", false, at)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return g.Writes() == 2 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}
