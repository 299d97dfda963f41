// Package eventstoretest is the behavioural contract of eventstore.Store,
// runnable against any implementation: ordering and envelope fidelity,
// expected-version checks, gapless versions, source-command dedupe and the
// owner fence, including concurrent writers and a takeover's raised fence;
// and the read contract every tier of the event store holds to, the hot
// stream and the archive alike (RunReadContract).
//
// It depends only on eventstore and the standard library; an
// implementation's own tests supply the store.
package eventstoretest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// RunContract runs the Store contract as subtests. newStore is called once
// per subtest; stores may share a backend as long as order ids used by
// different subtests do not collide (each subtest uses its own ids).
func RunContract(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s eventstore.Store)
	}{
		{"AppendAndLoadPreserveEnvelopes", testAppendAndLoad},
		{"LoadUnknownOrderIsEmpty", testLoadUnknown},
		{"VersionConflict", testVersionConflict},
		{"MultiEventAppendIsGapless", testGapless},
		{"DuplicateSourceCommand", testDuplicateCommand},
		{"CheckOrder", testCheckOrder},
		{"OpenUnknownOrderWritesNothing", testOpenUnknown},
		{"FirstAppendEstablishesFence", testFirstAppendFence},
		{"OpenRaisesFence", testOpenRaisesFence},
		{"StaleWriterIsFenced", testStaleWriter},
		{"ConcurrentWritersOneWinnerPerVersion", testRace},
		{"RaiseFenceRetiresOldWriter", testRaiseFence},
		{"RaiseFenceNeverLowersAndRepeats", testRaiseFenceRepeat},
		{"RaiseFenceBeforeTheFirstEvent", testRaiseFenceNoStream},
		{"LoadReturnsTheWritersFence", testWriterFence},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newStore(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// orderID is unique per subtest so stores sharing a backend stay apart.
func orderID(t *testing.T, suffix string) string {
	return fmt.Sprintf("order-%s-%s-%d", suffix, sanitize(t.Name()), time.Now().UnixNano())
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' {
			b[i] = '-'
		}
	}
	return string(b)
}

func event(orderID, eventID, eventType, cmd string, data string) eventstore.Envelope {
	return eventstore.Envelope{
		EventID:         eventID,
		OrderID:         orderID,
		EventType:       eventType,
		SourceCommandID: cmd,
		CreatedAtUnixMs: 1_700_000_000_000,
		Data:            []byte(data),
	}
}

func mustOpen(t *testing.T, s eventstore.Store, order string, gen int64) (eventstore.Fence, []eventstore.Envelope) {
	t.Helper()
	f, evs, err := s.Open(ctxT(t), order, gen)
	if err != nil {
		t.Fatalf("Open(%s, gen %d): %v", order, gen, err)
	}
	return f, evs
}

func mustAppend(t *testing.T, s eventstore.Store, order string, expected int64, f eventstore.Fence, evs ...eventstore.Envelope) int64 {
	t.Helper()
	v, err := s.Append(ctxT(t), order, expected, f, evs)
	if err != nil {
		t.Fatalf("Append(%s, expected %d, fence %+v): %v", order, expected, f, err)
	}
	if want := expected + int64(len(evs)); v != want {
		t.Fatalf("Append(%s, expected %d) returned version %d, want %d", order, expected, v, want)
	}
	return v
}

func mustLoad(t *testing.T, s eventstore.Store, order string) []eventstore.Envelope {
	t.Helper()
	evs, err := s.Load(ctxT(t), order)
	if err != nil {
		t.Fatalf("Load(%s): %v", order, err)
	}
	return evs
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
	t.Logf("%s: %v", what, err)
}

func wantLen(t *testing.T, s eventstore.Store, order string, n int) []eventstore.Envelope {
	t.Helper()
	evs := mustLoad(t, s, order)
	if len(evs) != n {
		t.Fatalf("Load(%s) has %d events, want %d", order, len(evs), n)
	}
	return evs
}

func wantVersions(t *testing.T, evs []eventstore.Envelope) {
	t.Helper()
	for i, e := range evs {
		if e.Version != int64(i+1) {
			t.Fatalf("event #%d (%s) has version %d, want %d", i+1, e.EventID, e.Version, i+1)
		}
	}
}

func sameEnvelope(a, b eventstore.Envelope) bool {
	return a.EventID == b.EventID && a.OrderID == b.OrderID && a.EventType == b.EventType &&
		a.Version == b.Version && a.SourceCommandID == b.SourceCommandID &&
		a.CreatedAtUnixMs == b.CreatedAtUnixMs && bytes.Equal(a.Data, b.Data)
}

func testAppendAndLoad(t *testing.T, s eventstore.Store) {
	o := orderID(t, "a")
	f, _ := mustOpen(t, s, o, 1)
	in := []eventstore.Envelope{
		{EventID: "e1", OrderID: o, EventType: "OrderStartedEvent", Version: 42, SourceCommandID: "cmd-1",
			CreatedAtUnixMs: 1_700_000_000_001, Data: []byte(`{"orderId":"` + o + `","amount":12900}`)},
		{EventID: "e2", OrderID: o, EventType: "InventoryReservedEvent", SourceCommandID: "",
			CreatedAtUnixMs: 1_700_000_000_002, Data: []byte("bin\x00\xff\n\"ä")},
		{EventID: "e3", OrderID: o, EventType: "PaymentAuthorizedEvent", SourceCommandID: "cmd-3",
			CreatedAtUnixMs: -5, Data: []byte{}},
	}
	mustAppend(t, s, o, 0, f, in[0])
	mustAppend(t, s, o, 1, f, in[1:]...)

	got := wantLen(t, s, o, 3)
	for i := range in {
		want := in[i]
		want.Version = int64(i + 1) // the given Version is ignored
		if !sameEnvelope(got[i], want) {
			t.Fatalf("event #%d = %+v, want %+v", i+1, got[i], want)
		}
	}

	// Open returns the same stream as Load.
	_, opened := mustOpen(t, s, o, 1)
	if len(opened) != len(got) {
		t.Fatalf("Open returned %d events, Load %d", len(opened), len(got))
	}
	for i := range got {
		if !sameEnvelope(opened[i], got[i]) {
			t.Fatalf("Open event #%d = %+v, Load = %+v", i+1, opened[i], got[i])
		}
	}
}

func testLoadUnknown(t *testing.T, s eventstore.Store) {
	evs := mustLoad(t, s, orderID(t, "none"))
	if len(evs) != 0 {
		t.Fatalf("Load(unknown) = %d events, want none", len(evs))
	}
}

func testVersionConflict(t *testing.T, s eventstore.Store) {
	o := orderID(t, "v")
	f, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f, event(o, "e1", "T", "", "1"))

	for _, expected := range []int64{0, 2, 7} {
		_, err := s.Append(ctxT(t), o, expected, f, []eventstore.Envelope{event(o, "x", "T", "", "x")})
		wantErr(t, err, eventstore.ErrVersionConflict, fmt.Sprintf("append at %d with version 1", expected))
	}
	evs := wantLen(t, s, o, 1)
	if evs[0].EventID != "e1" {
		t.Fatalf("conflicting append changed the stream: %+v", evs)
	}
	mustAppend(t, s, o, 1, f, event(o, "e2", "T", "", "2"))
}

func testGapless(t *testing.T, s eventstore.Store) {
	o := orderID(t, "g")
	f, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f, event(o, "e1", "T", "c1", "1"), event(o, "e2", "T", "c1", "2"), event(o, "e3", "T", "", "3"))
	mustAppend(t, s, o, 3, f, event(o, "e4", "T", "c2", "4"), event(o, "e5", "T", "c3", "5"))
	evs := wantLen(t, s, o, 5)
	wantVersions(t, evs)
	for i, e := range evs {
		if want := fmt.Sprintf("e%d", i+1); e.EventID != want {
			t.Fatalf("event at version %d is %s, want %s", i+1, e.EventID, want)
		}
	}
}

func testDuplicateCommand(t *testing.T, s eventstore.Store) {
	o := orderID(t, "d")
	f, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f, event(o, "e1", "T", "cmd-1", "1"))

	_, err := s.Append(ctxT(t), o, 1, f, []eventstore.Envelope{event(o, "e2", "T", "cmd-1", "again")})
	wantErr(t, err, eventstore.ErrDuplicateCommand, "same sourceCommandId again")

	// One duplicate in a batch rejects the whole batch.
	_, err = s.Append(ctxT(t), o, 1, f, []eventstore.Envelope{
		event(o, "e2", "T", "cmd-2", "new"),
		event(o, "e3", "T", "cmd-1", "dup"),
	})
	wantErr(t, err, eventstore.ErrDuplicateCommand, "batch with one duplicate")
	wantLen(t, s, o, 1)

	// Nothing of the rejected batch was recorded, cmd-2 included.
	mustAppend(t, s, o, 1, f, event(o, "e2", "T", "cmd-2", "2"))
	// An empty sourceCommandId never counts as a duplicate.
	mustAppend(t, s, o, 2, f, event(o, "e3", "T", "", "3"))
	mustAppend(t, s, o, 3, f, event(o, "e4", "T", "", "4"))
	_, err = s.Append(ctxT(t), o, 4, f, []eventstore.Envelope{event(o, "e5", "T", "cmd-2", "dup")})
	wantErr(t, err, eventstore.ErrDuplicateCommand, "cmd-2 after it was recorded")
	wantVersions(t, wantLen(t, s, o, 4))
}

func testCheckOrder(t *testing.T, s eventstore.Store) {
	o := orderID(t, "c")
	f, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f, event(o, "e1", "T", "cmd-1", "1"))
	stale := eventstore.Fence{Generation: f.Generation, Epoch: f.Epoch + 5}
	dup := []eventstore.Envelope{event(o, "e2", "T", "cmd-1", "dup")}

	_, err := s.Append(ctxT(t), o, 0, stale, dup)
	wantErr(t, err, eventstore.ErrFenced, "wrong fence, stale version, duplicate")
	_, err = s.Append(ctxT(t), o, 0, f, dup)
	wantErr(t, err, eventstore.ErrVersionConflict, "stale version, duplicate")
	_, err = s.Append(ctxT(t), o, 1, f, dup)
	wantErr(t, err, eventstore.ErrDuplicateCommand, "duplicate only")
	wantLen(t, s, o, 1)

	// A lone event refused for its fence or its version leaves nothing
	// of its source command behind: the same command appends afterwards.
	fresh := []eventstore.Envelope{event(o, "e2", "T", "cmd-2", "2")}
	_, err = s.Append(ctxT(t), o, 1, stale, fresh)
	wantErr(t, err, eventstore.ErrFenced, "wrong fence, new command")
	_, err = s.Append(ctxT(t), o, 0, f, fresh)
	wantErr(t, err, eventstore.ErrVersionConflict, "stale version, new command")
	mustAppend(t, s, o, 1, f, fresh[0])
	_, err = s.Append(ctxT(t), o, 2, f, []eventstore.Envelope{event(o, "e3", "T", "cmd-2", "3")})
	wantErr(t, err, eventstore.ErrDuplicateCommand, "the command once it was appended")
	wantLen(t, s, o, 2)
}

func testOpenUnknown(t *testing.T, s eventstore.Store) {
	o := orderID(t, "u")
	f, evs := mustOpen(t, s, o, 3)
	if f != (eventstore.Fence{Generation: 3, Epoch: 1}) || len(evs) != 0 {
		t.Fatalf("Open(unknown, 3) = %+v with %d events, want {3 1} and none", f, len(evs))
	}
	wantLen(t, s, o, 0)
	// Nothing was stored, so an older generation is not fenced off yet.
	f, _ = mustOpen(t, s, o, 2)
	if f != (eventstore.Fence{Generation: 2, Epoch: 1}) {
		t.Fatalf("Open(unknown, 2) = %+v, want {2 1}", f)
	}
	// Opening an empty stream again does not raise the epoch.
	f, _ = mustOpen(t, s, o, 2)
	if f != (eventstore.Fence{Generation: 2, Epoch: 1}) {
		t.Fatalf("second Open(unknown, 2) = %+v, want {2 1}", f)
	}
}

func testFirstAppendFence(t *testing.T, s eventstore.Store) {
	o := orderID(t, "f")
	f, _ := mustOpen(t, s, o, 4)
	mustAppend(t, s, o, 0, f, event(o, "e1", "T", "", "1"))

	for _, other := range []eventstore.Fence{{Generation: 4, Epoch: 2}, {Generation: 5, Epoch: 1}, {Generation: 3, Epoch: 9}} {
		_, err := s.Append(ctxT(t), o, 1, other, []eventstore.Envelope{event(o, "x", "T", "", "x")})
		wantErr(t, err, eventstore.ErrFenced, fmt.Sprintf("append with %+v after the first append with %+v", other, f))
	}
	wantLen(t, s, o, 1)
	mustAppend(t, s, o, 1, f, event(o, "e2", "T", "", "2"))
}

func testOpenRaisesFence(t *testing.T, s eventstore.Store) {
	o := orderID(t, "r")
	f1, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f1, event(o, "e1", "T", "", "1"))

	f2, evs := mustOpen(t, s, o, 1)
	if f2 != (eventstore.Fence{Generation: 1, Epoch: 2}) || len(evs) != 1 {
		t.Fatalf("Open(gen 1) on a stream fenced {1 1} = %+v with %d events, want {1 2} and 1", f2, len(evs))
	}
	f3, _ := mustOpen(t, s, o, 1)
	if f3 != (eventstore.Fence{Generation: 1, Epoch: 3}) {
		t.Fatalf("Open(gen 1) again = %+v, want {1 3}", f3)
	}
	mustAppend(t, s, o, 1, f3, event(o, "e2", "T", "", "2"))

	g2, evs := mustOpen(t, s, o, 2)
	if g2 != (eventstore.Fence{Generation: 2, Epoch: 1}) || len(evs) != 2 {
		t.Fatalf("Open(gen 2) = %+v with %d events, want {2 1} and 2", g2, len(evs))
	}
	_, err := s.Append(ctxT(t), o, 2, f3, []eventstore.Envelope{event(o, "x", "T", "", "x")})
	wantErr(t, err, eventstore.ErrFenced, "generation 1 writer after generation 2 opened")

	_, _, err = s.Open(ctxT(t), o, 1)
	wantErr(t, err, eventstore.ErrFenced, "Open with an older generation")
	var fe *eventstore.FencedOpenError
	if !errors.As(err, &fe) || fe.Stored != (eventstore.Fence{Generation: 2, Epoch: 1}) || fe.Generation != 1 {
		t.Fatalf("refused Open(gen 1) = %v, want a *FencedOpenError naming the stored fence {2 1}", err)
	}
	// The refused Open left the fence alone.
	mustAppend(t, s, o, 2, g2, event(o, "e3", "T", "", "3"))
	g2b, _ := mustOpen(t, s, o, 2)
	if g2b != (eventstore.Fence{Generation: 2, Epoch: 2}) {
		t.Fatalf("Open(gen 2) after refused Open(gen 1) = %+v, want {2 2}", g2b)
	}
}

func testStaleWriter(t *testing.T, s eventstore.Store) {
	const n = 25
	o := orderID(t, "s")
	old, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, old, event(o, "e1", "T", "", "1"))
	current, _ := mustOpen(t, s, o, 1) // relocation: same generation, new epoch

	fenced := 0
	for i := range n {
		_, err := s.Append(ctxT(t), o, 1, old, []eventstore.Envelope{event(o, fmt.Sprintf("zombie-%d", i), "T", fmt.Sprintf("z%d", i), "z")})
		if !errors.Is(err, eventstore.ErrFenced) {
			t.Fatalf("stale append #%d: err = %v, want ErrFenced", i+1, err)
		}
		fenced++
	}
	if fenced != n {
		t.Fatalf("%d of %d stale appends fenced", fenced, n)
	}
	wantLen(t, s, o, 1)
	mustAppend(t, s, o, 1, current, event(o, "e2", "T", "z0", "2"))
	evs := wantLen(t, s, o, 2)
	for _, e := range evs {
		if bytes.Equal(e.Data, []byte("z")) {
			t.Fatalf("a stale writer's event was stored: %+v", e)
		}
	}
}

func testRace(t *testing.T, s eventstore.Store) {
	const (
		writers = 50
		target  = 20
	)
	o := orderID(t, "race")
	f, _ := mustOpen(t, s, o, 1)
	ctx := ctxT(t)

	type body struct {
		Writer int `json:"writer"`
	}
	var (
		wg sync.WaitGroup
		// loaded holds every writer's first append until all of them have
		// read the stream, so that the first round is a real race (one
		// winner, the rest conflicting) even on a store that answers
		// faster than goroutines interleave.
		loaded    sync.WaitGroup
		start     = make(chan struct{})
		conflicts atomic.Int64
		mu        sync.Mutex
		wins      = map[int][]int64{} // writer -> versions it won
		winners   = map[int64]int{}   // version -> number of writers told they won it
	)
	loaded.Add(writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var firstLoad sync.Once
			defer firstLoad.Do(loaded.Done)
			<-start
			for attempt := 0; ; attempt++ {
				evs, err := s.Load(ctx, o)
				if err != nil {
					t.Errorf("writer %d: Load: %v", w, err)
					return
				}
				if attempt == 0 {
					firstLoad.Do(loaded.Done)
					loaded.Wait()
				}
				v := int64(len(evs))
				if v >= target {
					return
				}
				data, _ := json.Marshal(body{Writer: w})
				ev := event(o, fmt.Sprintf("w%d-a%d", w, attempt), "T", "", string(data))
				got, err := s.Append(ctx, o, v, f, []eventstore.Envelope{ev})
				switch {
				case err == nil:
					mu.Lock()
					wins[w] = append(wins[w], got)
					winners[got]++
					mu.Unlock()
				case errors.Is(err, eventstore.ErrVersionConflict):
					conflicts.Add(1)
				default:
					t.Errorf("writer %d: Append at %d: %v", w, v, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}

	total := 0
	for _, vs := range wins {
		total += len(vs)
	}
	if total != target {
		t.Fatalf("%d appends succeeded, want exactly %d", total, target)
	}
	for v := int64(1); v <= target; v++ {
		if winners[v] != 1 {
			t.Fatalf("version %d has %d winners, want 1", v, winners[v])
		}
	}
	evs := wantLen(t, s, o, target)
	wantVersions(t, evs)
	for _, e := range evs {
		var b body
		if err := json.Unmarshal(e.Data, &b); err != nil {
			t.Fatalf("event %d data %q: %v", e.Version, e.Data, err)
		}
		found := false
		for _, v := range wins[b.Writer] {
			found = found || v == e.Version
		}
		if !found {
			t.Fatalf("event at version %d was written by %d, which was not told it won that version (wins %v)", e.Version, b.Writer, wins[b.Writer])
		}
	}
	if conflicts.Load() == 0 {
		t.Fatalf("no append conflicted: the %d writers never raced", writers)
	}
	t.Logf("%d writers: %d successes, %d version conflicts, %d distinct winners", writers, total, conflicts.Load(), len(wins))
}

func mustRaise(t *testing.T, s eventstore.Store, order string, min int64) eventstore.Fence {
	t.Helper()
	f, err := s.RaiseFence(ctxT(t), order, min)
	if err != nil {
		t.Fatalf("RaiseFence(%s, %d): %v", order, min, err)
	}
	return f
}

// testRaiseFence: a takeover raises the fence past the owner's generation;
// the owner, alive or not, can never append or reopen at its generation,
// and the next owner opens above it and writes.
func testRaiseFence(t *testing.T, s eventstore.Store) {
	o := orderID(t, "tk")
	old, _ := mustOpen(t, s, o, 3)
	mustAppend(t, s, o, 0, old, event(o, "e1", "T", "c1", "1"))

	if f := mustRaise(t, s, o, 4); f != (eventstore.Fence{Generation: 4, Epoch: 0}) {
		t.Fatalf("RaiseFence(4) over {3 1} = %+v, want {4 0}", f)
	}
	_, err := s.Append(ctxT(t), o, 1, old, []eventstore.Envelope{event(o, "zombie", "T", "c2", "z")})
	wantErr(t, err, eventstore.ErrFenced, "the old owner's append after the takeover")
	_, _, err = s.Open(ctxT(t), o, 3)
	wantErr(t, err, eventstore.ErrFenced, "the old owner reopening at its generation")
	// Nobody holds epoch 0: even a writer claiming the raised token is refused.
	_, err = s.Append(ctxT(t), o, 1, eventstore.Fence{Generation: 4, Epoch: 0}, []eventstore.Envelope{event(o, "x", "T", "", "x")})
	wantErr(t, err, eventstore.ErrFenced, "an append with the raised token itself")
	wantLen(t, s, o, 1)

	next, evs := mustOpen(t, s, o, 5)
	if next != (eventstore.Fence{Generation: 5, Epoch: 1}) || len(evs) != 1 {
		t.Fatalf("Open(5) after RaiseFence(4) = %+v with %d events, want {5 1} and 1", next, len(evs))
	}
	mustAppend(t, s, o, 1, next, event(o, "e2", "T", "c2", "2"))
	wantVersions(t, wantLen(t, s, o, 2))
}

// testRaiseFenceRepeat: a repeated takeover changes nothing, and a raise
// never lowers a newer fence, so a late repeat cannot fence the new owner.
func testRaiseFenceRepeat(t *testing.T, s eventstore.Store) {
	o := orderID(t, "tkr")
	f1, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f1, event(o, "e1", "T", "", "1"))
	a := mustRaise(t, s, o, 2)
	b := mustRaise(t, s, o, 2)
	if a != b || a != (eventstore.Fence{Generation: 2, Epoch: 0}) {
		t.Fatalf("RaiseFence(2) twice = %+v then %+v, want {2 0} both", a, b)
	}
	if f := mustRaise(t, s, o, 1); f != a {
		t.Fatalf("RaiseFence(1) after RaiseFence(2) = %+v, want %+v unchanged", f, a)
	}
	// Open at the raised generation itself takes epoch 1.
	g2, _ := mustOpen(t, s, o, 2)
	if g2 != (eventstore.Fence{Generation: 2, Epoch: 1}) {
		t.Fatalf("Open(2) after RaiseFence(2) = %+v, want {2 1}", g2)
	}
	// A late repeat of the same takeover leaves the new owner's fence alone.
	if f := mustRaise(t, s, o, 2); f != g2 {
		t.Fatalf("RaiseFence(2) after Open(2) = %+v, want %+v unchanged", f, g2)
	}
	mustAppend(t, s, o, 1, g2, event(o, "e2", "T", "", "2"))
	if _, err := s.RaiseFence(ctxT(t), o, 0); err == nil {
		t.Fatal("RaiseFence(0) succeeded; generations start at 1")
	}
}

// testRaiseFenceNoStream: a takeover before the first event still fences
// the old owner, which would otherwise establish the fence with its first
// append.
func testRaiseFenceNoStream(t *testing.T, s eventstore.Store) {
	o := orderID(t, "tkn")
	old, _ := mustOpen(t, s, o, 1) // nothing stored yet
	if f := mustRaise(t, s, o, 2); f != (eventstore.Fence{Generation: 2, Epoch: 0}) {
		t.Fatalf("RaiseFence(2) without a stream = %+v, want {2 0}", f)
	}
	_, err := s.Append(ctxT(t), o, 0, old, []eventstore.Envelope{event(o, "zombie", "T", "start", "z")})
	wantErr(t, err, eventstore.ErrFenced, "the old owner's first append after the takeover")
	wantLen(t, s, o, 0)
	_, _, err = s.Open(ctxT(t), o, 1)
	wantErr(t, err, eventstore.ErrFenced, "Open below a raised fence without a stream")

	next, evs := mustOpen(t, s, o, 3)
	if next != (eventstore.Fence{Generation: 3, Epoch: 1}) || len(evs) != 0 {
		t.Fatalf("Open(3) = %+v with %d events, want {3 1} and none", next, len(evs))
	}
	mustAppend(t, s, o, 0, next, event(o, "e1", "T", "start", "1"))
	wantLen(t, s, o, 1)
}

// testWriterFence: every loaded entry names the fence its append passed,
// so a checker can tell which owner wrote it; entries written after a
// takeover's raised fence carry the new generation, earlier ones keep the
// old one. Open returns the same stamps as Load.
func testWriterFence(t *testing.T, s eventstore.Store) {
	o := orderID(t, "wf")
	g1, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, g1, event(o, "e1", "T", "c1", "1"), event(o, "e2", "T", "c1", "2"))
	// A relocation within the generation: the next writer has epoch 2.
	g1e2, _ := mustOpen(t, s, o, 1)
	if g1e2 != (eventstore.Fence{Generation: 1, Epoch: 2}) {
		t.Fatalf("reopen at generation 1 = %+v, want {1 2}", g1e2)
	}
	// The caller's envelope fields are not trusted: the store stamps the fence.
	forged := event(o, "e3", "T", "c3", "3")
	forged.FenceGeneration, forged.FenceEpoch = 99, 99
	mustAppend(t, s, o, 2, g1e2, forged)

	mustRaise(t, s, o, 2) // takeover
	_, err := s.Append(ctxT(t), o, 3, g1e2, []eventstore.Envelope{event(o, "zombie", "T", "cz", "z")})
	wantErr(t, err, eventstore.ErrFenced, "the retired owner's append")
	g3, _ := mustOpen(t, s, o, 3)
	mustAppend(t, s, o, 3, g3, event(o, "e4", "T", "c4", "4"))

	want := []eventstore.Fence{g1, g1, g1e2, g3}
	check := func(what string, evs []eventstore.Envelope) {
		t.Helper()
		if len(evs) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(evs), len(want))
		}
		for i, e := range evs {
			got := eventstore.Fence{Generation: e.FenceGeneration, Epoch: e.FenceEpoch}
			if got != want[i] {
				t.Fatalf("%s: event v%d (%s) has writer fence %+v, want %+v", what, e.Version, e.EventID, got, want[i])
			}
		}
	}
	check("Load", mustLoad(t, s, o))
	_, evs := mustOpen(t, s, o, 3)
	check("Open", evs)
	if want[3].Generation != 3 || want[3].Epoch != 1 {
		t.Fatalf("the writer after the takeover holds %+v, want {3 1}", want[3])
	}
}

// CheckedStore is a Store that also implements StreamChecker.
type CheckedStore interface {
	eventstore.Store
	eventstore.StreamChecker
}

// RunStreamCheckerContract runs the StreamChecker contract as subtests,
// against a store whose Store side it drives to make streams and fences.
// newStore is called once per subtest, as in RunContract.
func RunStreamCheckerContract(t *testing.T, newStore func(t *testing.T) CheckedStore) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, s CheckedStore)
	}{
		{"UnknownOrderHasNoStream", testExistsUnknown},
		{"FirstAppendMakesTheStream", testExistsAfterAppend},
		{"OpenAndEmptyAppendMakeNoStream", testExistsNotByOpen},
		{"RaisedFenceMakesNoStream", testExistsNotByFence},
		{"InvalidOrderID", testExistsInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newStore(t))
		})
	}
}

func wantExists(t *testing.T, s CheckedStore, order string, want bool, when string) {
	t.Helper()
	got, err := s.StreamExists(ctxT(t), order)
	if err != nil {
		t.Fatalf("StreamExists(%s) %s: %v", order, when, err)
	}
	if got != want {
		t.Fatalf("StreamExists(%s) %s = %v, want %v", order, when, got, want)
	}
}

func testExistsUnknown(t *testing.T, s CheckedStore) {
	wantExists(t, s, orderID(t, "none"), false, "for an order never written")
}

func testExistsAfterAppend(t *testing.T, s CheckedStore) {
	o := orderID(t, "one")
	f, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f, event(o, "e1", "OrderStartedEvent", "c1", `{"n":1}`))
	wantExists(t, s, o, true, "after its first event")
	// Another order's stream says nothing about this one.
	wantExists(t, s, orderID(t, "other"), false, "for another order")
}

func testExistsNotByOpen(t *testing.T, s CheckedStore) {
	o := orderID(t, "open")
	f, _ := mustOpen(t, s, o, 1)
	mustAppend(t, s, o, 0, f)
	wantExists(t, s, o, false, "after an Open and an empty append")
}

func testExistsNotByFence(t *testing.T, s CheckedStore) {
	o := orderID(t, "fence")
	mustRaise(t, s, o, 3)
	wantExists(t, s, o, false, "after a raised fence and no event")
}

func testExistsInvalid(t *testing.T, s CheckedStore) {
	for _, id := range []string{"", "a{b}"} {
		_, err := s.StreamExists(ctxT(t), id)
		wantErr(t, err, eventstore.ErrInvalidOrderID, fmt.Sprintf("StreamExists(%q)", id))
	}
}
