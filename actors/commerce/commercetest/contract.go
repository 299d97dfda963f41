// Package commercetest is the behavioural contract of the
// CommerceStateStore's interfaces (commerce.Idempotency, Carts, Inventory
// and Payment), runnable against any implementation: one winner per
// idempotency key, all-or-nothing stock moves, the first result per
// ReservationId and PaymentId under repeats and concurrency, call counts,
// the fixed reasons the modules answer with, and the records read back by
// id without side effects.
//
// It depends only on commerce, the contracts and testify; an
// implementation's own tests supply the stores.
package commercetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

type testCase[S any] struct {
	name string
	run  func(t *testing.T, s S)
}

func run[S any](t *testing.T, newStore func(t *testing.T) S, cases []testCase[S]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// parallel runs f n times at once and waits for all of them.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// ---- Idempotency ----

// RunIdempotencyContract runs the commerce.Idempotency contract as
// subtests; newStore is called once per subtest and must return an empty
// store. Every key's OrderId is orderOf(key), as the API derives one
// OrderId per key.
func RunIdempotencyContract(t *testing.T, newStore func(t *testing.T) commerce.Idempotency) {
	t.Helper()
	run(t, newStore, []testCase[commerce.Idempotency]{
		{"ConcurrentReserveHasExactlyOneWinner", testIdemOneWinner},
		{"MarkStarted", testIdemMarkStarted},
		{"ForgetOnlyThePendingMapping", testIdemForget},
	})
}

// orderOf stands for order.OrderIDFor: one OrderId per key.
func orderOf(key string) string { return "ord-" + key }

func testIdemOneWinner(t *testing.T, idem commerce.Idempotency) {
	ctx := ctxT(t)
	const n = 50
	type result struct {
		m       commerce.Mapping
		created bool
		err     error
	}
	results := make([]result, n)
	parallel(n, func(i int) {
		m, created, err := idem.Reserve(ctx, "key-1", commerce.Mapping{
			OrderID:     orderOf("key-1"),
			Status:      commerce.MappingStarted, // ignored: a new mapping starts pending
			Fingerprint: fmt.Sprintf("fp-%02d", i),
		})
		results[i] = result{m, created, err}
	})

	winners := 0
	winner := ""
	for i, r := range results {
		require.NoError(t, r.err, "reserver %d", i)
		if r.created {
			winners++
			winner = fmt.Sprintf("fp-%02d", i)
		}
	}
	require.Equal(t, 1, winners, "exactly one reserver creates the mapping")
	want := commerce.Mapping{OrderID: orderOf("key-1"), Status: commerce.MappingPending, Fingerprint: winner}
	for i, r := range results {
		require.Equal(t, want, r.m, "reserver %d sees the winner's mapping", i)
	}
	got, err := idem.Get(ctx, "key-1", orderOf("key-1"))
	require.NoError(t, err)
	require.Equal(t, want, got)
	_, err = idem.Get(ctx, "key-2", orderOf("key-2"))
	require.ErrorIs(t, err, commerce.ErrNotFound, "another key has no mapping")
	t.Logf("winner %s among %d reservers", winner, n)
}

func testIdemForget(t *testing.T, idem commerce.Idempotency) {
	ctx := ctxT(t)
	mine := commerce.Mapping{OrderID: orderOf("k"), Status: commerce.MappingPending, Fingerprint: "fp"}
	gone, err := idem.Forget(ctx, "k", mine)
	require.NoError(t, err)
	require.False(t, gone, "an unknown key")
	_, created, err := idem.Reserve(ctx, "k", mine)
	require.NoError(t, err)
	require.True(t, created)

	for _, other := range []commerce.Mapping{
		{OrderID: orderOf("k2"), Status: commerce.MappingPending, Fingerprint: "fp"},
		{OrderID: orderOf("k"), Status: commerce.MappingPending, Fingerprint: "other"},
	} {
		gone, err := idem.Forget(ctx, "k", other)
		require.NoError(t, err)
		require.False(t, gone, "another mapping than %+v", other)
	}
	gone, err = idem.Forget(ctx, "k", mine)
	require.NoError(t, err)
	require.True(t, gone)
	_, err = idem.Get(ctx, "k", orderOf("k"))
	require.ErrorIs(t, err, commerce.ErrNotFound, "forgotten")

	_, _, err = idem.Reserve(ctx, "k", mine)
	require.NoError(t, err)
	require.NoError(t, idem.MarkStarted(ctx, "k", orderOf("k")))
	gone, err = idem.Forget(ctx, "k", mine)
	require.NoError(t, err)
	require.False(t, gone, "a started mapping is never forgotten")
	m, err := idem.Get(ctx, "k", orderOf("k"))
	require.NoError(t, err)
	require.Equal(t, commerce.MappingStarted, m.Status)
}

func testIdemMarkStarted(t *testing.T, idem commerce.Idempotency) {
	ctx := ctxT(t)
	_, err := idem.Get(ctx, "k", orderOf("k"))
	require.ErrorIs(t, err, commerce.ErrNotFound)
	require.ErrorIs(t, idem.MarkStarted(ctx, "k", orderOf("k")), commerce.ErrNotFound, "unknown key")

	_, created, err := idem.Reserve(ctx, "k", commerce.Mapping{OrderID: orderOf("k"), Fingerprint: "fp"})
	require.NoError(t, err)
	require.True(t, created)

	require.ErrorIs(t, idem.MarkStarted(ctx, "k", orderOf("k2")), commerce.ErrNotFound, "key maps to another order")
	require.ErrorIs(t, idem.MarkStarted(ctx, "k2", orderOf("k")), commerce.ErrNotFound, "the order's mapping is another key's")
	m, err := idem.Get(ctx, "k", orderOf("k"))
	require.NoError(t, err)
	require.Equal(t, commerce.MappingPending, m.Status, "a refused MarkStarted changes nothing")

	require.NoError(t, idem.MarkStarted(ctx, "k", orderOf("k")))
	require.NoError(t, idem.MarkStarted(ctx, "k", orderOf("k")), "idempotent")
	started := commerce.Mapping{OrderID: orderOf("k"), Status: commerce.MappingStarted, Fingerprint: "fp"}
	m, err = idem.Get(ctx, "k", orderOf("k"))
	require.NoError(t, err)
	require.Equal(t, started, m)

	m, created, err = idem.Reserve(ctx, "k", commerce.Mapping{OrderID: orderOf("k"), Fingerprint: "other"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, started, m, "a later reserve sees the started mapping, not its candidate")
}

// ---- Carts ----

// RunCartsContract runs the commerce.Carts contract as subtests; newStore
// is called once per subtest and must return an empty store.
func RunCartsContract(t *testing.T, newStore func(t *testing.T) commerce.Carts) {
	t.Helper()
	run(t, newStore, []testCase[commerce.Carts]{
		{"RoundTripReplaceAndNotFound", testCartsRoundTrip},
	})
}

func testCartsRoundTrip(t *testing.T, carts commerce.Carts) {
	ctx := ctxT(t)
	_, err := carts.GetCart(ctx, "cart-1")
	require.ErrorIs(t, err, commerce.ErrNotFound)

	in := commerce.Cart{
		CartID:   "cart-1",
		Lines:    []*contracts.OrderLine{{Sku: "a", Quantity: 2}, {Sku: "b", Quantity: 1}},
		Amount:   12900,
		Currency: "EUR",
	}
	require.NoError(t, carts.PutCart(ctx, in))
	out, err := carts.GetCart(ctx, "cart-1")
	require.NoError(t, err)
	requireCart(t, in, out)

	in.Amount = 100
	in.Lines = in.Lines[:1]
	require.NoError(t, carts.PutCart(ctx, in), "put replaces")
	out, err = carts.GetCart(ctx, "cart-1")
	require.NoError(t, err)
	requireCart(t, in, out)
}

func requireCart(t *testing.T, want, got commerce.Cart) {
	t.Helper()
	require.Equal(t, want.CartID, got.CartID)
	require.Equal(t, want.Amount, got.Amount)
	require.Equal(t, want.Currency, got.Currency)
	require.Len(t, got.Lines, len(want.Lines))
	for i := range want.Lines {
		require.Equal(t, want.Lines[i].GetSku(), got.Lines[i].GetSku())
		require.Equal(t, want.Lines[i].GetQuantity(), got.Lines[i].GetQuantity())
	}
}

// ---- Inventory ----

// RunInventoryContract runs the commerce.Inventory contract as subtests;
// newStore is called once per subtest and must return an inventory with
// no stock and no reservations.
func RunInventoryContract(t *testing.T, newStore func(t *testing.T) commerce.Inventory) {
	t.Helper()
	run(t, newStore, []testCase[commerce.Inventory]{
		{"ReserveMovesStockOnceUnderRepeats", testInvRepeats},
		{"ConcurrentFirstCallsReserveOnce", testInvConcurrentFirst},
		{"InsufficientStockRejectsAllOrNothing", testInvInsufficient},
		{"ReleaseReturnsStockOnce", testInvRelease},
		{"ReleaseUnknownDoesNotBlockLaterReservation", testInvReleaseUnknown},
		{"RefusedRequestsNeverReachTheModule", testInvValidation},
		{"RecordsReadByIDWithoutSideEffects", testInvRecords},
	})
}

func reserveReq(resID string, lines ...*contracts.OrderLine) *contracts.ReserveInventoryReq {
	return &contracts.ReserveInventoryReq{OrderId: "order-" + resID, ReservationId: resID, Lines: lines}
}

func stock(t *testing.T, inv commerce.Inventory, sku string) int64 {
	t.Helper()
	n, err := inv.Stock(ctxT(t), sku)
	require.NoError(t, err)
	return n
}

func reserveCalls(t *testing.T, inv commerce.Inventory, id string) int64 {
	t.Helper()
	n, err := inv.ReserveCalls(ctxT(t), id)
	require.NoError(t, err)
	return n
}

func releaseCalls(t *testing.T, inv commerce.Inventory, id string) int64 {
	t.Helper()
	n, err := inv.ReleaseCalls(ctxT(t), id)
	require.NoError(t, err)
	return n
}

func testInvRepeats(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	require.NoError(t, inv.SetStock(ctx, "b", 5))

	req := reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 3},
		&contracts.OrderLine{Sku: "b", Quantity: 2},
		&contracts.OrderLine{Sku: "a", Quantity: 1}) // same SKU twice: the total is taken
	first, err := inv.Reserve(ctx, req)
	require.NoError(t, err)
	require.True(t, first.GetAccepted())
	require.Nil(t, first.Reason)

	const repeats = 10
	results := make([]*contracts.ReserveInventoryRes, repeats)
	errs := make([]error, repeats)
	parallel(repeats, func(i int) { results[i], errs[i] = inv.Reserve(ctx, req) })
	for i := range repeats {
		require.NoError(t, errs[i])
		require.True(t, results[i].GetAccepted(), "repeat %d returns the first result", i)
		require.Nil(t, results[i].Reason)
	}
	require.EqualValues(t, 10-4, stock(t, inv, "a"), "stock of a moved exactly once")
	require.EqualValues(t, 5-2, stock(t, inv, "b"), "stock of b moved exactly once")
	require.EqualValues(t, repeats+1, reserveCalls(t, inv, "res-1"), "every call is counted, repeats included")
}

func testInvConcurrentFirst(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 100))
	req := reserveReq("res-1", &contracts.OrderLine{Sku: "a", Quantity: 7})
	const n = 10
	results := make([]*contracts.ReserveInventoryRes, n)
	errs := make([]error, n)
	parallel(n, func(i int) { results[i], errs[i] = inv.Reserve(ctx, req) })
	for i := range n {
		require.NoError(t, errs[i])
		require.True(t, results[i].GetAccepted())
	}
	require.EqualValues(t, 93, stock(t, inv, "a"))
	require.EqualValues(t, n, reserveCalls(t, inv, "res-1"))
}

func testInvInsufficient(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	require.NoError(t, inv.SetStock(ctx, "b", 1))
	require.NoError(t, inv.SetStock(ctx, "c", 3))

	req := reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 3},
		&contracts.OrderLine{Sku: "b", Quantity: 2})
	res, err := inv.Reserve(ctx, req)
	require.NoError(t, err)
	require.False(t, res.GetAccepted())
	require.Contains(t, res.GetReason(), "insufficient stock for b", "the reason names the SKU that lacks stock")
	require.EqualValues(t, 10, stock(t, inv, "a"), "a SKU with enough stock is not taken when another lacks it")
	require.EqualValues(t, 1, stock(t, inv, "b"))
	require.EqualValues(t, 0, stock(t, inv, "unknown"), "an unknown SKU has no stock")

	// Lines of one SKU are checked by their total.
	dup, err := inv.Reserve(ctx, reserveReq("res-dup",
		&contracts.OrderLine{Sku: "c", Quantity: 2},
		&contracts.OrderLine{Sku: "c", Quantity: 2}))
	require.NoError(t, err)
	require.False(t, dup.GetAccepted(), "4 of c asked for in two lines, 3 in stock")
	require.EqualValues(t, 3, stock(t, inv, "c"))

	// The first result stands even once stock would suffice.
	require.NoError(t, inv.SetStock(ctx, "b", 100))
	again, err := inv.Reserve(ctx, req)
	require.NoError(t, err)
	require.False(t, again.GetAccepted())
	require.Equal(t, res.GetReason(), again.GetReason())
	require.EqualValues(t, 10, stock(t, inv, "a"))
	require.EqualValues(t, 2, reserveCalls(t, inv, "res-1"))

	// Releasing a rejected reservation moves nothing and its answer sticks.
	for range 2 {
		rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "payment failed"})
		require.NoError(t, err)
		require.False(t, rel.GetReleased())
		require.Equal(t, commerce.ReasonReservationNotAccepted, rel.GetReason())
	}
	require.EqualValues(t, 100, stock(t, inv, "b"))
	require.EqualValues(t, 10, stock(t, inv, "a"))
	require.EqualValues(t, 2, releaseCalls(t, inv, "res-1"))
}

func testInvRelease(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	require.NoError(t, inv.SetStock(ctx, "b", 10))
	res, err := inv.Reserve(ctx, reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 4},
		&contracts.OrderLine{Sku: "b", Quantity: 6}))
	require.NoError(t, err)
	require.True(t, res.GetAccepted())

	const n = 10
	results := make([]*contracts.ReleaseInventoryRes, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		results[i], errs[i] = inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "payment failed"})
	})
	for i := range n {
		require.NoError(t, errs[i])
		require.True(t, results[i].GetReleased(), "release %d returns the first release result", i)
		require.Nil(t, results[i].Reason)
	}
	require.EqualValues(t, 10, stock(t, inv, "a"), "stock returned exactly once")
	require.EqualValues(t, 10, stock(t, inv, "b"), "stock returned exactly once")
	require.EqualValues(t, n, releaseCalls(t, inv, "res-1"))
	require.EqualValues(t, 1, reserveCalls(t, inv, "res-1"), "release calls are counted apart from reserve calls")

	// A reserve repeated after the release still answers the first result
	// and takes nothing again.
	again, err := inv.Reserve(ctx, reserveReq("res-1", &contracts.OrderLine{Sku: "a", Quantity: 4}))
	require.NoError(t, err)
	require.True(t, again.GetAccepted())
	require.EqualValues(t, 10, stock(t, inv, "a"))
}

func testInvReleaseUnknown(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 5))

	rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "x"})
	require.NoError(t, err)
	require.False(t, rel.GetReleased())
	require.Equal(t, commerce.ReasonUnknownReservation, rel.GetReason())

	res, err := inv.Reserve(ctx, reserveReq("res-1", &contracts.OrderLine{Sku: "a", Quantity: 5}))
	require.NoError(t, err)
	require.True(t, res.GetAccepted())
	require.EqualValues(t, 0, stock(t, inv, "a"))

	rel, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "x"})
	require.NoError(t, err)
	require.True(t, rel.GetReleased())
	require.EqualValues(t, 5, stock(t, inv, "a"))
	require.EqualValues(t, 2, releaseCalls(t, inv, "res-1"))
}

func testInvValidation(t *testing.T, inv commerce.Inventory) {
	ctx := ctxT(t)
	for name, req := range map[string]*contracts.ReserveInventoryReq{
		"nil":           nil,
		"no id":         reserveReq("", &contracts.OrderLine{Sku: "a", Quantity: 1}),
		"no lines":      reserveReq("r"),
		"empty sku":     reserveReq("r", &contracts.OrderLine{Quantity: 1}),
		"zero quantity": reserveReq("r", &contracts.OrderLine{Sku: "a"}),
	} {
		_, err := inv.Reserve(ctx, req)
		require.ErrorIs(t, err, commerce.ErrInvalidArgument, name)
	}
	_, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{})
	require.ErrorIs(t, err, commerce.ErrInvalidArgument, "release without an id")
	require.ErrorIs(t, inv.SetStock(ctx, "a", -1), commerce.ErrInvalidArgument)
	require.ErrorIs(t, inv.SetStock(ctx, "", 1), commerce.ErrInvalidArgument)
	require.Zero(t, reserveCalls(t, inv, "r"), "refused requests never reach the module")
}

// ---- Payment ----

// RunPaymentContract runs the commerce.Payment contract as subtests;
// newStore is called once per subtest and must return a module with no
// methods and no payments.
func RunPaymentContract(t *testing.T, newStore func(t *testing.T) commerce.Payment) {
	t.Helper()
	run(t, newStore, []testCase[commerce.Payment]{
		{"ApproveAndDeclineKeepFirstResult", testPayFirstResult},
		{"ConcurrentAuthorizeCapturesOnce", testPayConcurrent},
		{"UnknownMethodDeclines", testPayUnknownMethod},
		{"RefusedRequestsNeverReachTheModule", testPayValidation},
		{"RecordsReadByIDWithoutSideEffects", testPayRecords},
	})
}

func authReq(paymentID, method string, amount int64) *contracts.AuthorizePaymentReq {
	return &contracts.AuthorizePaymentReq{
		OrderId: "order-" + paymentID, PaymentId: paymentID, PaymentMethodId: method, Amount: amount, Currency: "EUR",
	}
}

func captured(t *testing.T, pay commerce.Payment, id string) int64 {
	t.Helper()
	n, err := pay.Captured(ctxT(t), id)
	require.NoError(t, err)
	return n
}

func authorizeCalls(t *testing.T, pay commerce.Payment, id string) int64 {
	t.Helper()
	n, err := pay.AuthorizeCalls(ctxT(t), id)
	require.NoError(t, err)
	return n
}

func testPayFirstResult(t *testing.T, pay commerce.Payment) {
	ctx := ctxT(t)
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Reason: "card declined"}))

	ok, err := pay.Authorize(ctx, authReq("pay-ok", "pm-ok", 4870))
	require.NoError(t, err)
	require.True(t, ok.GetAccepted())
	require.Nil(t, ok.Reason)

	no, err := pay.Authorize(ctx, authReq("pay-no", "pm-no", 4870))
	require.NoError(t, err)
	require.False(t, no.GetAccepted())
	require.Equal(t, "card declined", no.GetReason())

	// Flip both seeds: repeats must still answer the first results.
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Reason: "now declined"}))
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Approve: true}))
	m, err := pay.GetMethod(ctx, "pm-ok")
	require.NoError(t, err)
	require.Equal(t, commerce.PaymentMethod{MethodID: "pm-ok", Reason: "now declined"}, m, "the seed did change")

	ok2, err := pay.Authorize(ctx, authReq("pay-ok", "pm-ok", 999999))
	require.NoError(t, err)
	require.True(t, ok2.GetAccepted(), "first result, not the new seed")
	no2, err := pay.Authorize(ctx, authReq("pay-no", "pm-no", 4870))
	require.NoError(t, err)
	require.False(t, no2.GetAccepted(), "first result, not the new seed")
	require.Equal(t, "card declined", no2.GetReason())

	require.EqualValues(t, 4870, captured(t, pay, "pay-ok"), "the first amount, once")
	require.Zero(t, captured(t, pay, "pay-no"), "a declined payment captures nothing")
	require.EqualValues(t, 2, authorizeCalls(t, pay, "pay-ok"))

	// A fresh PaymentId is decided by the new seed.
	fresh, err := pay.Authorize(ctx, authReq("pay-fresh", "pm-ok", 1))
	require.NoError(t, err)
	require.False(t, fresh.GetAccepted())
	require.Equal(t, "now declined", fresh.GetReason())
}

func testPayConcurrent(t *testing.T, pay commerce.Payment) {
	ctx := ctxT(t)
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	const n = 20
	results := make([]*contracts.AuthorizePaymentRes, n)
	errs := make([]error, n)
	parallel(n, func(i int) { results[i], errs[i] = pay.Authorize(ctx, authReq("pay-1", "pm-ok", 500)) })
	for i := range n {
		require.NoError(t, errs[i])
		require.True(t, results[i].GetAccepted())
	}
	require.EqualValues(t, 500, captured(t, pay, "pay-1"))
	require.EqualValues(t, n, authorizeCalls(t, pay, "pay-1"))
}

func testPayUnknownMethod(t *testing.T, pay commerce.Payment) {
	ctx := ctxT(t)
	_, err := pay.GetMethod(ctx, "pm-missing")
	require.ErrorIs(t, err, commerce.ErrNotFound)

	res, err := pay.Authorize(ctx, authReq("pay-1", "pm-missing", 100))
	require.NoError(t, err)
	require.False(t, res.GetAccepted())
	require.Equal(t, commerce.ReasonUnknownPaymentMethod, res.GetReason())

	// Seeding the method afterwards does not rewrite the recorded decline.
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-missing", Approve: true}))
	res, err = pay.Authorize(ctx, authReq("pay-1", "pm-missing", 100))
	require.NoError(t, err)
	require.False(t, res.GetAccepted())
	require.Equal(t, commerce.ReasonUnknownPaymentMethod, res.GetReason())
	require.Zero(t, captured(t, pay, "pay-1"))

	// A declining method without its own reason still gives one.
	require.NoError(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-silent"}))
	res, err = pay.Authorize(ctx, authReq("pay-2", "pm-silent", 100))
	require.NoError(t, err)
	require.False(t, res.GetAccepted())
	require.Equal(t, commerce.ReasonPaymentDeclined, res.GetReason())
}

func testPayValidation(t *testing.T, pay commerce.Payment) {
	ctx := ctxT(t)
	for name, req := range map[string]*contracts.AuthorizePaymentReq{
		"nil":             nil,
		"no payment id":   authReq("", "pm-ok", 1),
		"no method":       authReq("pay-3", "", 1),
		"negative amount": authReq("pay-3", "pm-ok", -1),
	} {
		_, err := pay.Authorize(ctx, req)
		require.ErrorIs(t, err, commerce.ErrInvalidArgument, name)
	}
	require.Zero(t, authorizeCalls(t, pay, "pay-3"), "refused requests never reach the module")
	require.ErrorIs(t, pay.PutMethod(ctx, commerce.PaymentMethod{}), commerce.ErrInvalidArgument, "method without an id")
	require.ErrorIs(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-x", Approve: true, Reason: "r"}),
		commerce.ErrInvalidArgument, "approving method with a decline reason")
}
