package clustertest

import (
	"sync"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
)

// stopNotices counts the ActivationTerminated notices a member's event
// stream carried, by identity.
type stopNotices struct {
	mu   sync.Mutex
	seen map[string]int
}

func watchStopNotices(t *testing.T, a *api) *stopNotices {
	t.Helper()
	n := &stopNotices{seen: map[string]int{}}
	es := a.member.Lookup.Cluster().ActorSystem.EventStream
	sub := es.Subscribe(func(ev any) {
		if e, ok := ev.(*pcluster.ActivationTerminated); ok && e.ClusterIdentity != nil {
			n.mu.Lock()
			n.seen[e.ClusterIdentity.Identity]++
			n.mu.Unlock()
		}
	})
	t.Cleanup(func() { es.Unsubscribe(sub) })
	return n
}

func (n *stopNotices) of(id string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.seen[id]
}

// A grain's stop is announced to the members that asked for it, not to
// every member: an API that never called an order learns nothing of its
// passivation, so a passivation costs the same whatever the number of
// APIs. A member that read the grain's pid from its Location record is
// not told either, and its next call still reaches the order: the dead
// letter of the stopped pid makes it resolve the order again.
func TestAStopIsAnnouncedOnlyToTheMembersThatAskedForTheGrain(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a", withIdle(300*time.Millisecond))
	a, b := h.startAPI("api-a"), h.startAPI("api-b")
	waitMembers(t, a.member.Lookup, 1)
	waitMembers(t, b.member.Lookup, 1)
	noticesA, noticesB := watchStopNotices(t, a), watchStopNotices(t, b)

	// startPassivated starts an order through c and waits until c was
	// told that its grain stopped (it passivates once idle).
	startPassivated := func(c *api, notices *stopNotices) string {
		req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
		_, _, err := c.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
		require.NoError(t, err)
		h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
		require.Eventually(t, func() bool { return notices.of(req.OrderId) > 0 }, 10*time.Second, 10*time.Millisecond,
			"the member that started %s is told that its grain stopped", req.OrderId)
		_, cached := c.member.Lookup.Cluster().PidCache.Get(req.OrderId, grain.KindName)
		require.False(t, cached, "the notice drops the stopped grain's pid from the starter's cache")
		return req.OrderId
	}
	// The workflow member sends its notices to one member in order, so
	// once b has the second order's, it would have had the first's.
	first := startPassivated(a, noticesA)
	second := startPassivated(b, noticesB)
	require.Zero(t, noticesB.of(first), "api-b never asked for %s and is not told of its stop", first)
	third := startPassivated(a, noticesA)
	require.Zero(t, noticesA.of(second), "api-a never asked for %s and is not told of its stop", second)

	// b reads third's pid from its Location record (a asked for the
	// grain), so b is not told when it stops again...
	cont := &contracts.ContinueOrderWorkflowReq{OrderId: third}
	told := noticesA.of(third)
	_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), cont)
	require.NoError(t, err)
	res, err := b.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), cont)
	require.NoError(t, err)
	require.Equal(t, contracts.OrderStatus_Confirmed, res.GetState().GetStatus())
	stale, cached := b.member.Lookup.Cluster().PidCache.Get(third, grain.KindName)
	require.True(t, cached, "b resolved the running grain through its record")
	require.Eventually(t, func() bool { return noticesA.of(third) > told }, 10*time.Second, 10*time.Millisecond,
		"the grain passivates again and a, which asked for it, is told")
	require.Zero(t, noticesB.of(third), "b only read the record and is not told")
	still, cached := b.member.Lookup.Cluster().PidCache.Get(third, grain.KindName)
	require.True(t, cached && still.Equal(stale), "b still holds the stopped grain's pid")

	// ...and its next call reaches the order all the same.
	res, err = b.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), cont)
	require.NoError(t, err)
	require.Equal(t, contracts.OrderStatus_Confirmed, res.GetState().GetStatus())
	now, cached := b.member.Lookup.Cluster().PidCache.Get(third, grain.KindName)
	require.True(t, cached)
	require.False(t, now.Equal(stale), "b resolved the order again, to a new grain")
}
