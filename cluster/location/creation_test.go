package location

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// takeCreation does what another store's script does with a Creation
// (commerce's locking reservation): while the record does not exist, the
// lock set to token if absent, for ttl, and the record marked.
func takeCreation(t *testing.T, s *Redis, c Creation, token string, ttl time.Duration) {
	t.Helper()
	rdb := s.rdb
	require.Zero(t, rdb.Exists(ctx(t), c.Record).Val())
	ok, err := rdb.SetNX(ctx(t), c.Lock, token, ttl).Result()
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, rdb.HSet(ctx(t), c.Record, c.StatusField, c.Creating).Err())
}

// A creation lock taken by another store's script, as Creation says, is
// BeginCreate's: another creator waits for it, the holder's token commits
// generation 1 Ready, and an abort leaves no key behind, as after
// BeginCreate.
func TestCreationIsBeginCreatesLock(t *testing.T) {
	s := newStore(t)
	c, ok := s.CreationFor(kind, "o1")
	require.True(t, ok)
	require.Equal(t, s.keys.record(kind, "o1"), c.Record)
	require.Equal(t, s.keys.lock(kind, "o1"), c.Lock)
	takeCreation(t, s, c, "held", 5*time.Second)

	acquired, _, rec, err := s.BeginCreate(ctx(t), kind, "o1", "other", 5*time.Second)
	require.NoError(t, err)
	require.False(t, acquired, "another creator does not get the lock")
	require.Equal(t, Creating, rec.Status)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "held", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: 1}))
	got, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Ready, got.Status)
	require.EqualValues(t, 1, got.Generation)

	c2, ok := s.CreationFor(kind, "o2")
	require.True(t, ok)
	takeCreation(t, s, c2, "held2", 5*time.Second)
	require.NoError(t, s.AbortCreate(ctx(t), kind, "o2", "held2"))
	require.Zero(t, s.rdb.Exists(ctx(t), c2.Record, c2.Lock).Val(), "an aborted creation leaves no key")
	acquired, next, _, err := s.BeginCreate(ctx(t), kind, "o2", "again", 5*time.Second)
	require.NoError(t, err)
	require.True(t, acquired)
	require.EqualValues(t, 1, next, "no generation used up")

	_, ok = s.CreationFor(kind, "bad{id}")
	require.False(t, ok, "an invalid identity has no Creation")
}

// On a Redis Cluster another store's script cannot reach the lock's keys:
// no Creation.
func TestCreationNeedsASingleServer(t *testing.T) {
	rc := redistest.StartCluster(t)
	s := mustRedis(t, rc.Client)
	_, ok := s.CreationFor(kind, "o1")
	require.False(t, ok)
	require.False(t, s.SingleServer())
}

// ReadyWrites added to a unit (AddTo) and applied as it says (the lock
// checked first, then each write in order) leave what CommitReady leaves: the same record, no
// lock, the same history entry and index entry; with another token in
// the lock they must not be applied, as CommitReady's ErrLockLost.
func TestReadyWritesAreCommitReady(t *testing.T) {
	s := newStore(t)
	rec := Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: 1}
	for _, id := range []string{"o1", "o2"} {
		c, ok := s.CreationFor(kind, id)
		require.True(t, ok)
		takeCreation(t, s, c, "held-"+id, 5*time.Second)
		require.NoError(t, s.rdb.HSet(ctx(t), c.Record, "takeover", "m0").Err())
	}
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "held-o1", rec))

	w, ok := s.ReadyWritesFor(kind, "o2", "held-o2", rec)
	require.True(t, ok)
	_, ok = s.ReadyWritesFor(kind, "o2", "", rec)
	require.False(t, ok, "no token, no writes")
	pw := &pipeWriter{}
	w.AddTo(pw)
	require.Equal(t, []string{"require", "hset", "hset", "hset", "hset", "hset", "hdel", "del", "rpushcap", "sadd"}, pw.ops,
		"the lock's check first, then the writes in the order ReadyWrites gives")
	require.Equal(t, []string{w.Lock, "held-o2"}, pw.required)
	require.Equal(t, "held-o2", s.rdb.Get(ctx(t), w.Lock).Val(), "the lock the writes must check")
	_, err := s.rdb.TxPipelined(ctx(t), func(p redis.Pipeliner) error {
		for _, f := range pw.apply {
			f(ctx(t), p)
		}
		return nil
	})
	require.NoError(t, err)

	for _, id := range []string{"o1", "o2"} {
		got, err := s.Get(ctx(t), kind, id)
		require.NoError(t, err)
		require.Equal(t, Ready, got.Status, id)
		require.Equal(t, rec.Owner, got.Owner, id)
		require.Equal(t, rec.PIDID, got.PIDID, id)
		require.Equal(t, rec.PIDAddress, got.PIDAddress, id)
		require.Equal(t, rec.Generation, got.Generation, id)
		require.False(t, got.TakenOver, id)
		require.Zero(t, s.rdb.Exists(ctx(t), s.keys.lock(kind, id)).Val(), id)
		h, err := s.History(ctx(t), kind, id)
		require.NoError(t, err)
		require.Len(t, h, 1, id)
		require.Equal(t, OwnershipActivated, h[0].Kind, id)
		require.Equal(t, rec.Owner, h[0].Member, id)
		require.Equal(t, rec.Generation, h[0].Generation, id)
	}
	owned, err := s.Owned(ctx(t), rec.Owner, kind)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"o1", "o2"}, owned)
	a, _ := s.rdb.HGetAll(ctx(t), s.keys.record(kind, "o1")).Result()
	b, _ := s.rdb.HGetAll(ctx(t), s.keys.record(kind, "o2")).Result()
	require.Equal(t, a, b, "field for field the same record")
}

// pipeWriter is a Writer that keeps each write as a command for a
// pipeline, and the ops in the order added.
type pipeWriter struct {
	ops      []string
	required []string
	apply    []func(context.Context, redis.Pipeliner)
}

func (w *pipeWriter) add(op string, f func(context.Context, redis.Pipeliner)) int {
	w.ops = append(w.ops, op)
	if f != nil {
		w.apply = append(w.apply, f)
	}
	return len(w.ops) - 1
}

func (w *pipeWriter) Require(key string, value []byte) int {
	w.required = append(w.required, key, string(value))
	return w.add("require", nil)
}

func (w *pipeWriter) HashSet(key, field string, value []byte) int {
	return w.add("hset", func(c context.Context, p redis.Pipeliner) { p.HSet(c, key, field, value) })
}

func (w *pipeWriter) HashDelete(key, field string) int {
	return w.add("hdel", func(c context.Context, p redis.Pipeliner) { p.HDel(c, key, field) })
}

func (w *pipeWriter) Delete(key string) int {
	return w.add("del", func(c context.Context, p redis.Pipeliner) { p.Del(c, key) })
}

func (w *pipeWriter) ListPushCapped(key string, value []byte, capacity int) int {
	return w.add("rpushcap", func(c context.Context, p redis.Pipeliner) {
		p.RPush(c, key, value)
		p.LTrim(c, key, int64(-capacity), -1)
	})
}

func (w *pipeWriter) SetAdd(key string, value []byte) int {
	return w.add("sadd", func(c context.Context, p redis.Pipeliner) { p.SAdd(c, key, value) })
}
