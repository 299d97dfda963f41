package location

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

const kind = "shoppingmall.order-workflow"

func newStore(t *testing.T) *Store {
	t.Helper()
	srv := redisserver.ForTest(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return NewStore(StoreConfig{Client: c})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestMissingIdentityStartsAtGenerationOne(t *testing.T) {
	s := newStore(t)
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Missing, rec.Status)
	ok, next, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, next)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: next}))
	rec, err = s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Record{Status: Ready, Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: 1}, rec)
	ok, _, got, err := s.BeginCreate(ctx(t), kind, "o1", "tok2", time.Second)
	require.NoError(t, err)
	require.False(t, ok, "a Ready identity is never created again")
	require.Equal(t, rec, got, "BeginCreate answers the Ready record in the same round trip")
}

// Of many concurrent creators exactly one takes the lock.
func TestConcurrentBeginCreateHasOneWinner(t *testing.T) {
	s := newStore(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ok, next, rec, err := s.BeginCreate(context.Background(), kind, "race", fmt.Sprint("tok", i), 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				winners++
				mu.Unlock()
				if next != 1 {
					t.Errorf("winner got generation %d", next)
				}
			} else if rec.Status != Creating {
				t.Errorf("loser saw %q", rec.Status)
			}
		}(i)
	}
	wg.Wait()
	require.Equal(t, 1, winners)
}

func TestCommitWithLostLockFails(t *testing.T) {
	s := newStore(t)
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o", "tok", 20*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	// The lock expires; a second creator takes over.
	require.Eventually(t, func() bool {
		ok, _, _, err := s.BeginCreate(context.Background(), kind, "o", "tok2", time.Second)
		return err == nil && ok
	}, 5*time.Second, 10*time.Millisecond)
	err = s.CommitReady(ctx(t), kind, "o", "tok", Record{Owner: "m", PIDID: "p", Generation: 1})
	require.ErrorIs(t, err, ErrLockLost)
}

func TestAbortCreateUsesNoGeneration(t *testing.T) {
	s := newStore(t)
	ok, next, _, err := s.BeginCreate(ctx(t), kind, "o", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, next)
	require.NoError(t, s.AbortCreate(ctx(t), kind, "o", "tok"))
	ok, next, _, err = s.BeginCreate(ctx(t), kind, "o", "tok2", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, next)
}

func ready(t *testing.T, s *Store, id, pid string) int64 {
	t.Helper()
	ok, next, _, err := s.BeginCreate(ctx(t), kind, id, "tok-"+pid, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, id, "tok-"+pid, Record{Owner: "m-" + pid, PIDAddress: "a", PIDID: pid, Generation: next}))
	return next
}

func TestReleaseKeepsGenerationAndDiscardGivesItBack(t *testing.T) {
	s := newStore(t)
	require.EqualValues(t, 1, ready(t, s, "o", "p1"))
	released, err := s.Release(ctx(t), kind, "o", "not-the-owner", false)
	require.NoError(t, err)
	require.False(t, released, "only the owner pid releases")
	released, err = s.Release(ctx(t), kind, "o", "p1", false)
	require.NoError(t, err)
	require.True(t, released)
	rec, err := s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, Missing, rec.Status)
	require.EqualValues(t, 1, rec.Generation)
	require.EqualValues(t, 2, ready(t, s, "o", "p2"), "close → generation + 1")

	// An activation that owned nothing gives its generation back.
	_, err = s.Release(ctx(t), kind, "o", "p2", true)
	require.NoError(t, err)
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.EqualValues(t, 1, rec.Generation)
}

func TestMoveKeepsGenerationAndRollsBack(t *testing.T) {
	s := newStore(t)
	gen := ready(t, s, "o", "p1")
	_, err := s.BeginMove(ctx(t), kind, "o", "someone-else", "op1")
	require.ErrorIs(t, err, ErrNotOwner)
	g, err := s.BeginMove(ctx(t), kind, "o", "p1", "op1")
	require.NoError(t, err)
	require.Equal(t, gen, g)
	g, err = s.BeginMove(ctx(t), kind, "o", "p1", "op1")
	require.NoError(t, err, "repeating the same operation resumes it")
	require.Equal(t, gen, g)
	rec, err := s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, Moving, rec.Status)

	require.NoError(t, s.AbortMove(ctx(t), kind, "o", "op1"))
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, Ready, rec.Status)
	require.Equal(t, "p1", rec.PIDID, "rolled back to the source")

	_, err = s.BeginMove(ctx(t), kind, "o", "p1", "op2")
	require.NoError(t, err)
	require.ErrorIs(t, s.CommitMove(ctx(t), kind, "o", "wrong-op", Record{Owner: "m2", PIDID: "p2"}), ErrNotOwner)
	require.NoError(t, s.CommitMove(ctx(t), kind, "o", "op2", Record{Owner: "m2", PIDAddress: "b", PIDID: "p2"}))
	require.NoError(t, s.CommitMove(ctx(t), kind, "o", "op2", Record{Owner: "m2", PIDAddress: "b", PIDID: "p2"}), "a repeated commit is a no-op")
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, Record{Status: Ready, Owner: "m2", PIDAddress: "b", PIDID: "p2", Generation: gen}, rec)
}

func TestMemberNamesAndKeyspace(t *testing.T) {
	srv := redisserver.ForTest(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	s := NewStore(StoreConfig{Client: c})
	require.NoError(t, s.PutMemberName(ctx(t), "member-1", "workflow-a"))
	names, err := s.MemberNames(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"member-1": "workflow-a"}, names)
	ready(t, s, "ord-1", "p1")
	keys, err := c.Keys(ctx(t), "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "sm:loc:"), "key %s outside the Location Store prefix", k)
		if k != "sm:loc:members" && !strings.HasPrefix(k, "sm:loc:owned:") {
			require.Contains(t, k, "{ord-1}", "per-order keys carry the hash tag")
		}
	}
}

func TestInvalidIdentityAndUnreachableStore(t *testing.T) {
	s := newStore(t)
	_, err := s.Get(ctx(t), kind, "bad{id}")
	require.ErrorIs(t, err, ErrInvalidIdentity)
	srv := redisserver.ForTest(t)
	c := srv.Client()
	require.NoError(t, srv.Stop())
	_, err = NewStore(StoreConfig{Client: c}).Get(ctx(t), kind, "o")
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
	released, err := s.Release(ctx(t), kind, "probe-1", "p1", true)
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
	_, err = s.Release(ctx(t), kind, "o1", "p1", false)
	require.NoError(t, err)
	ok, gen, _, err = s.BeginCreate(ctx(t), kind, "o1", "tok2", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 2, gen)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok2", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p2", Generation: gen}))
	_, err = s.Release(ctx(t), kind, "o1", "p2", true)
	require.NoError(t, err)
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Record{Generation: 1}, rec)
}

// The creation lock can be extended only by its holder; a creator that
// asks a second member keeps others out meanwhile.
func TestExtendCreateOnlyByTheHolder(t *testing.T) {
	s := newStore(t)
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, s.ExtendCreate(ctx(t), kind, "o1", "other", time.Minute), ErrLockLost)
	require.NoError(t, s.ExtendCreate(ctx(t), kind, "o1", "tok", time.Minute))
	ttl, err := s.rdb.PTTL(ctx(t), s.lockKey(kind, "o1")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 30*time.Second)
	require.NoError(t, s.AbortCreate(ctx(t), kind, "o1", "tok"))
	require.ErrorIs(t, s.ExtendCreate(ctx(t), kind, "o1", "tok", time.Minute), ErrLockLost, "an expired or given-back lock is lost")
}

// ReleaseDead frees a record only while it names that pid at that member
// id: a record that moved on, or names the same pid id on another member
// (a restarted node), is left alone. Of many concurrent repairs exactly
// one releases.
func TestReleaseDeadMatchesMemberAndPid(t *testing.T) {
	s := newStore(t)
	ok, gen, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok", Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: gen}))

	released, err := s.ReleaseDead(ctx(t), kind, "o1", "m2", "p1")
	require.NoError(t, err)
	require.False(t, released, "another member id")
	released, err = s.ReleaseDead(ctx(t), kind, "o1", "m1", "p0")
	require.NoError(t, err)
	require.False(t, released, "another pid")

	var wg sync.WaitGroup
	var wins sync.Map
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.ReleaseDead(context.Background(), kind, "o1", "m1", "p1")
			if err == nil && ok {
				wins.Store(i, true)
			}
		}()
	}
	wg.Wait()
	n := 0
	wins.Range(func(any, any) bool { n++; return true })
	require.Equal(t, 1, n, "exactly one repair releases")
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Record{Generation: 1}, rec, "the generation is kept, so the next activation fences the old one")
}
