package commerce_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// RecordsByOrder finds every record naming an order, not only the one
// under its own id: a second reservation and a second payment under
// other ids are counted, an undecided reservation too, and a record
// naming no order is kept apart. On a Redis Cluster it reaches every
// master. A prefix with glob characters matches only itself.
func TestRecordsByOrderCountsEveryRecordNamingAnOrder(t *testing.T) {
	single := redistest.Start(t).Client()
	t.Cleanup(func() { _ = single.Close() })
	rc := redistest.StartCluster(t)
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
	}{{"server", single}, {"cluster", rc.Client}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s := newRedis(t, commerce.Config{Client: tc.client, KeyPrefix: "t*[1]:cs:"})
			// Same keys under a prefix the glob-escaped one must not match.
			other := newRedis(t, commerce.Config{Client: tc.client, KeyPrefix: "tx1:cs:"})
			for _, st := range []*commerce.Redis{s, other} {
				require.NoError(t, st.ApplySeed(ctx, commerce.Seed{
					Stock:   map[string]int64{"sku-a": 10, "sku-b": 10},
					Methods: []commerce.PaymentMethod{{MethodID: "pm-ok", Approve: true}, {MethodID: "pm-no", Approve: false, Reason: "declined"}},
				}))
			}
			reserve := func(st *commerce.Redis, id, order string, lines ...*contracts.OrderLine) {
				_, err := st.Inventory().Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: id, OrderId: order, Lines: lines})
				require.NoError(t, err)
			}
			authorize := func(id, order, method string, amount int64) {
				_, err := s.Payment().Authorize(ctx, &contracts.AuthorizePaymentReq{PaymentId: id, OrderId: order, PaymentMethodId: method, Amount: amount, Currency: "EUR"})
				require.NoError(t, err)
			}
			a2 := &contracts.OrderLine{Sku: "sku-a", Quantity: 2}
			b1 := &contracts.OrderLine{Sku: "sku-b", Quantity: 1}
			reserve(s, "rsv-o1", "o1", b1, a2)
			reserve(s, "rsv-o1", "o1", a2) // a repeat adds no record
			reserve(s, "rsv-again-o1", "o1", a2)
			authorize("pay-o1", "o1", "pm-ok", 1990)
			authorize("pay-again-o1", "o1", "pm-no", 1990)
			_, err := s.Inventory().Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "rsv-again-o1", OrderId: "o1", Reason: "x"})
			require.NoError(t, err)
			reserve(s, "rsv-o2", "o2", &contracts.OrderLine{Sku: "sku-a", Quantity: 50})
			_, err = s.Inventory().Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "rsv-none", OrderId: "o3", Reason: "x"})
			require.NoError(t, err)
			reserve(other, "rsv-o9", "o9", a2)

			got, err := s.RecordsByOrder(ctx)
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"o1", "o2", ""}, keys(got))

			o1 := got["o1"]
			require.Len(t, o1.Reservations, 2)
			first, again := o1.Reservations[1], o1.Reservations[0]
			require.Equal(t, "rsv-o1", first.ReservationID)
			require.True(t, first.Decided && first.Accepted && !first.Released)
			require.EqualValues(t, 2, first.ReserveCalls)
			require.Equal(t, []string{"sku-a:2", "sku-b:1"}, lineStrings(first.Lines))
			require.Equal(t, "rsv-again-o1", again.ReservationID)
			require.True(t, again.Accepted && again.Released)
			require.EqualValues(t, 1, again.ReleaseCalls)

			require.Len(t, o1.Payments, 2)
			require.Equal(t, commerce.ScannedPayment{PaymentID: "pay-again-o1", Decided: true, MethodID: "pm-no", Amount: 1990, Currency: "EUR", Calls: 1}, o1.Payments[0])
			require.Equal(t, commerce.ScannedPayment{PaymentID: "pay-o1", Decided: true, Accepted: true, MethodID: "pm-ok", Amount: 1990, Currency: "EUR", Calls: 1}, o1.Payments[1])

			o2 := got["o2"]
			require.Len(t, o2.Reservations, 1)
			require.True(t, o2.Reservations[0].Decided)
			require.False(t, o2.Reservations[0].Accepted)
			require.Empty(t, o2.Payments)

			require.Equal(t, []commerce.ScannedReservation{{ReservationID: "rsv-none", ReleaseCalls: 1}}, got[""].Reservations)
		})
	}
}

// An undecided reservation, cut after its first step, still names its
// order.
func TestRecordsByOrderListsAnUndecidedReservation(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	require.NoError(t, c.HSet(ctx, commerce.DefaultKeyPrefix+"reservation:{rsv-o1}", "orderId", "o1", "lines", `[{"sku":"sku-a","quantity":1}]`, "state", "holding", "reserveCalls", "1").Err())
	got, err := s.RecordsByOrder(ctx)
	require.NoError(t, err)
	require.Len(t, got["o1"].Reservations, 1)
	r := got["o1"].Reservations[0]
	require.Equal(t, "rsv-o1", r.ReservationID)
	require.False(t, r.Decided)
	require.Equal(t, []string{"sku-a:1"}, lineStrings(r.Lines))
	require.EqualValues(t, 1, r.ReserveCalls)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func lineStrings(ls []*contracts.OrderLine) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = fmt.Sprintf("%s:%d", l.GetSku(), l.GetQuantity())
	}
	return out
}
