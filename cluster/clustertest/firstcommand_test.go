package clustertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// holdCreation takes orderID's creation lock under lockToken, as the
// edge's key reservation does on one Redis server, and returns a context
// that tells the lookup it holds the lock under heldToken.
func (h *harness) holdCreation(t *testing.T, orderID, lockToken, heldToken string) context.Context {
	t.Helper()
	rdb := h.redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return h.takeCreation(ctxT(t, 30*time.Second), t, rdb, orderID, lockToken, heldToken)
}

// takeCreation is holdCreation on a client and context of the caller's.
func (h *harness) takeCreation(ctx context.Context, t testing.TB, rdb *redis.Client, orderID, lockToken, heldToken string) context.Context {
	t.Helper()
	lock, ok := h.stores.Locations.CreationFor(grain.KindName, orderID)
	require.True(t, ok, "commerce and the Location Store share one server")
	require.NoError(t, rdb.SetNX(ctx, lock.Lock, lockToken, time.Minute).Err())
	require.NoError(t, rdb.HSet(ctx, lock.Record, lock.StatusField, lock.Creating).Err())
	return placement.WithHeldCreation(placement.WithMintedIdentity(ctx, grain.KindName, orderID), grain.KindName, orderID, heldToken)
}

// A new order's start travels with its activation: the workflow member
// records the grain Ready under the lock the API holds, then delivers the
// start to it, and the API gets the grain's answer back. The API makes no
// Location round trip of its own, and caches the owner it learnt.
func TestMintedStartTravelsWithItsActivation(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	ctx := ctxT(t, 30*time.Second)
	apiReg := telemetry.NewRegistry()
	apiStores, err := node.OpenStores(ctx, node.RedisURLs{Default: h.redis.URL()}, node.StoreOptions{StoreHook: apiReg.RedisHook})
	require.NoError(t, err)
	t.Cleanup(apiStores.Close)
	a := h.startAPIOn("api-a", apiStores.Location)
	m, client := a.member, a.client
	waitMembers(t, m.Lookup, 1)
	apiLocation := func() float64 {
		v, err := telemetry.Sum(apiReg.Gatherer(), telemetry.MetricRedisRoundTrips, map[string]string{telemetry.LabelStore: node.StoreLocation})
		require.NoError(t, err)
		return v
	}

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	startCtx := h.holdCreation(t, req.OrderId, "held-by-the-edge", "held-by-the-edge")
	before := apiLocation()
	res, recorded, err := client.StartOrderWorkflow(startCtx, req)
	require.NoError(t, err)
	require.True(t, recorded, "this call recorded the start")
	require.Equal(t, req.OrderId, res.GetState().GetOrderId())
	require.Equal(t, before, apiLocation(), "the API made no Location round trip: the member recorded the grain Ready")

	rec, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, int64(1), rec.Generation)
	require.Equal(t, w.Member.Lookup.Self(), rec.Owner)
	cached, ok := m.Lookup.Cluster().PidCache.Get(req.OrderId, grain.KindName)
	require.True(t, ok, "the API caches the owner its start reached")
	require.Equal(t, rec.PIDID, cached.Id)
	require.Equal(t, rec.PIDAddress, cached.Address)

	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
	// A second command goes to the cached owner as any command does.
	_, recorded, err = client.StartOrderWorkflow(ctx, req)
	require.NoError(t, err)
	require.False(t, recorded, "the start was recorded once")
}

// The workflow member records a new order's grain Ready in the step that
// records the order's start: the member makes no Location round trip of
// its own for the start, and the Location Store holds what a separate
// commit leaves (the Ready record, the activation in the history, the
// owner's index entry, no lock).
func TestMintedStartRecordsReadyInTheStartsAppend(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t, 30*time.Second)
	wfReg := telemetry.NewRegistry()
	wfStores, err := node.OpenStores(ctx, node.RedisURLs{Default: h.redis.URL()}, node.StoreOptions{StoreHook: wfReg.RedisHook})
	require.NoError(t, err)
	t.Cleanup(wfStores.Close)
	w := h.startWorkflow("workflow-a", func(c *node.WorkflowConfig) { c.Stores = wfStores })
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	roundTrips := func(store string) float64 {
		v, err := telemetry.Sum(wfReg.Gatherer(), telemetry.MetricRedisRoundTrips, map[string]string{telemetry.LabelStore: store})
		require.NoError(t, err)
		return v
	}

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	startCtx := h.holdCreation(t, req.OrderId, "held-by-the-edge", "held-by-the-edge")
	locBefore := roundTrips(node.StoreLocation)
	_, recorded, err := a.client.StartOrderWorkflow(startCtx, req)
	require.NoError(t, err)
	require.True(t, recorded)
	require.Equal(t, locBefore, roundTrips(node.StoreLocation), "no Location round trip at the member: the start's append recorded the grain")

	rec, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, int64(1), rec.Generation)
	require.Equal(t, w.Member.Lookup.Self(), rec.Owner)
	hist, err := h.stores.Location.History(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Len(t, hist, 1)
	require.Equal(t, location.OwnershipActivated, hist[0].Kind)
	owned, err := h.stores.Location.Owned(ctx, w.Member.Lookup.Self(), grain.KindName)
	require.NoError(t, err)
	require.Contains(t, owned, req.OrderId, "the owner's index lists it, for a takeover")
	lock, ok := h.stores.Locations.CreationFor(grain.KindName, req.OrderId)
	require.True(t, ok)
	require.Zero(t, h.redis.Client().Exists(ctx, lock.Lock).Val(), "the creation lock is consumed")
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
}

// A minted start that fails before its append (here: invalid) writes
// nothing of its own. The grain, which owns nothing, leaves as it did
// when the member committed before the command: it records its
// activation first, so that its release gives the generation back and
// frees the creation, and no record names a grain that is gone.
func TestMintedStartRefusedBeforeItsAppendLeavesNothing(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	startCtx := h.holdCreation(t, req.OrderId, "held-by-the-edge", "held-by-the-edge")
	bad := proto.Clone(req).(*contracts.StartOrderWorkflowReq)
	bad.CartId = ""
	_, _, err := a.client.StartOrderWorkflow(startCtx, bad)
	require.Error(t, err)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)

	ctx := ctxT(t, 10*time.Second)
	require.Empty(t, h.eventTypes(t, req.OrderId), "nothing appended")
	lock, ok := h.stores.Locations.CreationFor(grain.KindName, req.OrderId)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		hist, err := h.stores.Location.History(ctx, grain.KindName, req.OrderId)
		return err == nil && len(hist) == 0 && h.redis.Client().Exists(ctx, lock.Lock, lock.Record).Val() == 0
	}, 10*time.Second, 10*time.Millisecond, "recorded, then given back: no lock, no record, no history left")
	// The valid start activates the order anew, at generation 1.
	_, recorded, err := a.client.StartOrderWorkflow(ctx, req)
	require.NoError(t, err)
	require.True(t, recorded)
	rec, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.Equal(t, int64(1), rec.Generation)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
}

// A start whose creation lock was lost before the member could record the
// grain Ready reaches no grain: the member stops the grain it opened, and
// nothing is appended, projected or recorded.
func TestMintedStartWithALostLockRunsNothing(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	// The lock is another creator's by now.
	startCtx := h.holdCreation(t, req.OrderId, "another-creator", "held-by-the-edge")
	_, _, err := a.client.StartOrderWorkflow(startCtx, req)
	require.ErrorIs(t, err, location.ErrLockLost)

	ctx := ctxT(t, 10*time.Second)
	require.Empty(t, h.eventTypes(t, req.OrderId), "nothing appended")
	_, _, err = h.stores.ReadModel.Get(ctx, req.OrderId)
	require.ErrorIs(t, err, readmodel.ErrNotFound, "nothing projected")
	rec, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Creating, rec.Status, "the other creator's attempt is untouched")
	require.Eventually(t, func() bool {
		hosted, err := w.Member.Lookup.Hosted()
		if err != nil {
			return false
		}
		for _, g := range hosted {
			if g.Identity == req.OrderId {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the grain that could not be recorded was stopped")
	_, cached := a.member.Lookup.Cluster().PidCache.Get(req.OrderId, grain.KindName)
	require.False(t, cached, "nothing cached for an owner that never was")
}

// slowKind's grain answers its first request only after longer than an
// activation may take, and counts its activations and requests.
const slowKind = "test.slow"

type slowGrain struct{ started, served *atomic.Int32 }

func (g slowGrain) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.started.Add(1)
	case *contracts.GetOrderStateReq:
		g.served.Add(1)
		time.Sleep(1500 * time.Millisecond) // past the lookup's 1 s activation timeout
		ctx.Respond(m)
	}
}

// A first command that takes longer than an activation may is waited for
// once its member recorded the grain Ready: the lookup does not take the
// slow answer for a frozen member and activate the identity elsewhere.
func TestSlowFirstCommandIsWaitedForNotRetriedElsewhere(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t, 30*time.Second)
	started, served := new(atomic.Int32), new(atomic.Int32)
	kind := func() *pcluster.Kind {
		return pcluster.NewKind(slowKind, actor.PropsFromProducer(func() actor.Actor { return slowGrain{started, served} }))
	}
	start := func(name string, kinds ...*pcluster.Kind) *cluster.Member {
		m, err := cluster.Start(ctx, cluster.Config{NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Kinds: kinds,
			Logger: h.logger(name), FrameworkLogLevel: quietFramework})
		require.NoError(t, err)
		t.Cleanup(m.Crash)
		return m
	}
	start("host-a", kind())
	start("host-b", kind())
	caller := start("caller")
	require.Eventually(t, func() bool { return len(caller.Lookup.Eligible(slowKind)) == 2 }, 10*time.Second, 10*time.Millisecond)

	const id = "slow-1"
	acquired, gen, _, err := h.stores.Location.BeginCreate(ctx, slowKind, id, "held", time.Minute)
	require.NoError(t, err)
	require.True(t, acquired)
	require.Equal(t, int64(1), gen)
	held := placement.WithHeldCreation(ctx, slowKind, id, "held")
	msg := &contracts.GetOrderStateReq{OrderId: id}
	t0 := time.Now()
	res, err := placement.NewContext(caller.Lookup).RequestContext(held, id, slowKind, msg)
	require.NoError(t, err)
	require.True(t, proto.Equal(msg, res.(proto.Message)), "the grain's own answer")
	require.Greater(t, time.Since(t0), time.Second, "answered after the activation timeout")
	require.Equal(t, int32(1), started.Load(), "activated on one member only")
	require.Equal(t, int32(1), served.Load(), "the command ran once")
	rec, err := h.stores.Location.Get(ctx, slowKind, id)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
}

// lostReplyStart is a Committer whose units land, but whose reply is
// lost for a start that carries a Ready commit, and with it the Location
// Store (down): the one Redis went away right after running the script.
type lostReplyStart struct {
	readmodel.Committer
	down *atomic.Bool
}

func (s lostReplyStart) Commit(ctx context.Context, u *eventstore.Unit, state *contracts.OrderState) (eventstore.Outcome, error) {
	out, err := s.Committer.Commit(ctx, u, state)
	if err != nil || !carriesReady(u) {
		return out, err
	}
	s.down.Store(true)
	return eventstore.Outcome{}, fmt.Errorf("%w: connection reset after the script ran", eventstore.ErrUnavailable)
}

// carriesReady tells a unit that carries an activation's Ready commit,
// whose writes begin with the creation lock's check.
func carriesReady(u *eventstore.Unit) bool {
	for _, c := range u.Writes {
		if c.Op == eventstore.Require {
			return true
		}
	}
	return false
}

// downLocation is a Location Store whose record reads and commits fail
// while down is set; refused counts the commits it failed.
type downLocation struct {
	*location.Redis
	down    *atomic.Bool
	refused *atomic.Int32
}

func (l downLocation) Get(ctx context.Context, kind, id string) (location.Record, error) {
	if l.down.Load() {
		return location.Record{}, fmt.Errorf("%w: down", location.ErrStoreUnavailable)
	}
	return l.Redis.Get(ctx, kind, id)
}

func (l downLocation) CommitReady(ctx context.Context, kind, id, token string, rec location.Record) error {
	if l.down.Load() {
		l.refused.Add(1)
		return fmt.Errorf("%w: down", location.ErrStoreUnavailable)
	}
	return l.Redis.CommitReady(ctx, kind, id, token, rec)
}

// A minted start whose append recorded the order and its grain Ready,
// but whose reply was lost along with the store, fails for its caller;
// the member cannot settle the Ready commit either. The grain, which may
// be the order's recorded owner, stays, and writes nothing more until the
// commit is settled: once the store answers, it finds itself recorded
// and drives the order to its end with no further command. Stopped, it
// would leave a recorded, started order that nobody drives, and the
// caller's retry would only find the order started.
func TestMintedStartInDoubtKeepsItsGrain(t *testing.T) {
	h := newHarness(t)
	var down atomic.Bool
	var refused atomic.Int32
	loc, ok := h.stores.Location.(*location.Redis)
	require.True(t, ok)
	stores := *h.stores
	stores.Commits = lostReplyStart{Committer: h.stores.Commits, down: &down}
	stores.Location = downLocation{Redis: loc, down: &down, refused: &refused}
	h.startWorkflow("workflow-a", func(c *node.WorkflowConfig) { c.Stores = &stores })
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	startCtx := h.holdCreation(t, req.OrderId, "held-by-the-edge", "held-by-the-edge")
	_, _, err := a.client.StartOrderWorkflow(startCtx, req)
	require.Error(t, err, "the start's reply was lost")
	require.Equal(t, []string{"OrderStartedEvent"}, h.eventTypes(t, req.OrderId), "yet it landed")
	require.Eventually(t, func() bool { return refused.Load() >= 3 }, 10*time.Second, 5*time.Millisecond,
		"the grain keeps trying to settle its commit")
	require.Equal(t, []string{"OrderStartedEvent"}, h.eventTypes(t, req.OrderId), "and writes nothing before it is settled")

	down.Store(false)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
}

// retriedStart runs a start's unit twice, as go-redis does when the
// first attempt's reply timed out although Redis ran it (a frozen store
// that wakes up): the first lands, the second is refused by the creation
// lock the first consumed, and the grain is told only the second.
type retriedStart struct {
	readmodel.Committer
	refusals *atomic.Int32
}

func (s retriedStart) Commit(ctx context.Context, u *eventstore.Unit, state *contracts.OrderState) (eventstore.Outcome, error) {
	out, err := s.Committer.Commit(ctx, u, state)
	if err != nil || !carriesReady(u) {
		return out, err
	}
	out, err = s.Committer.Commit(ctx, u, state)
	if err != nil {
		s.refusals.Add(1)
	}
	return out, err
}

// A start whose carried Ready commit landed but whose answer was the
// lock check of a retried attempt is not taken for a lost activation: the
// grain settles the commit against the record, which names it, and
// drives the order to its end by itself; the start's retry with the same
// request answers the order, and nothing is INTERNAL.
func TestMintedStartLandedButRetriedIsDrivenToTheEnd(t *testing.T) {
	h := newHarness(t)
	var refusals atomic.Int32
	stores := *h.stores
	stores.Commits = retriedStart{Committer: h.stores.Commits, refusals: &refusals}
	h.startWorkflow("workflow-a", func(c *node.WorkflowConfig) { c.Stores = &stores })
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	startCtx := h.holdCreation(t, req.OrderId, "held-by-the-edge", "held-by-the-edge")
	_, _, err := a.client.StartOrderWorkflow(startCtx, req)
	require.EqualValues(t, 1, refusals.Load(), "the retried attempt was refused by the lock")
	if err != nil {
		require.NotEqual(t, errkind.Internal, errkind.Of(err), "the refused retry is no internal error: %v", err)
		t.Logf("the start answered: %v", err)
	}
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))

	res, recorded, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err, "the start's retry answers the order")
	require.False(t, recorded)
	require.Equal(t, contracts.OrderStatus_Confirmed, res.GetState().GetStatus())
}
