package location

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// A member's self-fence read writes its heartbeat at Redis' clock; a
// member is recorded gone only once that heartbeat is older than the
// bound it published, and a member that never beat is judged by the
// topology alone.
func TestGoneIsRecordedOnlyOnceTheHeartbeatIsStale(t *testing.T) {
	s := newStore(t)
	c := ctx(t)

	_, gone, err := s.ProbeSelf(c, "m-1", 300*time.Millisecond)
	require.NoError(t, err)
	require.False(t, gone)
	hb, err := s.rdb.HGet(c, s.keys.heartbeat(), "m-1").Result()
	require.NoError(t, err)
	require.Regexp(t, `^\d{13}:300$`, hb, "TIME in ms and the bound")

	v, err := s.MarkGoneIfStale(c, "m-1", "workflow-a", 42)
	require.NoError(t, err)
	require.True(t, v.Fresh, "%+v", v)
	require.False(t, v.Gone)
	require.Equal(t, 300*time.Millisecond, v.Bound)
	require.LessOrEqual(t, v.Age, v.Bound)
	_, gone, err = s.IsGone(c, "m-1")
	require.NoError(t, err)
	require.False(t, gone, "a fresh heartbeat wrote no record")

	// A beat keeps it fresh; once it stops for longer than the bound the
	// same call records it, and only the first record wins.
	require.Eventually(t, func() bool {
		v, err := s.MarkGoneIfStale(c, "m-1", "workflow-a", 42)
		return err == nil && v.Won && v.Gone
	}, 5*time.Second, 50*time.Millisecond)
	g, gone, err := s.IsGone(c, "m-1")
	require.NoError(t, err)
	require.True(t, gone)
	require.Equal(t, "workflow-a", g.Node)
	require.EqualValues(t, 42, g.LeftAtUnixMs)
	v, err = s.MarkGoneIfStale(c, "m-1", "workflow-a", 43)
	require.NoError(t, err)
	require.Equal(t, HeartbeatVerdict{Gone: true}, v)
	n, err := s.rdb.HExists(c, s.keys.heartbeat(), "m-1").Result()
	require.NoError(t, err)
	require.False(t, n, "the heartbeat goes with the record")

	// A recorded member's probe answers its record and beats no more.
	g, gone, err = s.ProbeSelf(c, "m-1", time.Second)
	require.NoError(t, err)
	require.True(t, gone)
	require.Equal(t, "m-1", g.MemberID)
	n, err = s.rdb.HExists(c, s.keys.heartbeat(), "m-1").Result()
	require.NoError(t, err)
	require.False(t, n)

	// No heartbeat at all: the topology's verdict decides.
	v, err = s.MarkGoneIfStale(c, "m-never", "", 1)
	require.NoError(t, err)
	require.True(t, v.Won)

	// A probe with no bound reads without beating.
	_, gone, err = s.ProbeSelf(c, "m-2", 0)
	require.NoError(t, err)
	require.False(t, gone)
	n, err = s.rdb.HExists(c, s.keys.heartbeat(), "m-2").Result()
	require.NoError(t, err)
	require.False(t, n)
	_, _, err = s.ProbeSelf(c, "", time.Second)
	require.ErrorIs(t, err, ErrInvalidIdentity)
}

// While another member beats (the store is steady), a member whose
// heartbeat went stale is recorded at the first verdict: the judging
// window is for a store that just came back, not for the common case.
func TestAStaleHeartbeatCountsAtOnceWhileTheStoreIsSteady(t *testing.T) {
	s := newStore(t)
	c := ctx(t)
	const bound = time.Second

	_, _, err := s.ProbeSelf(c, "m-dead", bound)
	require.NoError(t, err)
	var first HeartbeatVerdict
	require.Eventually(t, func() bool {
		_, _, err := s.ProbeSelf(c, "m-live", bound)
		require.NoError(t, err)
		v, err := s.MarkGoneIfStale(c, "m-dead", "workflow-b", 7)
		require.NoError(t, err)
		if v.Fresh {
			return false
		}
		first = v
		return true
	}, 5*time.Second, 20*time.Millisecond)
	require.True(t, first.Won, "the first stale verdict records it: %+v", first)
	require.False(t, first.Pending)
	n, err := s.rdb.HExists(c, s.keys.heartbeat(), heartbeatJudge+"m-dead").Result()
	require.NoError(t, err)
	require.False(t, n, "no judging window was opened")
}

// A Redis restart stops every member's heartbeat for as long as it lasts:
// right after it every heartbeat is older than its bound. A member that an
// observer lost just then must not be recorded gone for the outage; its
// first beat after the restart keeps it, while a member that never beats
// again is still recorded, one bound later.
func TestARestartedStoreDoesNotRecordALiveMemberGone(t *testing.T) {
	r := redistest.StartRestartable(t)
	c := ctx(t)
	client := r.Server().Client()
	t.Cleanup(func() { _ = client.Close() })
	s := mustRedis(t, client)
	const bound = time.Second

	for _, m := range []string{"m-alive", "m-dead"} {
		_, _, err := s.ProbeSelf(c, m, bound)
		require.NoError(t, err)
	}
	r.Down()
	// The observer asks throughout the outage, as recordGone does; the
	// outage lasts past every bound.
	down := time.Now()
	require.Eventually(t, func() bool {
		_, err := s.MarkGoneIfStale(c, "m-alive", "workflow-a", 1)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		return time.Since(down) > 2*bound
	}, 10*time.Second, 50*time.Millisecond)
	r.Up()

	var v HeartbeatVerdict
	require.Eventually(t, func() bool {
		var err error
		v, err = s.MarkGoneIfStale(c, "m-alive", "workflow-a", 1)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the store answers again")
	require.True(t, v.Pending, "stale by the outage only: %+v", v)
	require.False(t, v.Gone)
	require.Greater(t, v.Age, bound)

	// The live member's next probe beats; the dead one's never comes.
	_, gone, err := s.ProbeSelf(c, "m-alive", bound)
	require.NoError(t, err)
	require.False(t, gone)
	v, err = s.MarkGoneIfStale(c, "m-alive", "workflow-a", 1)
	require.NoError(t, err)
	require.True(t, v.Fresh, "%+v", v)

	v, err = s.MarkGoneIfStale(c, "m-dead", "workflow-b", 2)
	require.NoError(t, err)
	require.True(t, v.Pending, "%+v", v)
	require.Eventually(t, func() bool {
		v, err := s.MarkGoneIfStale(c, "m-dead", "workflow-b", 2)
		require.NoError(t, err)
		return v.Won
	}, 5*time.Second, 20*time.Millisecond, "a member that stays silent is recorded one bound later")

	_, gone, err = s.IsGone(c, "m-alive")
	require.NoError(t, err)
	require.False(t, gone)
	// Once the live member has beaten for a whole bound the store is
	// steady again: its silence would count at the first verdict.
	_, _, err = s.ProbeSelf(c, "m-alive", bound)
	require.NoError(t, err)
	n, err := s.rdb.HExists(c, s.keys.heartbeat(), heartbeatJudge+"m-alive").Result()
	require.NoError(t, err)
	require.False(t, n, "a beat closes the member's judging window")
}
