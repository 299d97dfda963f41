package commerce_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// A compacted reservation keeps its first result alone: its holds go, a
// late Reserve answers the first result, a late Release of one never
// released answers "not released" and gives nothing back, one released
// answers released; the stock and its ledger do not move. Compacting
// twice changes nothing; an undecided reservation is refused, one never
// made leaves nothing behind.
func TestACompactedReservationAnswersItsFirstResult(t *testing.T) {
	s, c := newStore(t)
	ctx := t.Context()
	inv := s.Inventory()
	seedStock(t, s, map[string]int64{"a": 5, "b": 5})
	req := func(id string, lines ...*contracts.OrderLine) *contracts.ReserveInventoryReq {
		return &contracts.ReserveInventoryReq{ReservationId: id, OrderId: "o-" + id, Lines: lines}
	}
	two := []*contracts.OrderLine{{Sku: "a", Quantity: 2}, {Sku: "b", Quantity: 1}}

	res, err := inv.Reserve(ctx, req("kept", two...))
	require.NoError(t, err)
	require.True(t, res.GetAccepted())
	res, err = inv.Reserve(ctx, req("back", two...))
	require.NoError(t, err)
	require.True(t, res.GetAccepted())
	rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "back", OrderId: "o-back"})
	require.NoError(t, err)
	require.True(t, rel.GetReleased())
	res, err = inv.Reserve(ctx, req("short", &contracts.OrderLine{Sku: "a", Quantity: 50}))
	require.NoError(t, err)
	require.False(t, res.GetAccepted())

	for _, id := range []string{"kept", "back", "short", "kept", "never"} {
		require.NoError(t, s.CompactReservation(ctx, id), id)
	}
	holds, err := c.Keys(ctx, "*hold*").Result()
	require.NoError(t, err)
	require.Empty(t, holds, "every hold is gone")
	require.Zero(t, c.Exists(ctx, commerce.DefaultKeyPrefix+"reservation:{never}").Val(), "nothing made for a reservation never made")
	fields, err := c.HKeys(ctx, commerce.DefaultKeyPrefix+"reservation:{kept}").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"accepted", "archived"}, fields, "an empty reason is dropped too")
	for _, id := range []string{"kept", "back", "short"} {
		rec, err := inv.Reservation(ctx, id)
		require.NoError(t, err, "%s: a compacted record reads as before (an archived order's timeline)", id)
		require.Equal(t, id != "short", rec.Reserve.GetAccepted(), id)
		require.Equal(t, id == "back", rec.Release != nil, id)
	}

	stockA, stockB := stockOf(t, s, "a"), stockOf(t, s, "b")
	res, err = inv.Reserve(ctx, req("kept", &contracts.OrderLine{Sku: "a", Quantity: 1}))
	require.NoError(t, err)
	require.True(t, res.GetAccepted(), "a late Reserve gets the first result")
	rel, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "kept", OrderId: "o-kept"})
	require.NoError(t, err)
	require.False(t, rel.GetReleased(), "a late Release of a kept reservation gives nothing back")
	require.Equal(t, commerce.ReasonReservationArchived, rel.GetReason())
	rel, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "back", OrderId: "o-back"})
	require.NoError(t, err)
	require.True(t, rel.GetReleased(), "a released one answers released")
	res, err = inv.Reserve(ctx, req("short", &contracts.OrderLine{Sku: "a", Quantity: 1}))
	require.NoError(t, err)
	require.False(t, res.GetAccepted(), "a refused one stays refused")
	require.Equal(t, stockA, stockOf(t, s, "a"))
	require.Equal(t, stockB, stockOf(t, s, "b"))
	for _, sku := range []string{"a", "b"} {
		a, err := s.Ledger().Audit(ctx, sku)
		require.NoError(t, err)
		require.True(t, a.Consistent(), "%s: %+v", sku, a)
	}

	// Undecided: the begin step alone recorded the lines.
	commerce.SetStepHook(s, func(step string) error {
		if step == "begin" {
			return errCrash
		}
		return nil
	})
	_, err = inv.Reserve(ctx, req("half", two...))
	require.ErrorIs(t, err, errCrash)
	commerce.SetStepHook(s, nil)
	require.ErrorIs(t, s.CompactReservation(ctx, "half"), commerce.ErrNotDecided)
	res, err = inv.Reserve(ctx, req("half", two...))
	require.NoError(t, err, "the protocol finishes what it began")
	require.True(t, res.GetAccepted())
}

// A compacted payment keeps its first result alone, and a late
// Authorize still gets it.
func TestACompactedPaymentAnswersItsFirstResult(t *testing.T) {
	s, c := newStore(t)
	ctx := t.Context()
	pay := s.Payment()
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "ok", Approve: true}))
	authorize := func() *contracts.AuthorizePaymentRes {
		res, err := pay.Authorize(ctx, &contracts.AuthorizePaymentReq{OrderId: "o", PaymentId: "p", PaymentMethodId: "ok", Amount: 5, Currency: "EUR"})
		require.NoError(t, err)
		return res
	}
	require.True(t, authorize().GetAccepted())
	require.NoError(t, s.CompactPayment(ctx, "p"))
	require.NoError(t, s.CompactPayment(ctx, "p"))
	require.NoError(t, s.CompactPayment(ctx, "never"))
	require.Zero(t, c.Exists(ctx, commerce.DefaultKeyPrefix+"payment:{never}").Val())
	fields, err := c.HKeys(ctx, commerce.DefaultKeyPrefix+"payment:{p}").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"accepted", "amount"}, fields)
	rec, err := pay.Authorization(ctx, "p")
	require.NoError(t, err, "a compacted record reads as before (an archived order's timeline)")
	require.True(t, rec.Result.GetAccepted())
	require.EqualValues(t, 5, rec.Captured)
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "ok"}))
	require.True(t, authorize().GetAccepted(), "the first result, whatever the seed says now")
}
