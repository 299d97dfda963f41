package clustertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// confirmedOn starts orders through a until n of them are Confirmed and
// owned by w (cold activations alternate between the members).
func (h *harness) confirmedOn(t *testing.T, a *api, w *node.Workflow, n int) []string {
	t.Helper()
	var ids []string
	for tries := 0; len(ids) < n; tries++ {
		require.Less(t, tries, 20*n, "no order landed on %s", w.Member.ID())
		req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
		_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
		require.NoError(t, err)
		h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
		if h.record(t, req.OrderId).Owner == w.Member.ID() {
			ids = append(ids, req.OrderId)
		}
	}
	return ids
}

func (h *harness) record(t *testing.T, id string) location.Record {
	t.Helper()
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, id)
	require.NoError(t, err)
	return rec
}

func grainCount(w *node.Workflow) int32 {
	k, ok := w.Member.Cluster.TryGetClusterKind(grain.KindName)
	if !ok {
		return -1
	}
	return k.Count()
}

func continueOrder(c *grain.Client, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.ContinueOrderWorkflow(ctx, &contracts.ContinueOrderWorkflowReq{OrderId: id})
	return err
}

// Once a member is recorded gone, every lookup answers Unavailable for its
// orders, also one that still sees it live in its topology and holds the
// grain's pid warm in its cache, and also the gone member's own lookup.
// Nothing is activated elsewhere, the records stay as they are, new
// orders go to the other member, and a grain of the gone member is told
// it is superseded.
func TestGoneOwnerIsUnavailableEvenWhileLive(t *testing.T) {
	h := newHarness(t)
	wa, wb := h.startWorkflow("workflow-a"), h.startWorkflow("workflow-b")
	a, b := h.startAPI("api-a"), h.startAPI("api-b")
	waitMembers(t, a.member.Lookup, 2)
	waitMembers(t, b.member.Lookup, 2)
	ids := h.confirmedOn(t, a, wa, 2)
	before := map[string]location.Record{}
	for _, id := range ids {
		before[id] = h.record(t, id)
		// Warm: both APIs now hold the grain's pid in their caches.
		require.NoError(t, continueOrder(a.client, id))
		require.NoError(t, continueOrder(b.client, id))
	}

	// api-b records workflow-a gone, as if it alone had seen it leave
	// (a partial partition); api-a goes on seeing it live.
	gone := wa.Member.ID()
	leftAt := time.Now()
	won, err := b.member.Lookup.RecordGone(ctxT(t, 5*time.Second), gone, leftAt)
	require.NoError(t, err)
	require.True(t, won)

	callers := map[string]*grain.Client{"api-a": a.client, "api-b": b.client, "workflow-a itself": wa.Client}
	for name, c := range callers {
		require.Eventually(t, func() bool { return errors.Is(continueOrder(c, ids[0]), placement.ErrUnavailable) }, 5*time.Second, 10*time.Millisecond,
			"%s answers Unavailable for the gone owner's order", name)
	}
	require.True(t, a.member.Lookup.Live(gone), "the gone member is still in api-a's topology")
	require.True(t, b.member.Lookup.Live(gone), "the gone member is still in api-b's topology")
	for name, c := range callers {
		for _, id := range ids {
			began := time.Now()
			err := continueOrder(c, id)
			require.ErrorIs(t, err, placement.ErrUnavailable, "%s, order %s", name, id)
			require.Less(t, time.Since(began), time.Second, "Unavailable at once, not a timeout")
		}
	}
	for _, id := range ids {
		require.Equal(t, before[id], h.record(t, id), "the gone owner's record is untouched")
	}
	won, err = a.member.Lookup.RecordGone(ctxT(t, 5*time.Second), gone, leftAt.Add(time.Second))
	require.NoError(t, err)
	require.False(t, won, "the first record wins")

	// The gone member no longer counts as capacity nor gets new orders.
	require.Len(t, a.member.Lookup.Eligible(grain.KindName), 1)
	for range 4 {
		req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
		_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
		require.NoError(t, err)
		require.Equal(t, wb.Member.ID(), h.record(t, req.OrderId).Owner, "a new order is placed on the live member")
	}

	// A grain of the gone member that asks whether it may work is told no.
	rec := before[ids[0]]
	require.Eventually(t, func() bool { return wa.Member.Lookup.IsGone(gone) }, 5*time.Second, 10*time.Millisecond, "workflow-a learns it is gone")
	conf, err := wa.Member.Lookup.Confirm(ctxT(t, 5*time.Second), grain.KindName, ids[0], actor.NewPID(rec.PIDAddress, rec.PIDID), rec.Generation)
	require.NoError(t, err)
	require.Equal(t, placement.Superseded, conf)

	// The record the takeover reads.
	gm, err := b.member.Lookup.GoneMembers(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	require.Equal(t, location.GoneMember{MemberID: gone, Node: "workflow-a", LeftAtUnixMs: leftAt.UnixMilli()}, gm[gone])
}

// A member that finds itself recorded gone stops its grains at once,
// locally: the records stay Ready at its member id, the streams get no
// event, nothing is activated elsewhere, and its orders answer
// Unavailable until an operator takes them over. It counts the fence,
// as evicted, before it stops.
func TestSelfFenceOnOwnGoneRecordStopsGrainsWithoutTouchingRecords(t *testing.T) {
	h := newHarness(t)
	reg := telemetry.NewRegistry()
	fences := func(reason string) float64 {
		t.Helper()
		v, err := telemetry.Sum(reg.Gatherer(), placement.MetricSelfFences, map[string]string{placement.LabelFenceReason: reason})
		require.NoError(t, err)
		return v
	}
	ws := map[string]*node.Workflow{
		"workflow-a": h.startWorkflow("workflow-a", withFixtures(), withMetrics(reg)),
		"workflow-b": h.startWorkflow("workflow-b", withFixtures()),
	}
	wa := ws["workflow-a"]
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)
	ids := h.confirmedOn(t, a, wa, 1)
	// And one order in flight, held at InventoryReserved on workflow-a.
	for tries := 0; ; tries++ {
		require.Less(t, tries, 20, "no parked order landed on workflow-a")
		req, owner := h.parkedOrder(t, a, ws)
		if owner == "workflow-a" {
			ids = append(ids, req.OrderId)
			break
		}
	}
	before := map[string]location.Record{}
	streams := map[string][]string{}
	for _, id := range ids {
		before[id] = h.record(t, id)
		streams[id] = h.eventTypes(t, id)
	}
	require.EqualValues(t, len(ids), grainCount(wa))
	require.Zero(t, fences(placement.FenceEvicted))
	require.Zero(t, fences(placement.FenceLeaseExpired))

	fenced := make(chan error, 1)
	go func() {
		fenced <- wa.RunSelfFence(ctxT(t, 30*time.Second), node.SelfFenceConfig{Interval: 20 * time.Millisecond})
	}()
	markedAt := time.Now()
	won, err := a.member.Lookup.RecordGone(ctxT(t, 5*time.Second), wa.Member.ID(), markedAt)
	require.NoError(t, err)
	require.True(t, won)
	select {
	case err := <-fenced:
		require.ErrorIs(t, err, node.ErrSelfFenced)
		require.ErrorIs(t, err, placement.ErrEvicted)
		t.Logf("fenced %s after its gone record: %v", time.Since(markedAt).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the member did not fence itself after it was recorded gone")
	}
	require.True(t, wa.Member.Lookup.Fenced())
	require.Equal(t, 1.0, fences(placement.FenceEvicted), "the fence is counted as evicted")
	require.Zero(t, fences(placement.FenceLeaseExpired))

	// Its grains are gone from it...
	require.Eventually(t, func() bool { return grainCount(wa) == 0 }, 5*time.Second, 10*time.Millisecond, "workflow-a's grains stopped (count %d)", grainCount(wa))
	for _, id := range ids {
		rec := before[id]
		_, err := wa.Member.System.Root.RequestFuture(actor.NewPID(rec.PIDAddress, rec.PIDID),
			&contracts.ContinueOrderWorkflowReq{OrderId: id}, time.Second).Result()
		require.ErrorIs(t, err, actor.ErrDeadLetter, "the grain of %s no longer exists", id)
	}
	// ...and nothing else changed: no release, no relocation, no event.
	// api-a learns the gone record through its own lookup, a moment after
	// the member fenced itself.
	require.Eventually(t, func() bool { return a.member.Lookup.IsGone(wa.Member.ID()) }, 5*time.Second, 10*time.Millisecond, "api-a recorded it")
	for _, id := range ids {
		require.Equal(t, before[id], h.record(t, id), "record of %s", id)
		require.Equal(t, location.Ready, before[id].Status)
		require.Equal(t, streams[id], h.eventTypes(t, id), "stream of %s", id)
		require.ErrorIs(t, continueOrder(a.client, id), placement.ErrUnavailable, "order %s answers Unavailable", id)
	}
	for _, id := range ids {
		require.Zero(t, hostedOf{ws["workflow-b"].Member.Lookup}.hostedCountOf(id), "order %s was activated elsewhere", id)
	}

	// New orders still work, on the other member.
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err = a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	require.Equal(t, ws["workflow-b"].Member.ID(), h.record(t, req.OrderId).Owner)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
}

// A member whose Location Store stops answering cannot learn whether it
// was recorded gone; once its lease ran out it suspends: it serves
// nothing and keeps its grains, and it does not fence itself while its
// own process runs.
func TestLostLocationStoreForTheLeaseSuspendsTheMember(t *testing.T) {
	h := newHarness(t)
	// Every store of workflow-c on a Redis of its own (a process's stores
	// are one deployment), which the test stops: its Location Store with
	// them, while the harness' Redis keeps answering.
	locSrv := redistest.Start(t)
	stores, err := node.OpenStores(ctxT(t, 10*time.Second), node.RedisURLs{Default: locSrv.URL()}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(stores.Close)
	require.NoError(t, stores.Commerce.ApplySeed(ctxT(t, 10*time.Second), commerce.DemoSeed()))
	w, err := node.StartWorkflow(ctxT(t, 20*time.Second), node.WorkflowConfig{
		Cluster: cluster.Config{
			NodeName: "workflow-c", Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, Logger: h.logger("workflow-c"), FrameworkLogLevel: quietFramework,
		},
		Stores: stores, Logger: h.logger("workflow-c"),
	})
	require.NoError(t, err)
	t.Cleanup(w.Member.Crash)
	req := startReqOn(t, stores, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err = w.Client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	waitStatusOn(t, stores, req.OrderId, contracts.OrderStatus_Confirmed)
	require.EqualValues(t, 1, grainCount(w))

	const lease = time.Second
	fenced := make(chan error, 1)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go func() {
		fenced <- w.RunSelfFence(watchCtx, node.SelfFenceConfig{Lease: lease, Interval: 50 * time.Millisecond})
	}()
	lostAt := time.Now()
	require.NoError(t, locSrv.Stop())
	require.Eventually(t, w.Member.Lookup.Suspended, 10*time.Second, 10*time.Millisecond, "the member suspends")
	took := time.Since(lostAt)
	t.Logf("suspended %s after the Location Store went away (lease %s)", took.Round(time.Millisecond), lease)
	require.GreaterOrEqual(t, took, lease-100*time.Millisecond, "not before the lease ran out")
	select {
	case err := <-fenced:
		require.FailNow(t, "a member whose store stalled fenced itself", "%v", err)
	case <-time.After(2 * lease):
	}
	require.EqualValues(t, 1, grainCount(w), "the suspended member keeps its grain")
	require.False(t, w.Member.Lookup.Fenced())
	// Its grain runs no turn: a command reaching it answers
	// STORE_UNAVAILABLE at once.
	gs, err := w.Member.Lookup.Hosted()
	require.NoError(t, err)
	require.Len(t, gs, 1)
	res, err := w.Member.Cluster.ActorSystem.Root.RequestFuture(gs[0].PID, &contracts.ContinueOrderWorkflowReq{OrderId: req.OrderId}, 2*time.Second).Result()
	require.NoError(t, err)
	we, ok := res.(*contracts.WorkflowError)
	require.True(t, ok, "a suspended member's grain answers an error, not %T", res)
	require.Equal(t, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, we.GetReason())
	stopWatch()
	require.NoError(t, <-fenced)
}

// A member's gone record may be pruned while its process is paused
// (location.Redis.PruneMember drops its name first, then the record): on
// resuming, the self-fence read finds no gone record, and the name's
// absence must fence it instead. Here the name alone goes, as a prune
// caught between its two steps would leave it: the member fences itself,
// evicted and marked pruned, though no gone record names it.
func TestAMemberWhoseNameWasPrunedFencesItself(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	select {
	case <-w.Member.Lookup.NamePublished():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the member's name was never published")
	}
	fenced := make(chan error, 1)
	go func() {
		fenced <- w.RunSelfFence(ctxT(t, 30*time.Second), node.SelfFenceConfig{Interval: 20 * time.Millisecond})
	}()
	select {
	case err := <-fenced:
		require.FailNow(t, "fenced while its name stood", "%v", err)
	case <-time.After(300 * time.Millisecond):
	}
	c := h.redis.Client()
	defer c.Close()
	require.NoError(t, c.HDel(ctxT(t, 5*time.Second), location.DefaultKeyPrefix+"members", w.Member.ID()).Err())
	select {
	case err := <-fenced:
		require.ErrorIs(t, err, node.ErrSelfFenced)
		require.ErrorIs(t, err, placement.ErrEvicted)
		require.ErrorContains(t, err, "pruned")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the member did not fence itself once its name was gone")
	}
	_, gone, err := h.stores.Location.IsGone(ctxT(t, 5*time.Second), w.Member.ID())
	require.NoError(t, err)
	require.False(t, gone, "no gone record was needed")
}
