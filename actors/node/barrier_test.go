package node

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// TestARetryAfterAShortfallPassesTheBarrier: with one replica required,
// a write that fell short (the replica stopped: a rebuilt projection) is
// in doubt, and the client's retry (continue) finds the order Confirmed
// with that projection current and writes nothing. Without the
// replication barrier that retry acknowledges a state no replica holds;
// with it the retry answers STORE_UNAVAILABLE until the replica holds
// it, and then acknowledges it. Without replication no barrier is handed
// out.
func TestARetryAfterAShortfallPassesTheBarrier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := startHA(ctx, t, false)
	st, err := OpenStores(ctx, RedisURLs{Default: h.primary.URL()}, StoreOptions{
		Replication: redisurl.Replication{Replicas: 1, Timeout: 300 * time.Millisecond},
	})
	require.NoError(t, err)
	defer st.Close()
	require.NotNil(t, st.Barrier, "writes wait for a replica: the barrier is handed out")
	require.NoError(t, st.Commerce.ApplySeed(ctx, commerce.DemoSeed()))
	cart, err := st.Commerce.Carts().GetCart(ctx, commerce.DemoCartOK)
	require.NoError(t, err)

	service := func(barrier eventstore.Barrier) *workflow.Service {
		s, err := workflow.New(workflow.Config{
			Kind: "order", Events: st.Events, ReadModel: st.ReadModel, Idempotency: st.Commerce.Idempotency(),
			Inventory: st.Commerce.Inventory(), Payment: st.Commerce.Payment(), Envelopes: Envelopes{Store: st.Relocation},
			Commits: st.Commits, Barrier: barrier,
			Now: func() int64 { return 1_000 },
		})
		require.NoError(t, err)
		return s
	}
	guarded, unguarded := service(st.Barrier), service(nil)
	const key = "k-barrier"
	id := order.OrderIDFor([]byte("test-secret"), key)
	req := &contracts.StartOrderWorkflowReq{
		OrderId: id, CartId: cart.CartID, ShippingAddressId: "addr-1", PaymentMethodId: commerce.DemoMethodOK,
		IdempotencyKey: key, SourceCommandId: order.StartSourceCommandID(key),
		Lines: cart.Lines, Amount: cart.Amount, Currency: cart.Currency,
	}
	_, _, err = st.Commerce.Idempotency().Reserve(ctx, key, commerce.Mapping{OrderID: id, Status: commerce.MappingPending,
		Fingerprint: commerce.Fingerprint(req.CartId, req.ShippingAddressId, req.PaymentMethodId)})
	require.NoError(t, err, "reserved while the replica runs")

	// One owner's Order throughout, as its grain keeps it between
	// attempts: opening anew writes the fence, which would fall short
	// by itself. The order runs with the replica up to its last step.
	o, err := guarded.OpenFresh(id, 1)
	require.NoError(t, err)
	_, recorded, err := guarded.Start(ctx, o, req)
	require.NoError(t, err)
	require.True(t, recorded)
	for !o.State().Status.Terminal() {
		progressed, err := guarded.Step(ctx, o)
		require.NoError(t, err)
		require.True(t, progressed, "stuck at %s", o.State().Status)
	}
	require.Equal(t, order.StatusConfirmed, o.State().Status)
	// The projection is lost (deleted on the primary and the replica), so
	// rebuilding it writes.
	admin := h.primary.Client()
	defer admin.Close()
	require.NoError(t, admin.Del(ctx, readmodel.DefaultKeyPrefix+"{"+id+"}").Err())

	require.NoError(t, syscall.Kill(h.replica.PID(), syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(h.replica.PID(), syscall.SIGCONT)
		}
	}()
	_, err = guarded.Rebuild(ctx, o)
	require.ErrorIs(t, err, redisurl.ErrReplicationShortfall, "the rebuilt projection falls short")
	require.ErrorIs(t, err, errkind.StoreUnavailable, "answered 503 STORE_UNAVAILABLE, in doubt")

	// The hole the barrier closes: the client's continue finds the order
	// terminal with its projection current on the primary, writes
	// nothing, and is acknowledged at once, though no replica holds that
	// projection.
	state, err := unguarded.Continue(ctx, o)
	require.NoError(t, err, "without the barrier the retry acknowledges what no replica holds")
	require.Equal(t, contracts.OrderStatus_Confirmed, state.GetStatus())

	_, err = guarded.Continue(ctx, o)
	require.ErrorIs(t, err, redisurl.ErrReplicationShortfall, "a continue with nothing to write passes the barrier first")
	require.ErrorIs(t, err, errkind.StoreUnavailable)

	require.NoError(t, syscall.Kill(h.replica.PID(), syscall.SIGCONT))
	stopped = false
	require.Eventually(t, func() bool {
		state, err := guarded.Continue(ctx, o)
		return err == nil && state.GetStatus() == contracts.OrderStatus_Confirmed
	}, 20*time.Second, 100*time.Millisecond, "once the replica runs again the retry is acknowledged")
	rc := h.replica.Client()
	defer rc.Close()
	n, err := rc.Exists(ctx, readmodel.DefaultKeyPrefix+"{"+id+"}").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "acknowledged means on the replica")

	plain, err := NewStores(RedisURLs{Default: h.primary.URL()}, StoreOptions{})
	require.NoError(t, err)
	defer plain.Close()
	require.Nil(t, plain.Barrier, "without replication nothing is added")
}
