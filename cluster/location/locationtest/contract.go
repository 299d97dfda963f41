// Package locationtest is the behavioural contract of location.Store,
// runnable against any implementation: generations and the creation
// lock, release and repair, planned moves, member names and gone records,
// the ownership history, the takeover index and reset, and the mark a
// reset leaves for the next activation.
//
// It depends only on location, the standard library and testify; an
// implementation's own tests supply the store.
package locationtest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// kind is the grain kind the contract stores identities under.
const kind = "shoppingmall.order-workflow"

// RunContract runs the Store contract as subtests. newStore is called once
// per subtest and must return an empty store (or one whose keys no other
// subtest sees).
func RunContract(t *testing.T, newStore func(t *testing.T) location.Store) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s location.Store)
	}{
		{"MissingIdentityStartsAtGenerationOne", testMissingIdentityStartsAtGenerationOne},
		{"ConcurrentBeginCreateHasOneWinner", testConcurrentBeginCreateHasOneWinner},
		{"CommitWithLostLockFails", testCommitWithLostLockFails},
		{"AbortCreateUsesNoGeneration", testAbortCreateUsesNoGeneration},
		{"RaiseCreatingMovesTheNextGenerationUp", testRaiseCreating},
		{"ReleaseKeepsGenerationAndDiscardGivesItBack", testReleaseKeepsGenerationAndDiscardGivesItBack},
		{"MoveKeepsGenerationAndRollsBack", testMoveKeepsGenerationAndRollsBack},
		{"ExtendCreateOnlyByTheHolder", testExtendCreateOnlyByTheHolder},
		{"ReleaseDeadMatchesMemberAndPid", testReleaseDeadMatchesMemberAndPid},
		{"MarkGoneFirstRecordWins", testMarkGoneFirstRecordWins},
		{"MarkGoneRefusesEmptyMember", testMarkGoneRefusesEmptyMember},
		{"HistoryRecordsEveryOwnershipChange", testHistoryRecordsEveryOwnershipChange},
		{"HistoryRecordsTakeover", testHistoryRecordsTakeover},
		{"HistoryOfAProbeLeavesNothing", testHistoryOfAProbeLeavesNothing},
		{"HistoryIsCapped", testHistoryIsCapped},
		{"OwnedIndexFollowsTheRecord", testOwnedIndexFollowsTheRecord},
		{"ResetTakenOver", testResetTakenOver},
		{"TakeoverMarkLastsUntilTheNextCommit", testTakeoverMarkLastsUntilTheNextCommit},
		{"ScanRecordsSeesEveryRecordOfTheKind", testScanRecordsSeesEveryRecordOfTheKind},
		{"MemberNames", testMemberNames},
		{"MemberSchemas", testMemberSchemas},
		{"SchemaLevelOnlyRises", testSchemaLevelOnlyRises},
		{"ConcurrentRaisesKeepOne", testConcurrentRaisesKeepOne},
		{"InvalidIdentity", testInvalidIdentity},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// ready cold-activates id at member "m-"+pid with pid pid and returns
// its generation.
func ready(t *testing.T, s location.Store, id, pid string) int64 {
	t.Helper()
	ok, next, _, err := s.BeginCreate(ctx(t), kind, id, "tok-"+pid, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, id, "tok-"+pid, location.Record{Owner: "m-" + pid, PIDAddress: "a", PIDID: pid, Generation: next}))
	return next
}

func owned(t *testing.T, s location.Store, member string) []string {
	t.Helper()
	ids, err := s.Owned(ctx(t), member, kind)
	require.NoError(t, err)
	sort.Strings(ids)
	return ids
}

// history reads id's ownership history and checks each entry was written
// between before and now by the store's clock.
func history(t *testing.T, s location.Store, id string, before time.Time) []location.OwnershipEvent {
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
func kinds(h []location.OwnershipEvent) []location.OwnershipEvent {
	out := make([]location.OwnershipEvent, len(h))
	for i, e := range h {
		e.AtUnixMs = 0
		out[i] = e
	}
	return out
}

func testMissingIdentityStartsAtGenerationOne(t *testing.T, s location.Store) {
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, location.Missing, rec.Status)
	ok, next, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, next)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok", location.Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: next}))
	rec, err = s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, location.Record{Status: location.Ready, Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: 1}, rec)
	ok, _, got, err := s.BeginCreate(ctx(t), kind, "o1", "tok2", time.Second)
	require.NoError(t, err)
	require.False(t, ok, "a Ready identity is never created again")
	require.Equal(t, rec, got, "BeginCreate answers the Ready record in the same round trip")
}

// Of many concurrent creators exactly one takes the lock.
func testConcurrentBeginCreateHasOneWinner(t *testing.T, s location.Store) {
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
			} else if rec.Status != location.Creating {
				t.Errorf("loser saw %q", rec.Status)
			}
		}(i)
	}
	wg.Wait()
	require.Equal(t, 1, winners)
}

func testCommitWithLostLockFails(t *testing.T, s location.Store) {
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o", "tok", 20*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	// The lock expires; a second creator takes over.
	require.Eventually(t, func() bool {
		ok, _, _, err := s.BeginCreate(context.Background(), kind, "o", "tok2", time.Second)
		return err == nil && ok
	}, 5*time.Second, 10*time.Millisecond)
	err = s.CommitReady(ctx(t), kind, "o", "tok", location.Record{Owner: "m", PIDID: "p", Generation: 1})
	require.ErrorIs(t, err, location.ErrLockLost)
}

func testAbortCreateUsesNoGeneration(t *testing.T, s location.Store) {
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

// A creator that finds the state fenced above its generation raises the
// record under its lock: committed, the record names the generation
// above; aborted, the next creation starts above it. Without the lock
// nothing changes, and a raise never lowers.
func testRaiseCreating(t *testing.T, s location.Store) {
	ok, next, _, err := s.BeginCreate(ctx(t), kind, "o", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, next)
	require.ErrorIs(t, s.RaiseCreating(ctx(t), kind, "o", "not-the-lock", 7), location.ErrLockLost)
	require.NoError(t, s.RaiseCreating(ctx(t), kind, "o", "tok", 5))
	require.NoError(t, s.RaiseCreating(ctx(t), kind, "o", "tok", 3), "a lower raise is no error")
	require.NoError(t, s.AbortCreate(ctx(t), kind, "o", "tok"))
	ok, next, _, err = s.BeginCreate(ctx(t), kind, "o", "tok2", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 6, next, "the aborted creation left the raised generation")
	require.NoError(t, s.RaiseCreating(ctx(t), kind, "o", "tok2", 8))
	require.NoError(t, s.CommitReady(ctx(t), kind, "o", "tok2", location.Record{Owner: "m", PIDID: "p", Generation: 9}))
	rec, err := s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.EqualValues(t, 9, rec.Generation)
	require.ErrorIs(t, s.RaiseCreating(ctx(t), kind, "o", "tok2", 12), location.ErrLockLost, "a committed creation holds no lock")
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.EqualValues(t, 9, rec.Generation)
}

func testReleaseKeepsGenerationAndDiscardGivesItBack(t *testing.T, s location.Store) {
	require.EqualValues(t, 1, ready(t, s, "o", "p1"))
	released, err := s.Release(ctx(t), kind, "o", "not-the-owner", location.KeepGeneration)
	require.NoError(t, err)
	require.False(t, released, "only the owner pid releases")
	released, err = s.Release(ctx(t), kind, "o", "p1", location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	rec, err := s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, location.Missing, rec.Status)
	require.EqualValues(t, 1, rec.Generation)
	require.EqualValues(t, 2, ready(t, s, "o", "p2"), "close → generation + 1")

	// An activation that owned nothing gives its generation back.
	_, err = s.Release(ctx(t), kind, "o", "p2", location.GiveBackGeneration)
	require.NoError(t, err)
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.EqualValues(t, 1, rec.Generation)
}

func testMoveKeepsGenerationAndRollsBack(t *testing.T, s location.Store) {
	gen := ready(t, s, "o", "p1")
	_, err := s.BeginMove(ctx(t), kind, "o", "someone-else", "op1")
	require.ErrorIs(t, err, location.ErrNotOwner)
	g, err := s.BeginMove(ctx(t), kind, "o", "p1", "op1")
	require.NoError(t, err)
	require.Equal(t, gen, g)
	g, err = s.BeginMove(ctx(t), kind, "o", "p1", "op1")
	require.NoError(t, err, "repeating the same operation resumes it")
	require.Equal(t, gen, g)
	rec, err := s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, location.Moving, rec.Status)

	require.NoError(t, s.AbortMove(ctx(t), kind, "o", "op1"))
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, "p1", rec.PIDID, "rolled back to the source")

	_, err = s.BeginMove(ctx(t), kind, "o", "p1", "op2")
	require.NoError(t, err)
	require.ErrorIs(t, s.CommitMove(ctx(t), kind, "o", "wrong-op", location.Record{Owner: "m2", PIDID: "p2"}), location.ErrNotOwner)
	require.NoError(t, s.CommitMove(ctx(t), kind, "o", "op2", location.Record{Owner: "m2", PIDAddress: "b", PIDID: "p2"}))
	require.NoError(t, s.CommitMove(ctx(t), kind, "o", "op2", location.Record{Owner: "m2", PIDAddress: "b", PIDID: "p2"}), "a repeated commit is a no-op")
	rec, err = s.Get(ctx(t), kind, "o")
	require.NoError(t, err)
	require.Equal(t, location.Record{Status: location.Ready, Owner: "m2", PIDAddress: "b", PIDID: "p2", Generation: gen}, rec)
}

// The creation lock can be extended only by its holder; a creator that
// asks a second member keeps others out meanwhile.
func testExtendCreateOnlyByTheHolder(t *testing.T, s location.Store) {
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, s.ExtendCreate(ctx(t), kind, "o1", "other", time.Minute), location.ErrLockLost)
	require.NoError(t, s.ExtendCreate(ctx(t), kind, "o1", "tok", time.Minute))
	// The lock outlives its first ttl: nobody else takes it meanwhile.
	require.Never(t, func() bool {
		ok, _, _, err := s.BeginCreate(context.Background(), kind, "o1", "other", time.Second)
		return err != nil || ok
	}, 400*time.Millisecond, 50*time.Millisecond, "an extended lock was taken by another caller")
	require.NoError(t, s.AbortCreate(ctx(t), kind, "o1", "tok"))
	require.ErrorIs(t, s.ExtendCreate(ctx(t), kind, "o1", "tok", time.Minute), location.ErrLockLost, "an expired or given-back lock is lost")
}

// ReleaseDead frees a record only while it names that pid at that member
// id: a record that moved on, or names the same pid id on another member
// (a restarted node), is left alone. Of many concurrent repairs exactly
// one releases.
func testReleaseDeadMatchesMemberAndPid(t *testing.T, s location.Store) {
	ok, gen, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok", location.Record{Owner: "m1", PIDAddress: "a:1", PIDID: "p1", Generation: gen}))

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
	require.Equal(t, location.Record{Generation: 1}, rec, "the generation is kept, so the next activation fences the old one")
}

// Of many members recording the same departure at once exactly one
// wins, and its record is the one every later read returns.
func testMarkGoneFirstRecordWins(t *testing.T, s location.Store) {
	const racers = 64
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []int
	)
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			won, err := s.MarkGone(context.Background(), "member-x", fmt.Sprintf("node-%d", i), int64(1000+i))
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, winners, 1, "exactly one recorder wins")
	w := winners[0]
	want := location.GoneMember{MemberID: "member-x", Node: fmt.Sprintf("node-%d", w), LeftAtUnixMs: int64(1000 + w)}

	g, ok, err := s.IsGone(ctx(t), "member-x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, want, g, "the winner's record, not the last writer's")

	won, err := s.MarkGone(ctx(t), "member-x", "late", 99)
	require.NoError(t, err)
	require.False(t, won, "a later record never replaces the first")
	all, err := s.Gone(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]location.GoneMember{"member-x": want}, all)

	_, ok, err = s.IsGone(ctx(t), "member-y")
	require.NoError(t, err)
	require.False(t, ok)
	n, err := s.GoneVersion(ctx(t))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one record written, one step of the version")
}

func testMarkGoneRefusesEmptyMember(t *testing.T, s location.Store) {
	_, err := s.MarkGone(ctx(t), "", "workflow-a", 1)
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
}

// Each ownership change is recorded in the same script as the change,
// with its kind, member and generation; a refused change records nothing.
func testHistoryRecordsEveryOwnershipChange(t *testing.T, s location.Store) {
	start := time.Now()

	// activation, close, activation, idle, activation, relocation (a repeat
	// commit adds nothing), plain release, activation, repair, activation
	// of a probe that is discarded at generation 5 → given back.
	g := ready(t, s, "o1", "p1")
	ok, err := s.Release(location.WithReleaseReason(ctx(t), location.OwnershipClosed), kind, "o1", "p1", location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Release(location.WithReleaseReason(ctx(t), location.OwnershipClosed), kind, "o1", "p1", location.KeepGeneration)
	require.NoError(t, err)
	require.False(t, ok, "a second release of the same pid changes nothing")
	require.Equal(t, g+1, ready(t, s, "o1", "p2"))
	_, err = s.Release(location.WithReleaseReason(ctx(t), location.OwnershipIdle), kind, "o1", "p2", location.KeepGeneration)
	require.NoError(t, err)
	require.Equal(t, g+2, ready(t, s, "o1", "p3"))
	_, err = s.BeginMove(ctx(t), kind, "o1", "p3", "op1")
	require.NoError(t, err)
	require.ErrorIs(t, s.CommitMove(ctx(t), kind, "o1", "wrong-op", location.Record{Owner: "m-t", PIDID: "pt"}), location.ErrNotOwner)
	target := location.Record{Owner: "m-t", PIDAddress: "b", PIDID: "pt"}
	require.NoError(t, s.CommitMove(ctx(t), kind, "o1", "op1", target))
	require.NoError(t, s.CommitMove(ctx(t), kind, "o1", "op1", target), "repeat")
	_, err = s.Release(ctx(t), kind, "o1", "pt", location.KeepGeneration)
	require.NoError(t, err)
	require.Equal(t, g+3, ready(t, s, "o1", "p4"))
	ok, err = s.ReleaseDead(ctx(t), kind, "o1", "m-someone-else", "p4")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.ReleaseDead(ctx(t), kind, "o1", "m-p4", "p4")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, g+4, ready(t, s, "o1", "p5"))
	_, err = s.Release(ctx(t), kind, "o1", "p5", location.GiveBackGeneration)
	require.NoError(t, err)

	want := []location.OwnershipEvent{
		{Kind: location.OwnershipActivated, Member: "m-p1", Generation: 1},
		{Kind: location.OwnershipClosed, Member: "m-p1", Generation: 1},
		{Kind: location.OwnershipActivated, Member: "m-p2", Generation: 2},
		{Kind: location.OwnershipIdle, Member: "m-p2", Generation: 2},
		{Kind: location.OwnershipActivated, Member: "m-p3", Generation: 3},
		{Kind: location.OwnershipMoved, Member: "m-t", Generation: 3},
		{Kind: location.OwnershipReleased, Member: "m-t", Generation: 3},
		{Kind: location.OwnershipActivated, Member: "m-p4", Generation: 4},
		{Kind: location.OwnershipReleasedDead, Member: "m-p4", Generation: 4},
		{Kind: location.OwnershipActivated, Member: "m-p5", Generation: 5},
		{Kind: location.OwnershipDiscarded, Member: "m-p5", Generation: 5},
	}
	require.Equal(t, want, kinds(history(t, s, "o1", start)))
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.EqualValues(t, 4, rec.Generation, "the discard gave generation 5 back")
}

// A takeover reset records the member taken over from and the raised
// generation; outcomes that change nothing record nothing.
func testHistoryRecordsTakeover(t *testing.T, s location.Store) {
	start := time.Now()
	gen := ready(t, s, "o1", "p1")
	out, err := s.ResetTakenOver(ctx(t), kind, "o1", "m-other", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetOtherOwner, out)
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetDone, out)
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetAlready, out)
	require.Equal(t, gen+2, ready(t, s, "o1", "p2"))

	require.Equal(t, []location.OwnershipEvent{
		{Kind: location.OwnershipActivated, Member: "m-p1", Generation: gen},
		{Kind: location.OwnershipTakenOver, Member: "m-p1", Generation: gen + 1},
		{Kind: location.OwnershipActivated, Member: "m-p2", Generation: gen + 2},
	}, kinds(history(t, s, "o1", start)))

	// Generations in the history only grow, discards aside.
	h := history(t, s, "o1", start)
	for i := 1; i < len(h); i++ {
		require.Greater(t, h[i].Generation, h[i-1].Generation)
	}
}

// A probe (continue or rebuild of an unknown id) activates, finds
// nothing and discards: neither record nor history is left. An aborted
// creation writes no history at all.
func testHistoryOfAProbeLeavesNothing(t *testing.T, s location.Store) {
	for i := 0; i < 3; i++ {
		id := fmt.Sprint("probe-", i)
		gen := ready(t, s, id, "p")
		require.EqualValues(t, 1, gen)
		h, err := s.History(ctx(t), kind, id)
		require.NoError(t, err)
		require.Len(t, h, 1, "the activation is recorded while it lasts")
		ok, err := s.Release(ctx(t), kind, id, "p", location.GiveBackGeneration)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "probe-abort", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.AbortCreate(ctx(t), kind, "probe-abort", "tok"))

	for _, id := range []string{"probe-0", "probe-1", "probe-2", "probe-abort"} {
		h, err := s.History(ctx(t), kind, id)
		require.NoError(t, err)
		require.Empty(t, h, "%s left history behind", id)
		rec, err := s.Get(ctx(t), kind, id)
		require.NoError(t, err)
		require.Equal(t, location.Record{}, rec, "%s left a record behind", id)
	}
}

// The history keeps the newest HistoryCap entries.
func testHistoryIsCapped(t *testing.T, s location.Store) {
	start := time.Now()
	const rounds = location.HistoryCap/2 + 3 // two entries per round
	for i := 1; i <= rounds; i++ {
		pid := fmt.Sprint("p", i)
		require.EqualValues(t, i, ready(t, s, "o1", pid))
		_, err := s.Release(context.Background(), kind, "o1", pid, location.KeepGeneration)
		require.NoError(t, err)
	}
	h := history(t, s, "o1", start)
	require.Len(t, h, location.HistoryCap)
	require.Equal(t, location.OwnershipReleased, h[len(h)-1].Kind)
	require.EqualValues(t, rounds, h[len(h)-1].Generation, "the newest entry is kept")
	require.EqualValues(t, rounds-location.HistoryCap/2+1, h[0].Generation, "the oldest entries were dropped")
}

// The per-member index follows the record: an entry with every commit
// that makes a member the owner, none once the record stops naming it.
func testOwnedIndexFollowsTheRecord(t *testing.T, s location.Store) {
	ready(t, s, "o1", "p1") // owner m-p1
	ready(t, s, "o2", "p2") // owner m-p2
	require.Equal(t, []string{"o1"}, owned(t, s, "m-p1"))
	require.Equal(t, []string{"o2"}, owned(t, s, "m-p2"))

	// A relocation moves the entry to the target.
	_, err := s.BeginMove(ctx(t), kind, "o1", "p1", "op1")
	require.NoError(t, err)
	require.NoError(t, s.CommitMove(ctx(t), kind, "o1", "op1", location.Record{Owner: "m-p2", PIDAddress: "b", PIDID: "p3"}))
	require.Empty(t, owned(t, s, "m-p1"))
	require.Equal(t, []string{"o1", "o2"}, owned(t, s, "m-p2"))

	// Release and the repair of a dead pid drop it.
	released, err := s.Release(ctx(t), kind, "o1", "p3", location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	released, err = s.ReleaseDead(ctx(t), kind, "o2", "m-p2", "p2")
	require.NoError(t, err)
	require.True(t, released)
	require.Empty(t, owned(t, s, "m-p2"))

	// An index entry is written even when the commit then fails: the index
	// may list too much, never too little.
	ok, _, _, err := s.BeginCreate(ctx(t), kind, "o3", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, s.CommitReady(ctx(t), kind, "o3", "not-the-token", location.Record{Owner: "m-x", PIDID: "px", Generation: 1}), location.ErrLockLost)
	require.Equal(t, []string{"o3"}, owned(t, s, "m-x"), "a stale entry, which a takeover checks against the record")
	require.NoError(t, s.Unindex(ctx(t), "m-x", kind, "o3"))
	require.Empty(t, owned(t, s, "m-x"))
	_, err = s.Owned(ctx(t), "", kind)
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
}

func testResetTakenOver(t *testing.T, s location.Store) {
	gen := ready(t, s, "o1", "p1")

	out, err := s.ResetTakenOver(ctx(t), kind, "o1", "m-other", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetOtherOwner, out, "a record naming another owner is left alone")
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen-1, gen)
	require.NoError(t, err)
	require.Equal(t, location.ResetAlready, out, "an older takeover finds the record past it")

	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetDone, out)
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, location.Record{Generation: gen + 1, TakenOver: true}, rec, "Missing at generation+1, marked taken over")
	require.Empty(t, owned(t, s, "m-p1"))

	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetAlready, out, "a repeat changes nothing")

	// The next command activates above the retired generation.
	ok, next, _, err := s.BeginCreate(ctx(t), kind, "o1", "tok", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, gen+2, next)
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetAlready, out, "a late repeat never touches the new activation")

	// A Moving record whose source is lost is reset too, operation and all.
	g2 := ready(t, s, "o2", "p2")
	_, err = s.BeginMove(ctx(t), kind, "o2", "p2", "op-x")
	require.NoError(t, err)
	out, err = s.ResetTakenOver(ctx(t), kind, "o2", "m-p2", g2, g2+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetDone, out)
	rec, err = s.Get(ctx(t), kind, "o2")
	require.NoError(t, err)
	require.Equal(t, location.Record{Generation: g2 + 1, TakenOver: true}, rec)
	require.ErrorIs(t, s.CommitMove(ctx(t), kind, "o2", "op-x", location.Record{Owner: "m-y", PIDID: "py"}), location.ErrNotOwner,
		"the interrupted move can no longer commit")

	// An owner that let go by itself (a fenced grain releases) leaves a
	// Missing record at the old generation: it moves to the new one.
	g3 := ready(t, s, "o3", "p3")
	_, err = s.Release(ctx(t), kind, "o3", "p3", location.KeepGeneration)
	require.NoError(t, err)
	out, err = s.ResetTakenOver(ctx(t), kind, "o3", "m-p3", g3, g3+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetDone, out)
	rec, err = s.Get(ctx(t), kind, "o3")
	require.NoError(t, err)
	require.Equal(t, g3+1, rec.Generation)
	require.True(t, rec.TakenOver)

	// A creator already at work on the next generation is left alone.
	g4 := ready(t, s, "o4", "p4")
	_, err = s.Release(ctx(t), kind, "o4", "p4", location.KeepGeneration)
	require.NoError(t, err)
	ok, _, _, err = s.BeginCreate(ctx(t), kind, "o4", "tok4", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	out, err = s.ResetTakenOver(ctx(t), kind, "o4", "m-p4", g4, g4+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetReleased, out)
	rec, err = s.Get(ctx(t), kind, "o4")
	require.NoError(t, err)
	require.False(t, rec.TakenOver, "a reset that changed nothing marks nothing")

	_, err = s.ResetTakenOver(ctx(t), kind, "o5", "", 1, 2)
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
	_, err = s.ResetTakenOver(ctx(t), kind, "o{5}", "m", 1, 2)
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
}

// The mark a takeover leaves tells the next activation its cause: every
// creator sees it until one commits Ready, which clears it. Only a reset
// sets it.
func testTakeoverMarkLastsUntilTheNextCommit(t *testing.T, s location.Store) {
	gen := ready(t, s, "o1", "p1")
	rec, err := s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.False(t, rec.TakenOver, "a cold activation carries no mark")
	ok, _, created, err := s.BeginCreate(ctx(t), kind, "fresh", "tok-fresh", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, created.TakenOver, "a never-seen identity is not taken over")

	out, err := s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetDone, out)

	// A creator that gives up leaves the mark for the next one.
	ok, next, created, err := s.BeginCreate(ctx(t), kind, "o1", "tok-a", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, gen+2, next)
	require.Equal(t, location.Record{Status: location.Creating, TakenOver: true}, created, "the creator learns the cause")
	rec, err = s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.True(t, rec.TakenOver, "still marked while Creating")
	require.NoError(t, s.AbortCreate(ctx(t), kind, "o1", "tok-a"))
	rec, err = s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, location.Record{Generation: gen + 1, TakenOver: true}, rec, "an aborted creation keeps the mark")

	// The commit of the next activation consumes it.
	ok, next, created, err = s.BeginCreate(ctx(t), kind, "o1", "tok-b", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, created.TakenOver)
	require.NoError(t, s.CommitReady(ctx(t), kind, "o1", "tok-b", location.Record{Owner: "m-p2", PIDAddress: "b", PIDID: "p2", Generation: next}))
	rec, err = s.Get(ctx(t), kind, "o1")
	require.NoError(t, err)
	require.Equal(t, location.Record{Status: location.Ready, Owner: "m-p2", PIDAddress: "b", PIDID: "p2", Generation: gen + 2}, rec, "committed Ready, mark cleared")

	// A late repeat of the reset neither resets nor marks the new owner's
	// record, and a plain release is no takeover.
	out, err = s.ResetTakenOver(ctx(t), kind, "o1", "m-p1", gen, gen+1)
	require.NoError(t, err)
	require.Equal(t, location.ResetAlready, out)
	released, err := s.Release(ctx(t), kind, "o1", "p2", location.KeepGeneration)
	require.NoError(t, err)
	require.True(t, released)
	ok, _, created, err = s.BeginCreate(ctx(t), kind, "o1", "tok-c", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, created.TakenOver, "the next activation after a release is cold")
}

func testScanRecordsSeesEveryRecordOfTheKind(t *testing.T, s location.Store) {
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
	ok, _, _, err := s.BeginCreate(ctx(t), "other.kind", "o1", "t", time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.PutMember(ctx(t), "m-p0", "workflow-a", 0))

	got := map[string]string{}
	require.NoError(t, s.ScanRecords(ctx(t), kind, func(id string, rec location.Record) error {
		_, dup := got[id]
		require.False(t, dup, "%s seen twice", id)
		got[id] = rec.Owner
		return nil
	}))
	require.Equal(t, want, got)

	stop := errors.New("stop")
	n := 0
	err = s.ScanRecords(ctx(t), kind, func(string, location.Record) error { n++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)

	c, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, s.ScanRecords(c, kind, func(string, location.Record) error { return nil }))
}

// Member names are published per member id; an unknown member has none.
func testMemberNames(t *testing.T, s location.Store) {
	require.NoError(t, s.PutMember(ctx(t), "member-1", "workflow-a", 0))
	names, err := s.MemberNames(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"member-1": "workflow-a"}, names)
	n, err := s.MemberName(ctx(t), "member-1")
	require.NoError(t, err)
	require.Equal(t, "workflow-a", n)
	n, err = s.MemberName(ctx(t), "member-2")
	require.NoError(t, err)
	require.Empty(t, n)
}

// A member advertises the schema it reads with its name; a member that
// hosts no orders (schema 0) advertises none, and a new incarnation's
// put replaces the old one's.
func testMemberSchemas(t *testing.T, s location.Store) {
	require.NoError(t, s.PutMember(ctx(t), "m-wf", "workflow-a", 2))
	require.NoError(t, s.PutMember(ctx(t), "m-api", "api-a", 0))
	require.NoError(t, s.PutMember(ctx(t), "m-old", "workflow-b", 1))
	schemas, err := s.MemberSchemas(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"m-wf": 2, "m-old": 1}, schemas)
	names, err := s.MemberNames(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"m-wf": "workflow-a", "m-api": "api-a", "m-old": "workflow-b"}, names)

	require.NoError(t, s.PutMember(ctx(t), "m-wf", "workflow-a", 0))
	schemas, err = s.MemberSchemas(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"m-old": 1}, schemas)

	require.ErrorIs(t, s.PutMember(ctx(t), "m-x", "workflow-x", -1), location.ErrInvalidSchema)
	require.ErrorIs(t, s.PutMember(ctx(t), "", "workflow-x", 1), location.ErrInvalidIdentity)
}

// The level starts at the base schema, rises with who and when, repeats
// harmlessly, and never drops; every change is in its history.
func testSchemaLevelOnlyRises(t *testing.T, s location.Store) {
	l, err := s.SchemaLevel(ctx(t))
	require.NoError(t, err)
	require.Equal(t, location.SchemaLevel{Level: location.BaseSchema}, l)
	h, err := s.SchemaLevelHistory(ctx(t))
	require.NoError(t, err)
	require.Empty(t, h)

	l, raised, err := s.RaiseSchemaLevel(ctx(t), location.SchemaLevel{Level: 1, RaisedBy: "ops", RaisedAtUnixMs: 5})
	require.NoError(t, err)
	require.False(t, raised, "raising to the base level changes nothing")
	require.Equal(t, location.SchemaLevel{Level: 1}, l)

	up := location.SchemaLevel{Level: 3, RaisedBy: "alice", RaisedAtUnixMs: 1_700_000_000_000}
	l, raised, err = s.RaiseSchemaLevel(ctx(t), up)
	require.NoError(t, err)
	require.True(t, raised)
	up.From = 1
	require.Equal(t, up, l)

	again, raised, err := s.RaiseSchemaLevel(ctx(t), location.SchemaLevel{Level: 3, RaisedBy: "bob", RaisedAtUnixMs: 1_700_000_000_100})
	require.NoError(t, err)
	require.False(t, raised)
	require.Equal(t, up, again, "a repeated raise keeps the first record")

	cur, raised, err := s.RaiseSchemaLevel(ctx(t), location.SchemaLevel{Level: 2, RaisedBy: "bob"})
	require.ErrorIs(t, err, location.ErrSchemaLevelLower)
	require.False(t, raised)
	require.Equal(t, up, cur)
	_, _, err = s.RaiseSchemaLevel(ctx(t), location.SchemaLevel{Level: 0})
	require.ErrorIs(t, err, location.ErrInvalidSchema)

	auto := location.SchemaLevel{Level: 4, RaisedBy: "workflow-b", RaisedAtUnixMs: 1_700_000_000_200, Auto: true}
	_, raised, err = s.RaiseSchemaLevel(ctx(t), auto)
	require.NoError(t, err)
	require.True(t, raised)
	auto.From = 3

	l, err = s.SchemaLevel(ctx(t))
	require.NoError(t, err)
	require.Equal(t, auto, l)
	h, err = s.SchemaLevelHistory(ctx(t))
	require.NoError(t, err)
	require.Equal(t, []location.SchemaLevel{auto, up}, h)
}

// Many raisers at once (every member with auto-raise, an operator): the
// level ends at the highest asked, each level is recorded once, and the
// history never goes down.
func testConcurrentRaisesKeepOne(t *testing.T, s location.Store) {
	const raisers = 24
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[int]int{}
	for i := range raisers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := 2 + i%3
			_, raised, err := s.RaiseSchemaLevel(ctx(t), location.SchemaLevel{Level: to, RaisedBy: fmt.Sprintf("r%d", i)})
			if err != nil && !errors.Is(err, location.ErrSchemaLevelLower) {
				t.Errorf("raise to %d: %v", to, err)
			}
			if raised {
				mu.Lock()
				won[to]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l, err := s.SchemaLevel(ctx(t))
	require.NoError(t, err)
	require.Equal(t, 4, l.Level)
	for to, n := range won {
		require.Equal(t, 1, n, "level %d recorded %d times", to, n)
	}
	h, err := s.SchemaLevelHistory(ctx(t))
	require.NoError(t, err)
	require.Len(t, h, len(won))
	for i := 1; i < len(h); i++ {
		require.Greater(t, h[i-1].Level, h[i].Level, "history newest first, strictly rising")
		require.Equal(t, h[i].Level, h[i-1].From)
	}
}

// An identity with a brace would break the hash tag: it is refused
// before anything is read or written.
func testInvalidIdentity(t *testing.T, s location.Store) {
	_, err := s.Get(ctx(t), kind, "bad{id}")
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
	_, _, _, err = s.BeginCreate(ctx(t), kind, "", "tok", time.Second)
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
	_, err = s.History(ctx(t), kind, "a{b}")
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
	_, err = s.ReleaseDead(ctx(t), kind, "a}b", "m", "p")
	require.ErrorIs(t, err, location.ErrInvalidIdentity)
}
