package commercetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The records read by id (commerce.ReservationRecords and
// AuthorizationRecords): the first results, the call counts, and no side
// effect of reading.

func reservation(t *testing.T, inv commerce.Inventory, id string) commerce.ReservationRecord {
	t.Helper()
	rec, err := inv.Reservation(ctxT(t), id)
	require.NoError(t, err)
	require.Equal(t, id, rec.ReservationID)
	require.NotNil(t, rec.Reserve, "a found reservation has its Reserve result")
	return rec
}

func testInvRecords(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	_, err := inv.Reservation(ctx, "")
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
	_, err = inv.Reservation(ctx, "res-none")
	require.ErrorIs(t, err, commerce.ErrNotFound, "never reserved")

	// A release that comes before any reservation records no result.
	_, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-res-early", ReservationId: "res-early"})
	require.NoError(t, err)
	_, err = inv.Reservation(ctx, "res-early")
	require.ErrorIs(t, err, commerce.ErrNotFound, "a release alone records no reservation")

	require.NoError(t, inv.SetStock(ctx, "a", 5))
	_, err = inv.Reserve(ctx, reserveReq("res-ok", &contracts.OrderLine{Sku: "a", Quantity: 2}))
	require.NoError(t, err)
	rec := reservation(t, inv, "res-ok")
	require.True(t, rec.Reserve.GetAccepted())
	require.Nil(t, rec.Reserve.Reason, "an acceptance has no reason")
	require.Nil(t, rec.Release, "not released yet")
	require.EqualValues(t, 1, rec.ReserveCalls)
	require.Zero(t, rec.ReleaseCalls)

	// Reading has no side effect: no call counted, no stock moved.
	again := reservation(t, inv, "res-ok")
	require.Equal(t, rec.ReserveCalls, again.ReserveCalls)
	require.EqualValues(t, 1, reserveCalls(t, inv, "res-ok"))
	require.EqualValues(t, 3, stock(t, inv, "a"))

	// A repeat is counted and answered with the first result.
	_, err = inv.Reserve(ctx, reserveReq("res-ok", &contracts.OrderLine{Sku: "a", Quantity: 5}))
	require.NoError(t, err)
	rec = reservation(t, inv, "res-ok")
	require.True(t, rec.Reserve.GetAccepted())
	require.EqualValues(t, 2, rec.ReserveCalls)

	for range 2 {
		_, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-res-ok", ReservationId: "res-ok", Reason: "payment declined"})
		require.NoError(t, err)
	}
	rec = reservation(t, inv, "res-ok")
	require.NotNil(t, rec.Release, "released")
	require.True(t, rec.Release.GetReleased())
	require.Nil(t, rec.Release.Reason)
	require.EqualValues(t, 2, rec.ReleaseCalls)
	require.EqualValues(t, 5, stock(t, inv, "a"), "released once")

	// A rejection is recorded with its reason; it has nothing to release.
	_, err = inv.Reserve(ctx, reserveReq("res-no", &contracts.OrderLine{Sku: "a", Quantity: 99}))
	require.NoError(t, err)
	_, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-res-no", ReservationId: "res-no"})
	require.NoError(t, err)
	rec = reservation(t, inv, "res-no")
	require.False(t, rec.Reserve.GetAccepted())
	require.NotEmpty(t, rec.Reserve.GetReason())
	require.Nil(t, rec.Release, "a rejected reservation is never released")
	require.EqualValues(t, 1, rec.ReserveCalls)
	require.EqualValues(t, 1, rec.ReleaseCalls)
}

func testPayRecords(t *testing.T, pay commerce.Payment) {
	ctx := ctxT(t)
	_, err := pay.Authorization(ctx, "")
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
	_, err = pay.Authorization(ctx, "pay-none")
	require.ErrorIs(t, err, commerce.ErrNotFound)

	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Reason: "card declined"}))
	_, err = pay.Authorize(ctx, authReq("pay-ok", "pm-ok", 4870))
	require.NoError(t, err)
	_, err = pay.Authorize(ctx, authReq("pay-no", "pm-no", 4870))
	require.NoError(t, err)

	ok, err := pay.Authorization(ctx, "pay-ok")
	require.NoError(t, err)
	require.Equal(t, "pay-ok", ok.PaymentID)
	require.True(t, ok.Result.GetAccepted())
	require.Nil(t, ok.Result.Reason)
	require.EqualValues(t, 4870, ok.Captured)
	require.EqualValues(t, 1, ok.Calls)

	no, err := pay.Authorization(ctx, "pay-no")
	require.NoError(t, err)
	require.False(t, no.Result.GetAccepted())
	require.Equal(t, "card declined", no.Result.GetReason())
	require.Zero(t, no.Captured)

	// A repeat is counted and the record keeps the first result; reading
	// counts nothing.
	_, err = pay.Authorize(ctx, authReq("pay-ok", "pm-no", 1))
	require.NoError(t, err)
	ok, err = pay.Authorization(ctx, "pay-ok")
	require.NoError(t, err)
	require.True(t, ok.Result.GetAccepted())
	require.EqualValues(t, 4870, ok.Captured)
	require.EqualValues(t, 2, ok.Calls)
	require.EqualValues(t, 2, authorizeCalls(t, pay, "pay-ok"), "reading counts no call")
}
