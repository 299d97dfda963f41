package takeover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

const kind = "shoppingmall.order-workflow"

type env struct {
	t      *testing.T
	rdb    *redis.Client
	loc    location.Store
	rel    relocation.Store
	events *eventstore.Redis
	live   sync.Map // member id → true while "in the topology"
	svc    *Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	events, err := eventstore.NewRedis(eventstore.Config{Client: rdb})
	require.NoError(t, err)
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)
	rel, err := relocation.NewRedis(relocation.Config{Client: rdb})
	require.NoError(t, err)
	e := &env{t: t, rdb: rdb,
		loc:    loc,
		rel:    rel,
		events: events,
	}
	svc, err := New(Config{Kind: kind, Location: e.loc, Relocations: e.rel, Fences: e.events,
		Live: func(m string) bool { _, ok := e.live.Load(m); return ok },
		Now:  func() time.Time { return time.UnixMilli(1_800_000_000_000) }})
	require.NoError(t, err)
	e.svc = svc
	return e
}

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// member publishes a member's node name; live puts it in the topology.
// liveMember records a member's name and puts it in the topology.
func (e *env) liveMember(id, node string) {
	require.NoError(e.t, e.loc.PutMember(ctxT(e.t), id, node, 0))
	e.live.Store(id, true)
}

// absentMember records a member's name and leaves it out of the topology.
func (e *env) absentMember(id, node string) {
	require.NoError(e.t, e.loc.PutMember(ctxT(e.t), id, node, 0))
	e.live.Delete(id)
}

func (e *env) gone(id, node string, leftAt time.Time) {
	e.live.Delete(id)
	_, err := e.loc.MarkGone(ctxT(e.t), id, node, leftAt.UnixMilli())
	require.NoError(e.t, err)
}

// owned activates order at member as a grain would: a Ready record, the
// stream opened at that generation and one event appended. It returns the
// owner's fence.
func (e *env) owned(order, member string) (int64, eventstore.Fence) {
	t := e.t
	ok, gen, _, err := e.loc.BeginCreate(ctxT(t), kind, order, "tok-"+order, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, e.loc.CommitReady(ctxT(t), kind, order, "tok-"+order,
		location.Record{Owner: member, PIDAddress: "addr-" + member, PIDID: "pid-" + order, Generation: gen}))
	f, evs, err := e.events.Open(ctxT(t), order, gen)
	require.NoError(t, err)
	_, err = e.events.Append(ctxT(t), order, int64(len(evs)), f, []eventstore.Envelope{
		{EventID: fmt.Sprintf("e%d", len(evs)+1), EventType: "T", SourceCommandID: fmt.Sprintf("c%d-%d", gen, len(evs)+1), Data: []byte("{}")}})
	require.NoError(t, err)
	return gen, f
}

func (e *env) record(order string) location.Record {
	rec, err := e.loc.Get(ctxT(e.t), kind, order)
	require.NoError(e.t, err)
	return rec
}

func (e *env) appendWith(order string, f eventstore.Fence) error {
	evs, err := e.events.Load(ctxT(e.t), order)
	require.NoError(e.t, err)
	_, err = e.events.Append(ctxT(e.t), order, int64(len(evs)), f,
		[]eventstore.Envelope{{EventID: "late", EventType: "T", Data: []byte("{}")}})
	return err
}

// TestOrderTakeoverRetiresTheGoneOwner: fence, record, reset — the old
// owner can never append again, the operation is on record, and the next
// activation opens above the retired generation and writes.
func TestOrderTakeoverRetiresTheGoneOwner(t *testing.T) {
	e := newEnv(t)
	e.liveMember("m1", "workflow-a")
	gen, old := e.owned("o1", "m1")
	e.gone("m1", "workflow-a", time.UnixMilli(1_799_999_000_000))

	res, err := e.svc.Order(ctxT(t), Request{OrderID: "o1", Caller: "test"})
	require.NoError(t, err)
	want := Result{OrderID: "o1", OperationID: DefaultOperationID("o1", gen), Member: "m1", Node: "workflow-a",
		OldGeneration: gen, NewGeneration: gen + 1, Outcome: TakenOver}
	require.Equal(t, want, res)

	require.ErrorIs(t, e.appendWith("o1", old), eventstore.ErrFenced, "the old owner can never append again")
	require.Equal(t, location.Record{Generation: gen + 1, TakenOver: true}, e.record("o1"), "Missing at generation+1, marked for the next activation")
	op, err := e.rel.GetOperation(ctxT(t), res.OperationID)
	require.NoError(t, err)
	require.Equal(t, relocation.Operation{ID: res.OperationID, OrderID: "o1", Kind: relocation.KindTakeover,
		Source: "workflow-a", Member: "m1", Caller: "test", Generation: gen, NewGeneration: gen + 1,
		State: relocation.OpCommitted, StartedAtUnixMs: 1_800_000_000_000, UpdatedAtUnixMs: 1_800_000_000_000}, op)
	owned, err := e.loc.Owned(ctxT(t), "m1", kind)
	require.NoError(t, err)
	require.Empty(t, owned, "the index no longer lists it")

	// The next command cold-activates above the fence and writes.
	e.liveMember("m2", "workflow-b")
	next, _ := e.owned("o1", "m2")
	require.Equal(t, gen+2, next)
	evs, err := e.events.Load(ctxT(t), "o1")
	require.NoError(t, err)
	require.Len(t, evs, 2, "the stream went on from the next version")

	// Repeats: with the operation id it is already done; without, the
	// order has a live owner again and nothing is taken.
	again, err := e.svc.Order(ctxT(t), Request{OrderID: "o1", OperationID: res.OperationID})
	require.NoError(t, err)
	require.Equal(t, AlreadyTakenOver, again.Outcome)
	_, err = e.svc.Order(ctxT(t), Request{OrderID: "o1"})
	require.ErrorIs(t, err, ErrOwnerLive)
	require.Equal(t, "m2", e.record("o1").Owner)
}

func TestOrderTakeoverRefusals(t *testing.T) {
	e := newEnv(t)
	e.liveMember("m1", "workflow-a")
	gen, old := e.owned("o1", "m1")

	_, err := e.svc.Order(ctxT(t), Request{OrderID: "o1"})
	require.ErrorIs(t, err, ErrOwnerLive)
	dry, err := e.svc.Order(ctxT(t), Request{OrderID: "o1", Force: true, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, WouldTakeOver, dry.Outcome)
	require.True(t, dry.OwnerLive)
	require.NoError(t, e.appendWith("o1", old), "neither a refusal nor a dry run fences anything")
	require.Equal(t, location.Ready, e.record("o1").Status)
	_, err = e.rel.GetOperation(ctxT(t), DefaultOperationID("o1", gen))
	require.ErrorIs(t, err, relocation.ErrNotFound, "nor records an operation")

	_, err = e.svc.Order(ctxT(t), Request{OrderID: "never"})
	require.ErrorIs(t, err, ErrNotFound)
	_, err = e.svc.Order(ctxT(t), Request{OrderID: "bad{id}"})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.NoError(t, e.rel.PutOperation(ctxT(t), relocation.Operation{ID: "reloc-1", OrderID: "o1", Source: "workflow-a",
		Generation: gen, State: relocation.OpMoving}))
	_, err = e.svc.Order(ctxT(t), Request{OrderID: "o1", OperationID: "reloc-1", Force: true})
	require.ErrorIs(t, err, ErrConflict, "a relocation's id is not a takeover's")

	// A member out of the topology counts as gone before its record lands.
	e.live.Delete("m1")
	res, err := e.svc.Order(ctxT(t), Request{OrderID: "o1"})
	require.NoError(t, err)
	require.Equal(t, TakenOver, res.Outcome)
	require.False(t, res.OwnerLive)
	_, err = e.svc.Order(ctxT(t), Request{OrderID: "o1"})
	require.ErrorIs(t, err, ErrNoOwner, "a Missing order has no owner to take over from")
}

// TestForcedTakeoverOfALiveOwner: force evicts a live owner (one behind a
// partition); its next append is refused.
func TestForcedTakeoverOfALiveOwner(t *testing.T) {
	e := newEnv(t)
	e.liveMember("m1", "workflow-a")
	gen, old := e.owned("o1", "m1")
	var dropped atomic.Value
	e.svc.cfg.DropRoute = func(k, id string, rec location.Record) { dropped.Store(rec) }

	res, err := e.svc.Order(ctxT(t), Request{OrderID: "o1", Force: true, OperationID: "op-force"})
	require.NoError(t, err)
	require.Equal(t, Result{OrderID: "o1", OperationID: "op-force", Member: "m1", Node: "workflow-a",
		OldGeneration: gen, NewGeneration: gen + 1, Outcome: TakenOver, OwnerLive: true}, res)
	require.ErrorIs(t, e.appendWith("o1", old), eventstore.ErrFenced)
	rec, _ := dropped.Load().(location.Record)
	require.Equal(t, "pid-o1", rec.PIDID, "cached routes to the old grain are dropped")
}

// TestHalfDoneTakeoverIsFinishedByARepeat: a takeover interrupted after
// the fence, or after the record, is finished by a repeat — with its
// operation id, or without one (the default id is the same).
func TestHalfDoneTakeoverIsFinishedByARepeat(t *testing.T) {
	e := newEnv(t)
	e.gone("m1", "workflow-a", time.UnixMilli(1))

	// Interrupted after step 1: only the fence is up.
	gen, old := e.owned("o1", "m1")
	_, err := e.events.RaiseFence(ctxT(t), "o1", gen+1)
	require.NoError(t, err)
	require.ErrorIs(t, e.appendWith("o1", old), eventstore.ErrFenced)
	res, err := e.svc.Order(ctxT(t), Request{OrderID: "o1"})
	require.NoError(t, err)
	require.Equal(t, TakenOver, res.Outcome)
	require.Equal(t, location.Record{Generation: gen + 1, TakenOver: true}, e.record("o1"))

	// Interrupted after step 2: fence and record, the location untouched.
	gen2, _ := e.owned("o2", "m1")
	_, err = e.events.RaiseFence(ctxT(t), "o2", gen2+1)
	require.NoError(t, err)
	half := relocation.Operation{ID: "op-half", OrderID: "o2", Kind: relocation.KindTakeover, Source: "workflow-a",
		Member: "m1", Caller: "first", Generation: gen2, NewGeneration: gen2 + 1, State: relocation.OpFenced, StartedAtUnixMs: 5}
	require.NoError(t, e.rel.PutOperation(ctxT(t), half))
	open, ok, err := e.rel.OpenOperation(ctxT(t), "o2")
	require.NoError(t, err)
	require.True(t, ok, "the half-done takeover is on record")
	require.Equal(t, "op-half", open.ID)
	require.Equal(t, location.Ready, e.record("o2").Status, "still Unavailable, not yet taken over")

	dry, err := e.svc.Order(ctxT(t), Request{OrderID: "o2", OperationID: "op-half", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, WouldTakeOver, dry.Outcome)
	res, err = e.svc.Order(ctxT(t), Request{OrderID: "o2", OperationID: "op-half", Caller: "second"})
	require.NoError(t, err)
	require.Equal(t, Result{OrderID: "o2", OperationID: "op-half", Member: "m1", Node: "workflow-a",
		OldGeneration: gen2, NewGeneration: gen2 + 1, Outcome: TakenOver}, res)
	require.Equal(t, location.Record{Generation: gen2 + 1, TakenOver: true}, e.record("o2"))
	op, err := e.rel.GetOperation(ctxT(t), "op-half")
	require.NoError(t, err)
	require.Equal(t, relocation.OpCommitted, op.State)
	require.Equal(t, "first", op.Caller, "the record keeps who started it")
	require.EqualValues(t, 5, op.StartedAtUnixMs)

	// The same without the id: the default id finds the record.
	gen3, _ := e.owned("o3", "m1")
	_, err = e.events.RaiseFence(ctxT(t), "o3", gen3+1)
	require.NoError(t, err)
	half.ID, half.OrderID, half.Generation, half.NewGeneration = DefaultOperationID("o3", gen3), "o3", gen3, gen3+1
	require.NoError(t, e.rel.PutOperation(ctxT(t), half))
	res, err = e.svc.Order(ctxT(t), Request{OrderID: "o3"})
	require.NoError(t, err)
	require.Equal(t, half.ID, res.OperationID)
	require.Equal(t, TakenOver, res.Outcome)
	ops, err := e.rel.Operations(ctxT(t), "o3")
	require.NoError(t, err)
	require.Len(t, ops, 1, "one operation, finished")
	require.Equal(t, relocation.OpCommitted, ops[0].State)
}

// failingFences fails RaiseFence: a takeover that cannot fence must not
// record or reset anything.
type failingFences struct{}

func (failingFences) RaiseFence(context.Context, string, int64) (eventstore.Fence, error) {
	return eventstore.Fence{}, fmt.Errorf("%w: connection refused", eventstore.ErrUnavailable)
}

func TestNoFenceNoTakeover(t *testing.T) {
	e := newEnv(t)
	e.gone("m1", "workflow-a", time.UnixMilli(1))
	gen, _ := e.owned("o1", "m1")
	e.svc.cfg.Fences = failingFences{}
	_, err := e.svc.Order(ctxT(t), Request{OrderID: "o1"})
	require.ErrorIs(t, err, eventstore.ErrUnavailable)
	require.Equal(t, location.Ready, e.record("o1").Status, "the record is reset only behind a raised fence")
	_, err = e.rel.GetOperation(ctxT(t), DefaultOperationID("o1", gen))
	require.ErrorIs(t, err, relocation.ErrNotFound)
}

// TestMemberTakeover: a node name covers every dead incarnation; the index
// is checked against the records; Scan finds records the index lacks.
func TestMemberTakeover(t *testing.T) {
	e := newEnv(t)
	e.liveMember("a1", "workflow-a")
	e.liveMember("a2", "workflow-a")
	e.liveMember("a3", "workflow-a") // the live incarnation
	e.liveMember("b1", "workflow-b")
	e.owned("o1", "a1")
	e.owned("o2", "a1")
	e.owned("o3", "a2")
	e.owned("o4", "a3")
	e.owned("o5", "b1")
	// o6 moved from a1 to b1: a1's index entry is stale.
	e.owned("o6", "a1")
	_, err := e.loc.BeginMove(ctxT(t), kind, "o6", "pid-o6", "mv")
	require.NoError(t, err)
	require.NoError(t, e.loc.CommitMove(ctxT(t), kind, "o6", "mv", location.Record{Owner: "b1", PIDAddress: "x", PIDID: "pid-o6b"}))
	require.NoError(t, e.rdb.SAdd(ctxT(t), "sm:loc:owned:a1", kind+"/o6").Err())
	e.gone("a1", "workflow-a", time.UnixMilli(1))
	e.gone("a2", "workflow-a", time.UnixMilli(2))

	ids := func(rs []Result) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.OrderID)
		}
		return out
	}
	dry, errs, err := e.svc.Member(ctxT(t), Request{Member: "workflow-a", DryRun: true})
	require.NoError(t, err)
	require.Empty(t, errs)
	require.Equal(t, []string{"o1", "o2", "o3"}, ids(dry), "every dead incarnation of the node, not the live one")
	for _, r := range dry {
		require.Equal(t, WouldTakeOver, r.Outcome)
	}
	require.Equal(t, location.Ready, e.record("o1").Status, "a dry run changes nothing")

	res, errs, err := e.svc.Member(ctxT(t), Request{Member: "workflow-a", OperationID: "op-a", Caller: "ops"})
	require.NoError(t, err)
	require.Empty(t, errs)
	require.Equal(t, []string{"o1", "o2", "o3"}, ids(res))
	for _, r := range res {
		require.Equal(t, TakenOver, r.Outcome)
		require.Equal(t, "op-a."+r.OrderID, r.OperationID)
		require.Equal(t, "workflow-a", r.Node)
		require.Equal(t, location.Missing, e.record(r.OrderID).Status)
	}
	require.Equal(t, "b1", e.record("o6").Owner, "a stale index entry is checked against the record")
	owned, err := e.loc.Owned(ctxT(t), "a1", kind)
	require.NoError(t, err)
	require.Empty(t, owned, "and dropped")
	require.Equal(t, location.Ready, e.record("o4").Status)

	_, _, err = e.svc.Member(ctxT(t), Request{Member: "a3"})
	require.ErrorIs(t, err, ErrOwnerLive)
	res, _, err = e.svc.Member(ctxT(t), Request{Member: "a3", Force: true})
	require.NoError(t, err)
	require.Equal(t, []string{"o4"}, ids(res))
	require.True(t, res[0].OwnerLive)
	_, _, err = e.svc.Member(ctxT(t), Request{Member: "workflow-z"})
	require.ErrorIs(t, err, ErrUnknownMember)
	e.liveMember("c1", "workflow-c")
	_, _, err = e.svc.Member(ctxT(t), Request{Member: "workflow-c"})
	require.ErrorIs(t, err, ErrOwnerLive, "a node whose only incarnation is live is not 'nothing to do'")

	// A record from before the index existed: only a scan finds it.
	require.NoError(t, e.rdb.HSet(ctxT(t), "sm:loc:"+kind+":{o7}", "status", "Ready", "owner", "b1",
		"pidAddress", "x", "pidId", "p7", "generation", 4).Err())
	e.gone("b1", "workflow-b", time.UnixMilli(3))
	res, _, err = e.svc.Member(ctxT(t), Request{Member: "workflow-b"})
	require.NoError(t, err)
	require.Equal(t, []string{"o5", "o6"}, ids(res))
	res, _, err = e.svc.Member(ctxT(t), Request{Member: "workflow-b", Scan: true})
	require.NoError(t, err)
	require.Equal(t, []string{"o7"}, ids(res))
	require.Equal(t, int64(5), res[0].NewGeneration)
}

// TestPolicyWaitsForTheGoneRecordToAge: the policy acts on the recorded
// gone time only, and only once it is older than After.
func TestPolicyWaitsForTheGoneRecordToAge(t *testing.T) {
	e := newEnv(t)
	now := time.UnixMilli(time.Now().UnixMilli()) // gone records keep milliseconds
	e.svc.cfg.Now = func() time.Time { return now }
	p, err := NewPolicy(PolicyConfig{Service: e.svc, After: time.Minute, Caller: "policy"})
	require.NoError(t, err)
	defer p.Close()

	e.absentMember("m1", "workflow-a") // out of the topology, but not recorded gone
	e.owned("o1", "m1")
	wait, err := p.try(ctxT(t), "o1")
	require.NoError(t, err)
	require.Zero(t, wait, "no gone record, nothing to wait for")
	require.Equal(t, location.Ready, e.record("o1").Status, "the policy acts on the gone record only")

	e.gone("m1", "workflow-a", now.Add(-20*time.Second))
	wait, err = p.try(ctxT(t), "o1")
	require.NoError(t, err)
	require.Equal(t, 40*time.Second, wait, "until the record is a minute old")
	require.Equal(t, location.Ready, e.record("o1").Status)

	now = now.Add(41 * time.Second)
	wait, err = p.try(ctxT(t), "o1")
	require.NoError(t, err)
	require.Zero(t, wait)
	require.Equal(t, location.Missing, e.record("o1").Status)
	ops, err := e.rel.Operations(ctxT(t), "o1")
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, "policy", ops[0].Caller)

	_, err = NewPolicy(PolicyConfig{Service: e.svc})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestPolicyRunsInTheBackground: OwnerGone returns at once; the order is
// taken over after After, once, however many commands report it.
func TestPolicyRunsInTheBackground(t *testing.T) {
	e := newEnv(t)
	e.svc.cfg.Now = time.Now
	p, err := NewPolicy(PolicyConfig{Service: e.svc, After: 300 * time.Millisecond, Caller: "policy"})
	require.NoError(t, err)
	defer p.Close()
	e.liveMember("m1", "workflow-a")
	e.owned("o1", "m1")
	left := time.Now()
	e.gone("m1", "workflow-a", left)

	for range 20 {
		p.OwnerGone("o1")
	}
	p.OwnerGone("bad{id}")
	require.Eventually(t, func() bool { return e.record("o1").Status == location.Missing }, 5*time.Second, 10*time.Millisecond)
	took := time.Since(left)
	require.GreaterOrEqual(t, took, 300*time.Millisecond, "not before the gone record is After old")
	t.Logf("taken over %s after the owner was recorded gone (After 300ms)", took.Round(time.Millisecond))
	ops, err := e.rel.Operations(ctxT(t), "o1")
	require.NoError(t, err)
	require.Len(t, ops, 1, "one takeover however many commands reported the order")
	require.GreaterOrEqual(t, ops[0].StartedAtUnixMs-left.UnixMilli(), int64(300))

	// A scheduled takeover is dropped by Close.
	e.owned("o2", "m1")
	p.OwnerGone("o2") // the record is old enough now: taken at once
	require.Eventually(t, func() bool { return e.record("o2").Status == location.Missing }, 5*time.Second, 10*time.Millisecond)
	q, err := NewPolicy(PolicyConfig{Service: e.svc, After: time.Hour})
	require.NoError(t, err)
	e.owned("o3", "m1")
	q.OwnerGone("o3")
	done := make(chan struct{})
	go func() { q.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop a scheduled takeover")
	}
	require.Equal(t, location.Ready, e.record("o3").Status)
	q.OwnerGone("o3") // after Close: ignored
	require.Equal(t, location.Ready, e.record("o3").Status)
}

// TestConcurrentTakeoversConverge: APIs racing on one order (the policy
// runs in each) converge on its default operation id: one operation, one
// reset, and no caller fails.
func TestConcurrentTakeoversConverge(t *testing.T) {
	e := newEnv(t)
	e.gone("m1", "workflow-a", time.UnixMilli(1))
	gen, old := e.owned("o1", "m1")
	var wg sync.WaitGroup
	results := make([]Result, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.svc.Order(context.Background(), Request{OrderID: "o1", Caller: fmt.Sprintf("api-%d", i)})
		}()
	}
	wg.Wait()
	taken := 0
	for i := range results {
		if errors.Is(errs[i], ErrNoOwner) {
			continue // came after the reset: nothing left to take over
		}
		require.NoError(t, errs[i])
		require.Equal(t, DefaultOperationID("o1", gen), results[i].OperationID)
		require.Contains(t, []Outcome{TakenOver, AlreadyTakenOver}, results[i].Outcome)
		taken++
	}
	require.Positive(t, taken)
	ops, err := e.rel.Operations(ctxT(t), "o1")
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, relocation.OpCommitted, ops[0].State)
	require.Equal(t, location.Record{Generation: gen + 1, TakenOver: true}, e.record("o1"))
	require.ErrorIs(t, e.appendWith("o1", old), eventstore.ErrFenced)
}
