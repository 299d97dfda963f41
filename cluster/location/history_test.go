package location

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// history reads id's ownership history and checks each entry was written
// between before and now by the store's clock.
func history(t *testing.T, s *Store, id string, before time.Time) []OwnershipEvent {
	t.Helper()
	h, err := s.History(ctx(t), kind, id)
	require.NoError(t, err)
	for _, e := range h {
		require.GreaterOrEqual(t, e.AtUnixMs, before.UnixMilli(), "entry %+v", e)
		require.LessOrEqual(t, e.AtUnixMs, time.Now().UnixMilli(), "entry %+v", e)
	}
	t.Logf("history of %s: %+v", id, h)
	return h
}

// kinds strips the times, which the test cannot predict.
func kinds(h []OwnershipEvent) []OwnershipEvent {
	out := make([]OwnershipEvent, len(h))
	for i, e := range h {
		e.AtUnixMs = 0
		out[i] = e
	}
	return out
}

// Each ownership change is recorded in the same script as the change,
// with its kind, member and generation; a refused change records nothing.
func TestHistoryRecordsEveryOwnershipChange(t *testing.T) {
	s := newStore(t)
	start := time.Now()

	// activation, close, activation, idle, activation, relocation (a repeat
	// commit adds nothing), plain release, activation, repair, activation
	// of a probe that is discarded at generation 5 → given back.
	g := ready(t, s, "o1", "p1")
	ok, err := s.Release(WithReleaseReason(ctx(t), OwnershipClosed), kind, "o1", "p1", false)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Release(WithReleaseReason(ctx(t), OwnershipClosed), kind, "o1", "p1", false)
	require.NoError(t, err)
	require.False(t, ok, "a second release of the same pid changes nothing")
	require.Equal(t, g+1, ready(t, s, "o1", "p2"))
	_, err = s.Release(WithReleaseReason(ctx(t), OwnershipIdle), kind, "o1", "p2", false)
	require.NoError(t, err)
	require.Equal(t, g+2, ready(t, s, "o1", "p3"))
	_, err = s.BeginMove(ctx(t), kind, "o1", "p3", "op1")
	require.NoError(t, err)
	require.ErrorIs(t, s.CommitMove(ctx(t), kind, "o1", "wrong-op", Record{Owner: "m-t", PIDID: "pt"}), ErrNotOwner)
	target := Record{Owner: "m-t", PIDAddress: "b", PIDID: "pt"}
	require.NoError(t, s.CommitMove(ctx(t), kind, "o1", "op1", target))
	require.NoError(t, s.CommitMove(ctx(t), kind, "o1", "op1", target), "repeat")
	_, err = s.Release(ctx(t), kind, "o1", "pt", false)
	require.NoError(t, err)
	require.Equal(t, g+3, ready(t, s, "o1", "p4"))
	ok, err = s.ReleaseDead(ctx(t), kind, "o1", "m-someone-else", "p4")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.ReleaseDead(ctx(t), kind, "o1", "m-p4", "p4")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, g+4, ready(t, s, "o1", "p5"))
	_, err = s.Release(ctx(t), kind, "o1", "p5", true)
	require.NoError(t, err)

	want := []OwnershipEvent{
		{Kind: OwnershipActivated, Member: "m-p1", Generation: 1},
		{Kind: OwnershipClosed, Member: "m-p1", Generation: 1},
		{Kind: OwnershipActivated, Member: "m-p2", Generation: 2},
		{Kind: OwnershipIdle, Member: "m-p2", Generation: 2},
		{Kind: OwnershipActivated, Member: "m-p3", Generation: 3},
		{Kind: OwnershipMoved, Member: "m-t", Generation: 3},
		{Kind: OwnershipReleased, Member: "m-t", Generation: 3},
		{Kind: OwnershipActivated, Member: "m-p4", Generation: 4},
		{Kind: OwnershipReleasedDead, Member: "m-p4", Generation: 4},
		{Kind: OwnershipActivated, Member: "m-p5", Generation: 5},
		{Kind: OwnershipDiscarded, Member: "m-p5", Generation: 5},
	}
	require.Equal(t, want, kinds(history(t, s, "o1", start)))
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.EqualValues(t, 4, rec.Generation, "the discard gave generation 5 back")

	// The stored form is the documented one, member last.
	raw, err := s.rdb.LRange(ctx(t), s.prefix+kind+":{o1}:history", 0, 0).Result()
	require.NoError(t, err)
	require.Len(t, raw, 1)
	require.Regexp(t, `^activation\|1\|[0-9]{13}\|m-p1$`, raw[0])
}

// A takeover reset records the member taken over from and the raised
// generation; outcomes that change nothing record nothing.
func TestHistoryRecordsTakeover(t *testing.T) {
	s := newStore(t)
	start := time.Now()
	gen := ready(t, s, "o1", "p1")
	out, err := s.ResetTakenOver(ctx(t), kind, "o1", "m-other", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetOtherOwner, out)
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetDone, out)
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, ResetAlready, out)
	require.Equal(t, gen+2, ready(t, s, "o1", "p2"))

	require.Equal(t, []OwnershipEvent{
		{Kind: OwnershipActivated, Member: "m-p1", Generation: gen},
		{Kind: OwnershipTakenOver, Member: "m-p1", Generation: gen + 1},
		{Kind: OwnershipActivated, Member: "m-p2", Generation: gen + 2},
	}, kinds(history(t, s, "o1", start)))

	// Generations in the history only grow, discards aside.
	h := history(t, s, "o1", start)
	for i := 1; i < len(h); i++ {
		require.Greater(t, h[i].Generation, h[i-1].Generation)
	}
}

// A probe (continue or rebuild of an unknown id) activates, finds
// nothing and discards: no key of any kind is left, history included.
// An aborted creation writes no history at all.
func TestHistoryOfAProbeLeavesNoKey(t *testing.T) {
	s := newStore(t)
	for i := 0; i < 3; i++ {
		id := fmt.Sprint("probe-", i)
		gen := ready(t, s, id, "p")
		require.EqualValues(t, 1, gen)
		h, err := s.History(ctx(t), kind, id)
		require.NoError(t, err)
		require.Len(t, h, 1, "the activation is recorded while it lasts")
		ok, err := s.Release(ctx(t), kind, id, "p", true)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "probe-abort", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.AbortCreate(ctx(t), kind, "probe-abort", "tok"))

	keys, err := s.rdb.Keys(ctx(t), "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "probes leave no key")
	h, err := s.History(ctx(t), kind, "probe-0")
	require.NoError(t, err)
	require.Empty(t, h)
}

// The history keeps the newest HistoryCap entries and lives in the
// record's hash slot.
func TestHistoryIsCappedAndShareTheRecordSlot(t *testing.T) {
	s := newStore(t)
	start := time.Now()
	const rounds = HistoryCap/2 + 3 // two entries per round
	for i := 1; i <= rounds; i++ {
		pid := fmt.Sprint("p", i)
		require.EqualValues(t, i, ready(t, s, "o1", pid))
		_, err := s.Release(context.Background(), kind, "o1", pid, false)
		require.NoError(t, err)
	}
	h := history(t, s, "o1", start)
	require.Len(t, h, HistoryCap)
	require.Equal(t, OwnershipReleased, h[len(h)-1].Kind)
	require.EqualValues(t, rounds, h[len(h)-1].Generation, "the newest entry is kept")
	require.EqualValues(t, rounds-HistoryCap/2+1, h[0].Generation, "the oldest entries were dropped")

	// Redis Cluster hashes only the first {...} of a key: both must name o1.
	tag := func(k string) string {
		i := strings.IndexByte(k, '{')
		j := strings.IndexByte(k[i+1:], '}')
		return k[i+1 : i+1+j]
	}
	require.Equal(t, "o1", tag(s.historyKey(kind, "o1")))
	require.Equal(t, tag(s.recKey(kind, "o1")), tag(s.historyKey(kind, "o1")))
}

func TestParseOwnershipEvent(t *testing.T) {
	e, err := ParseOwnershipEvent("takeover|7|1700000000000|m|with|bars")
	require.NoError(t, err)
	require.Equal(t, OwnershipEvent{Kind: OwnershipTakenOver, Generation: 7, AtUnixMs: 1_700_000_000_000, Member: "m|with|bars"}, e)
	for _, bad := range []string{"", "activation|1|2", "activation|x|2|m", "activation|1|y|m", "|1|2|m"} {
		_, err := ParseOwnershipEvent(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = newStore(t).History(ctx(t), kind, "a{b}")
	require.ErrorIs(t, err, ErrInvalidIdentity)
}
