package location

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func owned(t *testing.T, s *Store, member string) []string {
	t.Helper()
	ids, err := s.Owned(ctx(t), member, kind)
	require.NoError(t, err)
	sort.Strings(ids)
	return ids
}

// The per-member index follows the record: an entry with every commit
// that makes a member the owner, none once the record stops naming it.
func TestOwnedIndexFollowsTheRecord(t *testing.T) {
	s := newStore(t)
	ready(t, s, "o1", "p1") // owner m-p1
	ready(t, s, "o2", "p2") // owner m-p2
	require.Equal(t, []string{"o1"}, owned(t, s, "m-p1"))
	require.Equal(t, []string{"o2"}, owned(t, s, "m-p2"))

	// A relocation moves the entry to the target.
	_, err := s.BeginMove(ctx(t), kind, "o1", "p1", "op1")
	require.NoError(t, err)
	require.NoError(t, s.CommitMove(ctx(t), kind, "o1", "op1", Record{Owner: "m-p2", PIDAddress: "b", PIDID: "p3"}))
	require.Empty(t, owned(t, s, "m-p1"))
	require.Equal(t, []string{"o1", "o2"}, owned(t, s, "m-p2"))

	// Release and the repair of a dead pid drop it.
	released, err := s.Release(ctx(t), kind, "o1", "p3", false)
	require.NoError(t, err)
	require.True(t, released)
	released, err = s.ReleaseDead(ctx(t), kind, "o2", "m-p2", "p2")
	require.NoError(t, err)
	require.True(t, released)
	require.Empty(t, owned(t, s, "m-p2"))
	keys, err := s.rdb.Keys(ctx(t), "sm:loc:owned:*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "an empty index leaves no key")

	// An index entry is written even when the commit then fails: the index
	// may list too much, never too little.
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o3", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, s.CommitReady(ctx(t), kind, "o3", "not-the-token", Record{Owner: "m-x", PIDID: "px", Generation: 1}), ErrLockLost)
	require.Equal(t, []string{"o3"}, owned(t, s, "m-x"), "a stale entry, which a takeover checks against the record")
	require.NoError(t, s.Unindex(ctx(t), "m-x", kind, "o3"))
	require.Empty(t, owned(t, s, "m-x"))
	_, err = s.Owned(ctx(t), "", kind)
	require.ErrorIs(t, err, ErrInvalidIdentity)
}

// The commit pipeline survives a script cache flush (a Redis restart).
func TestIndexedCommitAfterScriptFlush(t *testing.T) {
	s := newStore(t)
	require.NoError(t, s.rdb.ScriptFlush(ctx(t)).Err())
	ready(t, s, "o1", "p1")
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Ready, rec.Status)
	require.Equal(t, []string{"o1"}, owned(t, s, "m-p1"))
}

func TestResetTakenOver(t *testing.T) {
	s := newStore(t)
	gen := ready(t, s, "o1", "p1")

	out, err := s.ResetTakenOver(ctx(t), kind, "o1", "m-other", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetOtherOwner, out, "a record naming another owner is left alone")
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen-1, gen)
	require.NoError(t, err)
	require.Equal(t, ResetAlready, out, "an older takeover finds the record past it")

	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetDone, out)
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, Record{Generation: gen + 1}, rec, "Missing at generation+1")
	require.Empty(t, owned(t, s, "m-p1"))

	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetAlready, out, "a repeat changes nothing")

	// The next command activates above the retired generation.
	ok, next, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, gen+2, next)
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetAlready, out, "a late repeat never touches the new activation")

	// A Moving record whose source is lost is reset too, operation and all.
	g2 := ready(t, s, "o2", "p2")
	_, err = s.BeginMove(ctx(t), kind, "o2", "p2", "op-x")
	require.NoError(t, err)
	out, err = s.ResetTakenOver(ctx(t), kind, "o2", "m-p2", g2, g2+1)
	require.NoError(t, err)
	require.Equal(t, ResetDone, out)
	rec, err = s.Get(ctx(t), kind, "o2")
	require.NoError(t, err)
	require.Equal(t, Record{Generation: g2 + 1}, rec)
	require.ErrorIs(t, s.CommitMove(ctx(t), kind, "o2", "op-x", Record{Owner: "m-y", PIDID: "py"}), ErrNotOwner,
		"the interrupted move can no longer commit")

	// An owner that let go by itself (a fenced grain releases) leaves a
	// Missing record at the old generation: it moves to the new one.
	g3 := ready(t, s, "o3", "p3")
	_, err = s.Release(ctx(t), kind, "o3", "p3", false)
	require.NoError(t, err)
	out, err = s.ResetTakenOver(ctx(t), kind, "o3", "m-p3", g3, g3+1)
	require.NoError(t, err)
	require.Equal(t, ResetDone, out)
	rec, err = s.Get(ctx(t), kind, "o3")
	require.NoError(t, err)
	require.Equal(t, g3+1, rec.Generation)

	// A creator already at work on the next generation is left alone.
	g4 := ready(t, s, "o4", "p4")
	_, err = s.Release(ctx(t), kind, "o4", "p4", false)
	require.NoError(t, err)
	ok, _, _, err = s.BeginCreate(ctx(t), kind, "o4", "tok4", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	out, err = s.ResetTakenOver(ctx(t), kind, "o4", "m-p4", g4, g4+1)
	require.NoError(t, err)
	require.Equal(t, ResetReleased, out)

	_, err = s.ResetTakenOver(ctx(t), kind, "o5", "", 1, 2)
	require.ErrorIs(t, err, ErrInvalidIdentity)
	_, err = s.ResetTakenOver(ctx(t), kind, "o{5}", "m", 1, 2)
	require.ErrorIs(t, err, ErrInvalidIdentity)
}

func TestScanRecordsSeesEveryRecordOfTheKind(t *testing.T) {
	s := newStore(t)
	want := map[string]string{}
	for i := range 1200 {
		id := fmt.Sprintf("o%d", i)
		ready(t, s, id, fmt.Sprintf("p%d", i%3))
		want[id] = fmt.Sprintf("m-p%d", i%3)
	}
	// Not records: a creation lock, another kind, the member names.
	_, _, _, err := s.BeginCreate(ctx(t), kind, "locked", "tok", time.Minute)
	require.NoError(t, err)
	want["locked"] = ""
	ready2 := NewStore(StoreConfig{Client: s.rdb})
	ok, _, _, err := ready2.BeginCreate(ctx(t), "other.kind", "o1", "t", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.PutMemberName(ctx(t), "m-p0", "workflow-a"))

	got := map[string]string{}
	require.NoError(t, s.ScanRecords(ctx(t), kind, func(id string, rec Record) error {
		_, dup := got[id]
		require.False(t, dup, "%s seen twice", id)
		got[id] = rec.Owner
		return nil
	}))
	require.Equal(t, want, got)

	stop := errors.New("stop")
	n := 0
	err = s.ScanRecords(ctx(t), kind, func(string, Record) error { n++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)

	c, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, s.ScanRecords(c, kind, func(string, Record) error { return nil }))
}
