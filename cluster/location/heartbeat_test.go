package location

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
