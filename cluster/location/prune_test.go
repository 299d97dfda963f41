package location_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// A gone member is pruned only once no Location record names it, and then
// whole: its name, gone record, heartbeat and takeover index; the gone
// version moves with each record written and each pruned, so a reader
// that compares versions never misses a change (a count would: one
// pruned and one added). A member not recorded gone is never pruned.
func TestPruneMemberOnlyOnceNothingNamesIt(t *testing.T) {
	srv := redistest.Start(t)
	s, err := location.NewRedis(location.Config{Client: srv.Client()})
	require.NoError(t, err)
	testPrune(t, s)
}

// The same on a 3-master Redis Cluster: the name, the gone record with
// its heartbeat, and the index sit in different slots, and no step is a
// cross-slot script (StartCluster fails the test on CROSSSLOT).
func TestPruneMemberOnARedisCluster(t *testing.T) {
	rc := redistest.StartCluster(t)
	s, err := location.NewRedis(location.Config{Client: rc.Client, KeyPrefix: "prune:loc:"})
	require.NoError(t, err)
	testPrune(t, s)
}

func testPrune(t *testing.T, s *location.Redis) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const kind = "shoppingmall.order-workflow"
	ready := func(id, member string) {
		ok, next, _, err := s.BeginCreate(ctx, kind, id, "tok-"+id, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.CommitReady(ctx, kind, id, "tok-"+id, location.Record{Owner: member, PIDAddress: "a", PIDID: "p-" + id, Generation: next}))
	}
	for _, m := range []string{"m-1", "m-2"} {
		require.NoError(t, s.PutMember(ctx, m, "node-"+m, 1))
		_, gone, err := s.ProbeSelf(ctx, m, time.Second)
		require.NoError(t, err)
		require.False(t, gone)
	}
	ready("o-1", "m-1")
	ready("o-2", "m-2")
	// o-2 left m-2 (its index entry may stay: a stale one on one server,
	// dropped after the release on a Redis Cluster).
	released, err := s.Release(ctx, kind, "o-2", "p-o-2", location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	size, err := s.MembershipSize(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, size.Names)
	require.Equal(t, 2, size.Heartbeats)
	require.Zero(t, size.Gone)
	require.GreaterOrEqual(t, size.Indexes, 1)

	out, err := s.PruneMember(ctx, "m-2")
	require.NoError(t, err)
	require.Equal(t, location.PruneOutcome{NotGone: true}, out, "a live member is never pruned")

	v0, err := s.GoneVersion(ctx)
	require.NoError(t, err)
	for _, m := range []string{"m-1", "m-2"} {
		won, err := s.MarkGone(ctx, m, "node-"+m, time.Now().UnixMilli())
		require.NoError(t, err)
		require.True(t, won)
	}
	v1, err := s.GoneVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v0+2, v1, "each record written moves the version")

	out, err = s.PruneMember(ctx, "m-1")
	require.NoError(t, err)
	require.Equal(t, location.PruneOutcome{Owns: 1}, out, "o-1 still names m-1: its takeover needs the gone record")
	name, err := s.MemberName(ctx, "m-1")
	require.NoError(t, err)
	require.Equal(t, "node-m-1", name, "nothing of m-1 touched")

	out, err = s.PruneMember(ctx, "m-2")
	require.NoError(t, err)
	require.Equal(t, location.PruneOutcome{Pruned: true}, out, "no record names m-2 any more")
	name, err = s.MemberName(ctx, "m-2")
	require.NoError(t, err)
	require.Empty(t, name, "the name goes first")
	schemas, err := s.MemberSchemas(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"m-1": 1}, schemas, "the advertised schema goes with the name")
	_, gone, err := s.IsGone(ctx, "m-2")
	require.NoError(t, err)
	require.False(t, gone)
	v2, err := s.GoneVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v1+1, v2, "a pruned record moves the version too")
	size, err = s.MembershipSize(ctx)
	require.NoError(t, err)
	require.Equal(t, location.MembershipSize{Names: 1, Gone: 1, Heartbeats: 1, Indexes: 1}, size)

	// A takeover (here, the record released) lets m-1 go too; again is
	// harmless.
	released, err = s.ReleaseAt(ctx, kind, "o-1", "m-1", "p-o-1", location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	out, err = s.PruneMember(ctx, "m-1")
	require.NoError(t, err)
	require.True(t, out.Pruned)
	out, err = s.PruneMember(ctx, "m-1")
	require.NoError(t, err)
	require.Equal(t, location.PruneOutcome{NotGone: true}, out)
	size, err = s.MembershipSize(ctx)
	require.NoError(t, err)
	require.Equal(t, location.MembershipSize{}, size, "nothing of either member is left")
	v3, err := s.GoneVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v2+1, v3)

	// A pruned member that was only paused beats once more before its
	// self-fence read finds its name gone: an orphan heartbeat, dropped
	// once it is ten bounds old, unlike a named member's, however stale.
	require.NoError(t, s.PutMember(ctx, "m-3", "node-m-3", 0))
	for _, m := range []string{"m-2", "m-3"} {
		_, gone, err := s.ProbeSelf(ctx, m, 20*time.Millisecond)
		require.NoError(t, err)
		require.False(t, gone)
	}
	n, err := s.PruneOrphanBeats(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a fresh orphan beat may be a member that has not published its name yet")
	require.Eventually(t, func() bool {
		n, err = s.PruneOrphanBeats(ctx)
		return err == nil && n == 1
	}, 5*time.Second, 50*time.Millisecond, "dropped once ten bounds old")
	size, err = s.MembershipSize(ctx)
	require.NoError(t, err)
	require.Equal(t, location.MembershipSize{Names: 1, Heartbeats: 1}, size, "m-3's own heartbeat stays, however stale")
}
