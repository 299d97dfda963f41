package location

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The Redis side of the Location Store: what the contract suite
// (locationtest, run in contract_test.go) cannot see from outside, such as
// the keyspace, hash tags, the stored history form, TTLs, a script cache
// flush and a closed or unreachable server.

const kind = "shoppingmall.order-workflow"

func newStore(t *testing.T) *Redis {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return mustRedis(t, c)
}

func mustRedis(t *testing.T, c redis.UniversalClient) *Redis {
	t.Helper()
	s, err := NewRedis(Config{Client: c})
	require.NoError(t, err)
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func ready(t *testing.T, s *Redis, id, pid string) int64 {
	t.Helper()
	ok, next, _, err := s.BeginCreate(ctx(t), kind, id, "tok-"+pid, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, id, "tok-"+pid, Record{Owner: "m-" + pid, PIDAddress: "a", PIDID: pid, Generation: next}))
	return next
}

// A wiring mistake is refused at construction: no client, or a prefix
// that would add a second hash tag. Any other prefix is honoured.
func TestNewRedisRefusesBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { _ = c.Close() })
	for name, cfg := range map[string]Config{
		"no client":           {},
		"prefix with a brace": {Client: c, KeyPrefix: "sm:{loc}:"},
	} {
		s, err := NewRedis(cfg)
		require.ErrorIs(t, err, ErrConfig, name)
		require.Nil(t, s, name)
	}
	s, err := NewRedis(Config{Client: c})
	require.NoError(t, err)
	require.Equal(t, DefaultKeyPrefix, s.keys.prefix)
	s, err = NewRedis(Config{Client: c, KeyPrefix: "t1:loc:"})
	require.NoError(t, err)
	require.Equal(t, "t1:loc:record-kind:{o1}", s.keys.record("record-kind", "o1"))
}

// Every key lies under the prefix, and every per-identity key carries the
// identity's hash tag.
func TestKeyspace(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	s := mustRedis(t, c)
	require.NoError(t, s.PutMember(ctx(t), "member-1", "workflow-a", 0))
	_, err := s.MarkGone(ctx(t), "member-0", "workflow-z", 1)
	require.NoError(t, err)
	ready(t, s, "ord-1", "p1")
	keys, err := c.Keys(ctx(t), "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "sm:loc:"), "key %s outside the Location Store prefix", k)
		// The heartbeat hash holds the gone version since MarkGone moves it.
		if k != "sm:loc:members" && k != "sm:loc:gone" && k != s.keys.heartbeat() && !strings.HasPrefix(k, "sm:loc:owned:") {
			require.Contains(t, k, "{ord-1}", "per-order keys carry the hash tag")
		}
	}
}

func TestUnreachableStore(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	require.NoError(t, srv.Stop())
	_, err := mustRedis(t, c).Get(ctx(t), kind, "o")
	require.True(t, errors.Is(err, ErrStoreUnavailable) || errors.Is(err, ErrTimeout), "got %v", err)
}

// A probe of an unknown identity (an activation that found no stream and
// gave its generation back, or one aborted before it committed) leaves no
// key behind: not even a record "Missing at generation 0".
func TestProbeOfUnknownIdentityLeavesNoKey(t *testing.T) {
	s := newStore(t)
	keys := func() []string {
		k, err := s.rdb.Keys(ctx(t), "*").Result()
		require.NoError(t, err)
		return k
	}
	ok, gen, _, err := s.BeginCreate(ctx(t), kind, "probe-1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, "probe-1", "tok", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: gen}))
	released, err := s.Release(ctx(t), kind, "probe-1", "p1", GiveBackGeneration)
	require.NoError(t, err)
	require.True(t, released)
	require.Empty(t, keys(), "a discarded first activation leaves nothing")

	ok, _, _, err = s.BeginCreate(ctx(t), kind, "probe-2", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.AbortCreate(ctx(t), kind, "probe-2", "tok"))
	require.Empty(t, keys(), "an aborted first activation leaves nothing")

	// A real order keeps its generation through a discard of a later one.
	ok, gen, _, err = s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: gen}))
	_, err = s.Release(ctx(t), kind, "o1", "p1", KeepGeneration)
	require.NoError(t, err)
	ok, gen, _, err = s.BeginCreate(ctx(t), kind, "o1", "tok2", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 2, gen)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok2", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p2", Generation: gen}))
	_, err = s.Release(ctx(t), kind, "o1", "p2", GiveBackGeneration)
	require.NoError(t, err)
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Record{Generation: 1}, rec)
}

// An extended creation lock lives for the new ttl.
func TestExtendCreateSetsTheLockTTL(t *testing.T) {
	s := newStore(t)
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.ExtendCreate(ctx(t), kind, "o1", "tok", time.Minute))
	ttl, err := s.rdb.PTTL(ctx(t), s.keys.lock(kind, "o1")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 30*time.Second)
}

// A client that was closed (a stopped member) is recognisable, so the
// background loops end instead of retrying for ever.
func TestClosedStoreClientEndsGoneLoops(t *testing.T) {
	srv := newStore(t)
	c := srv.rdb
	s := mustRedis(t, c)
	require.NoError(t, c.Close())
	_, err := s.Gone(ctx(t))
	require.ErrorIs(t, err, ErrStoreUnavailable)
	require.ErrorIs(t, err, ErrClosed)
}

// The stored history entry is the documented form, member last, under
// the record's key plus ":history".
func TestHistoryStoredForm(t *testing.T) {
	s := newStore(t)
	ready(t, s, "o1", "p1")
	raw, err := s.rdb.LRange(ctx(t), DefaultKeyPrefix+kind+":{o1}:history", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, raw, 1)
	require.Regexp(t, `^activation\|1\|[0-9]{13}\|m-p1$`, raw[0])
}

// The history keeps its HistoryCap newest entries: a list below the cap
// grows, one at the cap drops its oldest as the newest lands.
func TestHistoryKeepsTheNewestHistoryCapEntries(t *testing.T) {
	s := newStore(t)
	key := DefaultKeyPrefix + kind + ":{o1}:history"
	old := make([]any, HistoryCap-1)
	for i := range old {
		old[i] = fmt.Sprintf("activation|0|0|old-%d", i)
	}
	require.NoError(t, s.rdb.RPush(ctx(t), key, old...).Err())
	ready(t, s, "o1", "p1")
	require.EqualValues(t, HistoryCap, s.rdb.LLen(ctx(t), key).Val(), "below the cap: nothing trimmed")
	require.Equal(t, "activation|0|0|old-0", s.rdb.LIndex(ctx(t), key, 0).Val())

	_, err := s.Release(ctx(t), kind, "o1", "p1", KeepGeneration)
	require.NoError(t, err)
	require.EqualValues(t, HistoryCap, s.rdb.LLen(ctx(t), key).Val(), "at the cap: the oldest goes")
	require.Equal(t, "activation|0|0|old-1", s.rdb.LIndex(ctx(t), key, 0).Val())
	require.Regexp(t, `\|m-p1$`, s.rdb.LIndex(ctx(t), key, -2).Val())
	require.Regexp(t, `^[a-z]+\|1\|[0-9]{13}\|`, s.rdb.LIndex(ctx(t), key, -1).Val(), "the release, newest, last")
}

// Redis Cluster hashes only the first {...} of a key: the history must
// name the same identity as its record, so one script can write both.
func TestHistorySharesTheRecordSlot(t *testing.T) {
	k, err := newKeys("")
	require.NoError(t, err)
	tag := func(k string) string {
		i := strings.IndexByte(k, '{')
		j := strings.IndexByte(k[i+1:], '}')
		return k[i+1 : i+1+j]
	}
	require.Equal(t, "o1", tag(k.history(kind, "o1")))
	require.Equal(t, tag(k.record(kind, "o1")), tag(k.history(kind, "o1")))
	require.Equal(t, tag(k.record(kind, "o1")), tag(k.lock(kind, "o1")))
}

// An index that lists nothing any more leaves no key behind.
func TestEmptyIndexLeavesNoKey(t *testing.T) {
	s := newStore(t)
	ready(t, s, "o1", "p1")
	n, err := s.rdb.Exists(ctx(t), "sm:loc:owned:m-p1").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the owner's index is a key of its own")
	released, err := s.Release(ctx(t), kind, "o1", "p1", KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	keys, err := s.rdb.Keys(ctx(t), "sm:loc:owned:*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "an empty index leaves no key")
}

// A grain that passivates releases its record and its owner's index
// entry in one round trip on one server. An owner other than the one
// expected (which no passivating grain sees) still gets its entry
// removed, after the script; the expected owner's index is not touched.
func TestReleaseAtDropsTheIndexEntryInTheSameRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	hook := &redistest.RoundTrips{}
	c.AddHook(hook)
	s := mustRedis(t, c)
	// Load the script first: a cold script cache costs an EVAL retry,
	// a round trip the steady state does not make.
	ready(t, s, "warm", "pw")
	_, err := s.ReleaseAt(ctx(t), kind, "warm", "m-pw", "pw", KeepGeneration)
	require.NoError(t, err)

	ready(t, s, "o1", "p1")
	before := hook.Count()
	released, err := s.ReleaseAt(ctx(t), kind, "o1", "m-p1", "p1", KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	require.EqualValues(t, 1, hook.Count()-before, "the release and the index entry's removal share one round trip")
	ids, err := s.Owned(ctx(t), "m-p1", kind)
	require.NoError(t, err)
	require.Empty(t, ids)
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Missing, rec.Status)

	ready(t, s, "o2", "p2")
	ready(t, s, "o3", "p3")
	before = hook.Count()
	released, err = s.ReleaseAt(ctx(t), kind, "o2", "m-p3", "p2", KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	require.EqualValues(t, 2, hook.Count()-before, "the record named another owner: its entry goes after the script")
	ids, err = s.Owned(ctx(t), "m-p2", kind)
	require.NoError(t, err)
	require.Empty(t, ids, "the owner the record named lost its entry")
	ids, err = s.Owned(ctx(t), "m-p3", kind)
	require.NoError(t, err)
	require.Equal(t, []string{"o3"}, ids, "the expected owner's index keeps its own entries")

	// Not released (another pid): no index change at all.
	ready(t, s, "o4", "p4")
	released, err = s.ReleaseAt(ctx(t), kind, "o4", "m-p4", "not-p4", KeepGeneration)
	require.NoError(t, err)
	require.False(t, released)
	ids, err = s.Owned(ctx(t), "m-p4", kind)
	require.NoError(t, err)
	require.Equal(t, []string{"o4"}, ids)
}

// The commit pipeline survives a script cache flush (a Redis restart).
func TestIndexedCommitAfterScriptFlush(t *testing.T) {
	s := newStore(t)
	require.NoError(t, s.rdb.ScriptFlush(ctx(t)).Err())
	ready(t, s, "o1", "p1")
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Ready, rec.Status)
	ids, err := s.Owned(ctx(t), "m-p1", kind)
	require.NoError(t, err)
	require.Equal(t, []string{"o1"}, ids)
}

func TestParseOwnershipEvent(t *testing.T) {
	e, err := ParseOwnershipEvent("takeover|7|1700000000000|m|with|bars")
	require.NoError(t, err)
	require.Equal(t, OwnershipEvent{Kind: OwnershipTakenOver, Generation: 7, AtUnixMs: 1_700_000_000_000, Member: "m|with|bars"}, e)
	for _, bad := range []string{"", "activation|1|2", "activation|x|2|m", "activation|1|y|m", "|1|2|m"} {
		_, err := ParseOwnershipEvent(bad)
		require.Error(t, err, "%q", bad)
	}
}
