package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

func TestWorkflowPathsEventOrderAndProjection(t *testing.T) {
	h := newHarness(t)
	wa, wb := h.startWorkflow("workflow-a"), h.startWorkflow("workflow-b")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)

	cases := []struct {
		name   string
		cart   string
		method string
		want   []string
		status contracts.OrderStatus
	}{
		{"success", commerce.DemoCartOK, commerce.DemoMethodOK, success, contracts.OrderStatus_Confirmed},
		{"inventory failure", commerce.DemoCartNoStock, commerce.DemoMethodOK, inventoryFailed, contracts.OrderStatus_Failed},
		{"payment failure", commerce.DemoCartOK, commerce.DemoMethodDeclined, paymentFailed, contracts.OrderStatus_Failed},
	}
	owners := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := h.startReq(t, tc.cart, tc.method)
			res, recorded, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
			require.NoError(t, err)
			require.True(t, recorded)
			require.Equal(t, contracts.OrderStatus_Created, res.GetState().GetStatus())
			st := h.waitStatus(t, req.OrderId, tc.status)
			require.Equal(t, tc.want, h.eventTypes(t, req.OrderId))
			if tc.status == contracts.OrderStatus_Confirmed {
				require.Equal(t, order.ReservationID(req.OrderId), st.GetReservationId())
				require.Equal(t, order.PaymentID(req.OrderId), st.GetPaymentId())
				require.Equal(t, req.Amount, st.GetAmount())
				require.Equal(t, req.Currency, st.GetCurrency())
			}
			ctx := ctxT(t, 5*time.Second)
			calls, err := h.stores.Commerce.Payment().AuthorizeCalls(ctx, order.PaymentID(req.OrderId))
			require.NoError(t, err)
			if tc.name == "inventory failure" {
				require.Zero(t, calls, "inventory failure must never call payment")
			} else {
				require.EqualValues(t, 1, calls)
			}
			rec, err := h.stores.Location.Get(ctx, grain.KindName, req.OrderId)
			require.NoError(t, err)
			owners[rec.Owner] = true
		})
	}
	// Three orders from one caller land round-robin: both members own some.
	require.Len(t, owners, 2, "placement should spread orders over both workflow members")
	_, _ = wa, wb
}

func TestStartDedupeRecordsOnce(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, first, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	_, again, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	require.True(t, first)
	require.False(t, again, "a repeated sourceCommandId must not record a second start")
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
	line := fmt.Sprintf("shoppingmall-order started order=%s spot=%s/%s", req.OrderId, grain.KindName, req.OrderId)
	require.Equal(t, 1, h.evidence("workflow-a").Count(line))
}

// 100 concurrent first calls from two members meet one activation.
func TestConcurrentFirstCallsOneActivation(t *testing.T) {
	h := newHarness(t)
	// Room in the grain's mailbox for every caller: beyond it the rest
	// would be answered OVERLOADED, by design (TestFullMailboxAnswersOverloadedAtOnce in
	// placement).
	roomy := withLimits(placement.Limits{MailboxCapacity: 128})
	wa, wb := h.startWorkflow("workflow-a", roomy), h.startWorkflow("workflow-b", roomy)
	a, b := h.startAPI("api-a"), h.startAPI("api-b")
	waitMembers(t, a.member.Lookup, 2)
	waitMembers(t, b.member.Lookup, 2)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)

	var wg sync.WaitGroup
	var mu sync.Mutex
	recorded, ids := 0, map[string]bool{}
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		c := a.client
		if i%2 == 1 {
			c = b.client
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, rec, err := c.StartOrderWorkflow(ctxT(t, 20*time.Second), req)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[res.GetState().GetOrderId()] = true
			if rec {
				recorded++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, recorded, "exactly one call records the start")
	require.Len(t, ids, 1)
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.EqualValues(t, 1, rec.Generation, "one activation means generation 1")
	hosted := 0
	for _, w := range []interface{ hostedCount() int }{hostedOf{wa.Member.Lookup}, hostedOf{wb.Member.Lookup}} {
		hosted += w.hostedCount()
	}
	require.Equal(t, 1, hosted, "exactly one grain is hosted across both members")
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
}

type hostedOf struct{ l *placement.Lookup }

func (h hostedOf) hostedCount() int {
	gs, _ := h.l.Hosted()
	n := 0
	for _, g := range gs {
		if g.Kind == grain.KindName {
			n++
		}
	}
	return n
}

func TestUnavailableAfterOwnerCrashNoFailover(t *testing.T) {
	h := newHarness(t)
	wa, wb := h.startWorkflow("workflow-a"), h.startWorkflow("workflow-b")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 2)

	// Place orders until one lands on workflow-a.
	var req *contracts.StartOrderWorkflowReq
	for i := 0; i < 10 && req == nil; i++ {
		r := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
		_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), r)
		require.NoError(t, err)
		h.waitStatus(t, r.OrderId, contracts.OrderStatus_Confirmed)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, r.OrderId)
		require.NoError(t, err)
		if rec.Owner == wa.Member.ID() {
			req = r
		}
	}
	require.NotNil(t, req, "no order landed on workflow-a")
	before, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)

	wa.Member.Crash()
	waitMembers(t, a.member.Lookup, 1)

	const requestTimeout = 10 * time.Second
	began := time.Now()
	_, err = a.client.ContinueOrderWorkflow(ctxT(t, requestTimeout), &contracts.ContinueOrderWorkflowReq{OrderId: req.OrderId, SourceCommandId: "c1"})
	took := time.Since(began)
	require.ErrorIs(t, err, placement.ErrUnavailable)
	require.Less(t, took, requestTimeout/10, "Unavailable must be fast, not a timeout")
	t.Logf("Unavailable after owner crash answered in %s", took)

	after, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, before, after, "the Location record is left untouched")
	require.Zero(t, hostedOf{wb.Member.Lookup}.hostedCountOf(req.OrderId), "nothing is activated elsewhere")

	// A new incarnation of workflow-a does not inherit the dead owner's grains.
	h.startWorkflow("workflow-a")
	waitMembers(t, a.member.Lookup, 2)
	_, err = a.client.RebuildOrderProjection(ctxT(t, requestTimeout), &contracts.RebuildOrderProjectionReq{OrderId: req.OrderId})
	require.ErrorIs(t, err, placement.ErrUnavailable)
	again, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, before, again)
}

func (h hostedOf) hostedCountOf(id string) int {
	gs, _ := h.l.Hosted()
	n := 0
	for _, g := range gs {
		if g.Identity == id {
			n++
		}
	}
	return n
}

func TestNotFoundHasNoSideEffects(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	ctx := ctxT(t, 10*time.Second)
	id := "ord-never-started"
	// The first request crosses a fresh remote connection; on a loaded
	// machine its activation may time out (Unavailable). It is repeated
	// until answered, and a timed-out attempt must leave no side effect
	// either: the checks below cover every attempt.
	err := answered(t, func() error {
		_, err := a.client.ContinueOrderWorkflow(ctx, &contracts.ContinueOrderWorkflowReq{OrderId: id})
		return err
	})
	require.ErrorIs(t, err, workflow.ErrNotFound)
	err = answered(t, func() error {
		_, err := a.client.RebuildOrderProjection(ctx, &contracts.RebuildOrderProjectionReq{OrderId: id})
		return err
	})
	require.ErrorIs(t, err, workflow.ErrNotFound)

	envs, err := h.stores.Events.Load(ctx, id)
	require.NoError(t, err)
	require.Empty(t, envs, "no stream, no OrderStartedEvent")
	_, _, err = h.stores.ReadModel.Get(ctx, id)
	require.Error(t, err, "no projection")
	require.Eventually(t, func() bool { return hostedOf{w.Member.Lookup}.hostedCountOf(id) == 0 }, 5*time.Second, 10*time.Millisecond, "no lasting activation")
	// The grain leaves the hosted index before its stop releases the
	// record, so the release is waited for (seen once in CI: still Ready
	// right after the index emptied).
	var rec location.Record
	require.Eventually(t, func() bool {
		rec, err = h.stores.Location.Get(ctx, grain.KindName, id)
		return err == nil && rec.Status == location.Missing
	}, 5*time.Second, 10*time.Millisecond, "the activation's record released")
	require.Zero(t, rec.Generation, "no generation used up")
}

func TestCloseThenNewGenerationSameState(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	confirmed := h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)

	res, err := a.client.CloseOrder(ctxT(t, 10*time.Second), &contracts.CloseOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Generation)
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Missing, rec.Status)
	require.EqualValues(t, 1, rec.Generation, "the generation counter is kept")

	c, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: req.OrderId})
	require.NoError(t, err)
	require.Equal(t, confirmed.GetStatus(), c.GetState().GetStatus())
	require.Equal(t, confirmed.GetPaymentId(), c.GetState().GetPaymentId())
	rec, err = h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	require.EqualValues(t, 2, rec.Generation)
	require.Equal(t, success, h.eventTypes(t, req.OrderId))
	require.Zero(t, h.evidence("workflow-a").Count("shoppingmall-order replayed order="+req.OrderId+" generation=2"),
		"a cold activation after close is no relocation")
}

func TestIdlePassivationReleasesAuthority(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a", withIdle(300*time.Millisecond))
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	require.Eventually(t, func() bool {
		rec, err := h.stores.Location.Get(context.Background(), grain.KindName, req.OrderId)
		return err == nil && rec.Status == location.Missing && rec.Generation == 1
	}, 10*time.Second, 10*time.Millisecond, "idle grain releases its authority and keeps the generation")
	c, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: req.OrderId})
	require.NoError(t, err)
	require.Equal(t, contracts.OrderStatus_Confirmed, c.GetState().GetStatus())
	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.EqualValues(t, 2, rec.Generation)
}

// A writer whose token is stale gets none of its appends accepted.
func TestStaleWriterIsFenced(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t, 10*time.Second)
	id := "ord-fence"
	fence1, _, err := h.stores.Events.Open(ctx, id, 1)
	require.NoError(t, err)
	started := eventstore.Envelope{EventID: "e1", OrderID: id, EventType: "OrderStartedEvent", SourceCommandID: "s1", CreatedAtUnixMs: 1, Data: []byte("{}")}
	_, err = h.stores.Events.Append(ctx, id, 0, fence1, []eventstore.Envelope{started})
	require.NoError(t, err)
	// A relocation target (same generation) and a later cold activation
	// each raise the fence.
	fence2, _, err := h.stores.Events.Open(ctx, id, 1)
	require.NoError(t, err)
	require.True(t, fence1.Less(fence2))
	accepted := 0
	for i := 0; i < 20; i++ {
		_, err := h.stores.Events.Append(ctx, id, 1, fence1, []eventstore.Envelope{{EventID: fmt.Sprint("z", i), OrderID: id, EventType: "X", CreatedAtUnixMs: 2, Data: []byte("{}")}})
		if err == nil {
			accepted++
		}
		require.True(t, errors.Is(err, eventstore.ErrFenced), "stale append must be fenced, got %v", err)
	}
	require.Zero(t, accepted)
	envs, err := h.stores.Events.Load(ctx, id)
	require.NoError(t, err)
	require.Len(t, envs, 1)
}
