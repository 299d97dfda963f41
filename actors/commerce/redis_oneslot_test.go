package commerce_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// On a single server a reservation is one script: one round trip, the
// same outcome as the stepped protocol, and a refused one never holds a
// line, so its ledger has the short line's refuse movement alone.
func TestReserve_OneScriptOnASingleServer(t *testing.T) {
	c, cmds := countedClient(t)
	for i, tc := range crashCases {
		t.Run(tc.name, func(t *testing.T) {
			s := newRedis(t, commerce.Config{Client: c, KeyPrefix: "one" + string(rune('a'+i)) + ":"})
			seedStock(t, s, tc.stock)
			before := cmds.Load()
			res, err := s.Inventory().Reserve(t.Context(), crashReq(tc.lines))
			require.NoError(t, err)
			require.EqualValues(t, 1, cmds.Load()-before, "one round trip")

			want := tc
			if !tc.accepted {
				// Only the short line leaves a movement.
				want.kinds = map[string][]string{}
				for sku, kinds := range tc.kinds {
					if len(kinds) > 0 && kinds[len(kinds)-1] == commerce.MovementRefuse {
						want.kinds[sku] = []string{commerce.MovementRefuse}
					}
				}
			}
			requireCrashResult(t, s, want, res)

			// A repeat answers the first result, in one round trip too.
			before = cmds.Load()
			again, err := s.Inventory().Reserve(t.Context(), crashReq([]*contracts.OrderLine{{Sku: "a", Quantity: 1}}))
			require.NoError(t, err)
			require.EqualValues(t, 1, cmds.Load()-before)
			require.Equal(t, res.GetAccepted(), again.GetAccepted())
			require.Equal(t, res.GetReason(), again.GetReason())
			calls, err := s.Inventory().ReserveCalls(t.Context(), "res-x")
			require.NoError(t, err)
			require.EqualValues(t, 2, calls)
		})
	}
}

// On a single server Authorize reads the method's seed inside its script:
// one round trip, with the stepped path's decisions.
func TestAuthorize_OneScriptOnASingleServer(t *testing.T) {
	c, cmds := countedClient(t)
	s := newRedis(t, commerce.Config{Client: c})
	pay := s.Payment()
	ctx := t.Context()
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "ok", Approve: true}))
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "no"}))
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "why", Reason: "card expired"}))
	require.NoError(t, c.HSet(ctx, commerce.DefaultKeyPrefix+"paymethod:{bad}", "approve", "maybe").Err())
	for _, tc := range []struct {
		method   string
		accepted bool
		reason   string
	}{
		{"ok", true, ""},
		{"no", false, commerce.ReasonPaymentDeclined},
		{"why", false, "card expired"},
		{"missing", false, commerce.ReasonUnknownPaymentMethod},
	} {
		before := cmds.Load()
		res, err := pay.Authorize(ctx, &contracts.AuthorizePaymentReq{
			OrderId: "o-" + tc.method, PaymentId: "p-" + tc.method, PaymentMethodId: tc.method, Amount: 5, Currency: "EUR"})
		require.NoError(t, err, tc.method)
		require.EqualValues(t, 1, cmds.Load()-before, "%s: one round trip", tc.method)
		require.Equal(t, tc.accepted, res.GetAccepted(), tc.method)
		require.Equal(t, tc.reason, res.GetReason(), tc.method)
	}
	_, err := pay.Authorize(ctx, &contracts.AuthorizePaymentReq{
		OrderId: "o-bad", PaymentId: "p-bad", PaymentMethodId: "bad", Amount: 5, Currency: "EUR"})
	require.ErrorIs(t, err, commerce.ErrCorrupt)
}

// countedClient is a client of a private redis-server and the count of
// its round trips.
func countedClient(t *testing.T) (*redis.Client, *atomic.Int64) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	cmds := &atomic.Int64{}
	c.AddHook(countHook{n: cmds})
	return c, cmds
}

// countHook counts the round trips a client makes, except the EVALSHA
// that finds its script not loaded yet (go-redis then sends EVAL): that
// happens once per script and server.
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
			h.n.Add(1)
		}
		return err
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}
