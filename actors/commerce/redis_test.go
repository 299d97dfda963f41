package commerce_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// newStore starts a private redis-server for the test and returns the
// store on the default prefix plus a raw client for inspecting keys.
func newStore(t *testing.T) (*commerce.Redis, *redis.Client) {
	t.Helper()
	srv := redisserver.ForTest(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return commerce.NewRedis(commerce.RedisConfig{Client: c}), c
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

func str(s string) *string { return &s }

func TestFingerprint(t *testing.T) {
	a := commerce.Fingerprint("cart-1", "addr-1", "pm-1")
	equal(t, a, commerce.Fingerprint("cart-1", "addr-1", "pm-1"), "deterministic")
	hasLen(t, a, 64)
	notEqual(t, a, commerce.Fingerprint("cart-1", "addr-1", "pm-2"))
	// Field boundaries must matter: plain concatenation would collide.
	notEqual(t, commerce.Fingerprint("ab", "c", "d"), commerce.Fingerprint("a", "bc", "d"))
	notEqual(t, commerce.Fingerprint("a", "", "b"), commerce.Fingerprint("", "a", "b"))
}

func TestIdempotency_ConcurrentReserveHasExactlyOneWinner(t *testing.T) {
	store, _ := newStore(t)
	idem := store.Idempotency()
	ctx := t.Context()
	const n = 50
	type result struct {
		m       commerce.Mapping
		created bool
		err     error
	}
	results := make([]result, n)
	parallel(n, func(i int) {
		m, created, err := idem.Reserve(ctx, "key-1", commerce.Mapping{
			OrderID:     fmt.Sprintf("order-%02d", i),
			Status:      commerce.MappingStarted, // ignored: a new mapping starts pending
			Fingerprint: commerce.Fingerprint("cart", "addr", "pm"),
		})
		results[i] = result{m, created, err}
	})

	winners := 0
	winner := ""
	for i, r := range results {
		noErr(t, r.err, "reserver %d", i)
		if r.created {
			winners++
			winner = fmt.Sprintf("order-%02d", i)
		}
	}
	mustEqual(t, 1, winners, "exactly one reserver creates the mapping")
	for i, r := range results {
		equal(t, winner, r.m.OrderID, "reserver %d sees the winner's order", i)
		equal(t, commerce.MappingPending, r.m.Status)
		equal(t, commerce.Fingerprint("cart", "addr", "pm"), r.m.Fingerprint)
	}
	got, err := idem.Get(ctx, "key-1")
	noErr(t, err)
	equal(t, winner, got.OrderID)
	t.Logf("winner %s among %d reservers", winner, n)
}

func TestIdempotency_MarkStarted(t *testing.T) {
	store, _ := newStore(t)
	idem := store.Idempotency()
	ctx := t.Context()

	_, err := idem.Get(ctx, "k")
	mustErrIs(t, err, commerce.ErrNotFound)
	mustErrIs(t, idem.MarkStarted(ctx, "k", "order-1"), commerce.ErrNotFound, "unknown key")

	_, created, err := idem.Reserve(ctx, "k", commerce.Mapping{OrderID: "order-1", Fingerprint: "fp"})
	noErr(t, err)
	mustTrue(t, created)

	mustErrIs(t, idem.MarkStarted(ctx, "k", "order-2"), commerce.ErrNotFound, "key maps to another order")
	m, err := idem.Get(ctx, "k")
	noErr(t, err)
	equal(t, commerce.MappingPending, m.Status, "a refused MarkStarted changes nothing")

	noErr(t, idem.MarkStarted(ctx, "k", "order-1"))
	noErr(t, idem.MarkStarted(ctx, "k", "order-1"), "idempotent")
	m, err = idem.Get(ctx, "k")
	noErr(t, err)
	equal(t, commerce.Mapping{OrderID: "order-1", Status: commerce.MappingStarted, Fingerprint: "fp"}, m)

	m, created, err = idem.Reserve(ctx, "k", commerce.Mapping{OrderID: "order-3", Fingerprint: "other"})
	noErr(t, err)
	isFalse(t, created)
	equal(t, commerce.Mapping{OrderID: "order-1", Status: commerce.MappingStarted, Fingerprint: "fp"}, m,
		"a later reserve sees the started mapping, not its candidate")
}

func TestIdempotency_InvalidAndCorrupt(t *testing.T) {
	store, raw := newStore(t)
	idem := store.Idempotency()
	ctx := t.Context()

	_, _, err := idem.Reserve(ctx, "", commerce.Mapping{OrderID: "o"})
	errIs(t, err, commerce.ErrInvalidArgument)
	_, _, err = idem.Reserve(ctx, "k", commerce.Mapping{})
	errIs(t, err, commerce.ErrInvalidArgument)

	noErr(t, raw.HSet(ctx, "sm:cs:idem:{bad-status}", "orderId", "o", "status", "weird").Err())
	_, err = idem.Get(ctx, "bad-status")
	errIs(t, err, commerce.ErrCorrupt)

	noErr(t, raw.Set(ctx, "sm:cs:idem:{wrong-type}", "x", 0).Err())
	_, _, err = idem.Reserve(ctx, "wrong-type", commerce.Mapping{OrderID: "o"})
	errIs(t, err, commerce.ErrCorrupt, "a key of the wrong Redis type is a corrupt record")
}

func TestRedis_UnreachableIsErrUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: t.TempDir() + "/none.sock", MaxRetries: -1,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	store := commerce.NewRedis(commerce.RedisConfig{Client: c})
	_, err := store.Idempotency().Get(t.Context(), "k")
	errIs(t, err, commerce.ErrUnavailable)
	_, err = store.Inventory().Stock(t.Context(), "sku")
	errIs(t, err, commerce.ErrUnavailable)
}

func TestCarts_RoundTripAndNotFound(t *testing.T) {
	store, raw := newStore(t)
	carts := store.Carts()
	ctx := t.Context()

	_, err := carts.GetCart(ctx, "cart-1")
	mustErrIs(t, err, commerce.ErrNotFound)

	in := commerce.Cart{
		CartID:   "cart-1",
		Lines:    []*contracts.OrderLine{{Sku: "a", Quantity: 2}, {Sku: "b", Quantity: 1}},
		Amount:   12900,
		Currency: "EUR",
	}
	noErr(t, carts.PutCart(ctx, in))
	out, err := carts.GetCart(ctx, "cart-1")
	noErr(t, err)
	equal(t, in.CartID, out.CartID)
	equal(t, in.Amount, out.Amount)
	equal(t, in.Currency, out.Currency)
	mustLen(t, out.Lines, 2)
	for i := range in.Lines {
		equal(t, in.Lines[i].GetSku(), out.Lines[i].GetSku())
		equal(t, in.Lines[i].GetQuantity(), out.Lines[i].GetQuantity())
	}

	in.Amount = 100
	in.Lines = in.Lines[:1]
	noErr(t, carts.PutCart(ctx, in), "put replaces")
	out, err = carts.GetCart(ctx, "cart-1")
	noErr(t, err)
	equal(t, int64(100), out.Amount)
	hasLen(t, out.Lines, 1)

	errIs(t, carts.PutCart(ctx, commerce.Cart{CartID: "c", Currency: "EUR"}), commerce.ErrInvalidArgument, "no lines")
	errIs(t, carts.PutCart(ctx, commerce.Cart{CartID: "c", Currency: "EUR",
		Lines: []*contracts.OrderLine{{Sku: "a", Quantity: 0}}}), commerce.ErrInvalidArgument, "zero quantity")

	noErr(t, raw.Set(ctx, "sm:cs:cart:{broken}", "{not json", 0).Err())
	_, err = carts.GetCart(ctx, "broken")
	errIs(t, err, commerce.ErrCorrupt)
}

func reserveReq(resID string, lines ...*contracts.OrderLine) *contracts.ReserveInventoryReq {
	return &contracts.ReserveInventoryReq{OrderId: "order-" + resID, ReservationId: resID, Lines: lines}
}

func TestInventory_ReserveMovesStockOnceUnderRepeats(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	noErr(t, inv.SetStock(ctx, "a", 10))
	noErr(t, inv.SetStock(ctx, "b", 5))

	req := reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 3},
		&contracts.OrderLine{Sku: "b", Quantity: 2},
		&contracts.OrderLine{Sku: "a", Quantity: 1}) // same SKU twice: the total is taken
	first, err := inv.Reserve(ctx, req)
	noErr(t, err)
	mustTrue(t, first.GetAccepted())
	isNil(t, first.Reason)

	const repeats = 10
	results := make([]*contracts.ReserveInventoryRes, repeats)
	errs := make([]error, repeats)
	parallel(repeats, func(i int) { results[i], errs[i] = inv.Reserve(ctx, req) })
	for i := range repeats {
		noErr(t, errs[i])
		isTrue(t, results[i].GetAccepted(), "repeat %d returns the first result", i)
		isNil(t, results[i].Reason)
	}

	a, err := inv.Stock(ctx, "a")
	noErr(t, err)
	b, err := inv.Stock(ctx, "b")
	noErr(t, err)
	equal(t, int64(10-4), a, "stock of a moved exactly once")
	equal(t, int64(5-2), b, "stock of b moved exactly once")

	calls, err := inv.ReserveCalls(ctx, "res-1")
	noErr(t, err)
	equal(t, int64(repeats+1), calls, "every call is counted, repeats included")
}

func TestInventory_ConcurrentFirstCallsReserveOnce(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	noErr(t, inv.SetStock(ctx, "a", 100))
	req := reserveReq("res-1", &contracts.OrderLine{Sku: "a", Quantity: 7})
	const n = 10
	results := make([]*contracts.ReserveInventoryRes, n)
	errs := make([]error, n)
	parallel(n, func(i int) { results[i], errs[i] = inv.Reserve(ctx, req) })
	for i := range n {
		noErr(t, errs[i])
		isTrue(t, results[i].GetAccepted())
	}
	stock, err := inv.Stock(ctx, "a")
	noErr(t, err)
	equal(t, int64(93), stock)
	calls, err := inv.ReserveCalls(ctx, "res-1")
	noErr(t, err)
	equal(t, int64(n), calls)
}

func TestInventory_InsufficientStockRejectsAllOrNothing(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	noErr(t, inv.SetStock(ctx, "a", 10))
	noErr(t, inv.SetStock(ctx, "b", 1))

	req := reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 3},
		&contracts.OrderLine{Sku: "b", Quantity: 2},
		&contracts.OrderLine{Sku: "unknown", Quantity: 1})
	res, err := inv.Reserve(ctx, req)
	noErr(t, err)
	isFalse(t, res.GetAccepted())
	equal(t, "insufficient stock for b: requested 2, available 1", res.GetReason())

	a, _ := inv.Stock(ctx, "a")
	b, _ := inv.Stock(ctx, "b")
	u, err := inv.Stock(ctx, "unknown")
	noErr(t, err)
	equal(t, int64(10), a, "a SKU with enough stock is not taken when another lacks it")
	equal(t, int64(1), b)
	equal(t, int64(0), u)

	// The first result stands even once stock would suffice.
	noErr(t, inv.SetStock(ctx, "b", 100))
	noErr(t, inv.SetStock(ctx, "unknown", 100))
	again, err := inv.Reserve(ctx, req)
	noErr(t, err)
	isFalse(t, again.GetAccepted())
	equal(t, res.GetReason(), again.GetReason())
	a, _ = inv.Stock(ctx, "a")
	equal(t, int64(10), a)
	calls, err := inv.ReserveCalls(ctx, "res-1")
	noErr(t, err)
	equal(t, int64(2), calls)

	// Releasing a rejected reservation moves nothing and its answer sticks.
	rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "payment failed"})
	noErr(t, err)
	isFalse(t, rel.GetReleased())
	equal(t, commerce.ReasonReservationNotAccepted, rel.GetReason())
	b, _ = inv.Stock(ctx, "b")
	equal(t, int64(100), b)
}

func TestInventory_ReleaseReturnsStockOnce(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	noErr(t, inv.SetStock(ctx, "a", 10))
	noErr(t, inv.SetStock(ctx, "b", 10))
	res, err := inv.Reserve(ctx, reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 4},
		&contracts.OrderLine{Sku: "b", Quantity: 6}))
	noErr(t, err)
	mustTrue(t, res.GetAccepted())

	const n = 10
	results := make([]*contracts.ReleaseInventoryRes, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		results[i], errs[i] = inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "payment failed"})
	})
	for i := range n {
		noErr(t, errs[i])
		isTrue(t, results[i].GetReleased(), "release %d returns the first release result", i)
		isNil(t, results[i].Reason)
	}
	a, _ := inv.Stock(ctx, "a")
	b, _ := inv.Stock(ctx, "b")
	equal(t, int64(10), a, "stock returned exactly once")
	equal(t, int64(10), b, "stock returned exactly once")

	calls, err := inv.ReleaseCalls(ctx, "res-1")
	noErr(t, err)
	equal(t, int64(n), calls)
	calls, err = inv.ReserveCalls(ctx, "res-1")
	noErr(t, err)
	equal(t, int64(1), calls, "release calls are counted apart from reserve calls")

	// A reserve repeated after the release still answers the first result
	// and takes nothing again.
	again, err := inv.Reserve(ctx, reserveReq("res-1", &contracts.OrderLine{Sku: "a", Quantity: 4}))
	noErr(t, err)
	isTrue(t, again.GetAccepted())
	a, _ = inv.Stock(ctx, "a")
	equal(t, int64(10), a)
}

func TestInventory_ReleaseUnknownDoesNotBlockLaterReservation(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	noErr(t, inv.SetStock(ctx, "a", 5))

	rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "x"})
	noErr(t, err)
	isFalse(t, rel.GetReleased())
	equal(t, commerce.ReasonUnknownReservation, rel.GetReason())

	res, err := inv.Reserve(ctx, reserveReq("res-1", &contracts.OrderLine{Sku: "a", Quantity: 5}))
	noErr(t, err)
	mustTrue(t, res.GetAccepted())
	stock, _ := inv.Stock(ctx, "a")
	mustEqual(t, int64(0), stock)

	rel, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: "res-1", Reason: "x"})
	noErr(t, err)
	isTrue(t, rel.GetReleased())
	stock, _ = inv.Stock(ctx, "a")
	equal(t, int64(5), stock)
	calls, err := inv.ReleaseCalls(ctx, "res-1")
	noErr(t, err)
	equal(t, int64(2), calls)
}

func TestInventory_Validation(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	for name, req := range map[string]*contracts.ReserveInventoryReq{
		"nil":           nil,
		"no id":         reserveReq("", &contracts.OrderLine{Sku: "a", Quantity: 1}),
		"no lines":      reserveReq("r"),
		"empty sku":     reserveReq("r", &contracts.OrderLine{Quantity: 1}),
		"zero quantity": reserveReq("r", &contracts.OrderLine{Sku: "a"}),
	} {
		_, err := inv.Reserve(ctx, req)
		errIs(t, err, commerce.ErrInvalidArgument, name)
	}
	errIs(t, inv.SetStock(ctx, "a", -1), commerce.ErrInvalidArgument)
	calls, err := inv.ReserveCalls(ctx, "r")
	noErr(t, err)
	isZero(t, calls, "refused requests never reach the module")
}

// hashTag returns what Redis Cluster hashes for key: the content of the
// first non-empty {...}, or the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestKeyLayout_ScriptKeysShareOneSlot(t *testing.T) {
	store, raw := newStore(t)
	ctx := t.Context()
	noErr(t, store.ApplySeed(ctx, commerce.DemoSeed()))
	_, err := store.Inventory().Reserve(ctx, reserveReq("res-1",
		&contracts.OrderLine{Sku: commerce.DemoSKUShirt, Quantity: 1},
		&contracts.OrderLine{Sku: commerce.DemoSKUMug, Quantity: 1}))
	noErr(t, err)
	_, err = store.Payment().Authorize(ctx, &contracts.AuthorizePaymentReq{
		PaymentId: "pay-1", PaymentMethodId: commerce.DemoMethodOK, Amount: 1, Currency: "EUR"})
	noErr(t, err)
	_, _, err = store.Idempotency().Reserve(ctx, "key-1", commerce.Mapping{OrderID: "o"})
	noErr(t, err)

	keys, err := raw.Keys(ctx, "*").Result()
	noErr(t, err)
	byKind := map[string]int{}
	for _, k := range keys {
		mustTrue(t, strings.HasPrefix(k, commerce.DefaultKeyPrefix), k)
		switch rest := strings.TrimPrefix(k, commerce.DefaultKeyPrefix); {
		case strings.HasPrefix(rest, "stock:"), strings.HasPrefix(rest, "reservation:"):
			equal(t, "inventory", hashTag(k), k)
			byKind["inventory"]++
		case strings.HasPrefix(rest, "paymethod:"), strings.HasPrefix(rest, "payment:"):
			equal(t, "payment", hashTag(k), k)
			byKind["payment"]++
		case strings.HasPrefix(rest, "idem:"):
			equal(t, "key-1", hashTag(k), k)
			byKind["idem"]++
		case strings.HasPrefix(rest, "cart:"):
			byKind["cart"]++
		default:
			t.Errorf("unexpected key %q", k)
		}
	}
	equal(t, map[string]int{"inventory": 4, "payment": 3, "idem": 1, "cart": 2}, byKind)
}

func TestRedis_KeyPrefix(t *testing.T) {
	srv := redisserver.ForTest(t)
	raw := srv.Client()
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	one := commerce.NewRedis(commerce.RedisConfig{Client: raw, KeyPrefix: "one:"})
	two := commerce.NewRedis(commerce.RedisConfig{Client: raw, KeyPrefix: "two:"})
	noErr(t, one.Inventory().SetStock(ctx, "a", 3))
	n, err := two.Inventory().Stock(ctx, "a")
	noErr(t, err)
	isZero(t, n, "prefixes separate stores on one server")
	exists, err := raw.Exists(ctx, "one:stock:{inventory}:a").Result()
	noErr(t, err)
	equal(t, int64(1), exists)

	panics(t, func() { commerce.NewRedis(commerce.RedisConfig{Client: raw, KeyPrefix: "x{y}:"}) })
	panics(t, func() { commerce.NewRedis(commerce.RedisConfig{}) })
}

func authReq(paymentID, method string, amount int64) *contracts.AuthorizePaymentReq {
	return &contracts.AuthorizePaymentReq{
		OrderId: "order-" + paymentID, PaymentId: paymentID, PaymentMethodId: method, Amount: amount, Currency: "EUR",
	}
}

func TestPayment_ApproveAndDeclineKeepFirstResult(t *testing.T) {
	store, _ := newStore(t)
	pay := store.Payment()
	ctx := t.Context()
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Reason: "card declined"}))

	ok, err := pay.Authorize(ctx, authReq("pay-ok", "pm-ok", 4870))
	noErr(t, err)
	isTrue(t, ok.GetAccepted())
	isNil(t, ok.Reason)

	no, err := pay.Authorize(ctx, authReq("pay-no", "pm-no", 4870))
	noErr(t, err)
	isFalse(t, no.GetAccepted())
	equal(t, "card declined", no.GetReason())

	// Flip both seeds: repeats must still answer the first results.
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Reason: "now declined"}))
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Approve: true}))
	m, err := pay.GetMethod(ctx, "pm-ok")
	noErr(t, err)
	mustFalse(t, m.Approve, "the seed did change")

	ok2, err := pay.Authorize(ctx, authReq("pay-ok", "pm-ok", 999999))
	noErr(t, err)
	isTrue(t, ok2.GetAccepted(), "first result, not the new seed")
	no2, err := pay.Authorize(ctx, authReq("pay-no", "pm-no", 4870))
	noErr(t, err)
	isFalse(t, no2.GetAccepted(), "first result, not the new seed")
	equal(t, "card declined", no2.GetReason())

	captured, err := pay.Captured(ctx, "pay-ok")
	noErr(t, err)
	equal(t, int64(4870), captured, "the first amount, once")
	captured, err = pay.Captured(ctx, "pay-no")
	noErr(t, err)
	isZero(t, captured, "a declined payment captures nothing")

	calls, err := pay.AuthorizeCalls(ctx, "pay-ok")
	noErr(t, err)
	equal(t, int64(2), calls)

	// A fresh PaymentId is decided by the new seed.
	fresh, err := pay.Authorize(ctx, authReq("pay-fresh", "pm-ok", 1))
	noErr(t, err)
	isFalse(t, fresh.GetAccepted())
	equal(t, "now declined", fresh.GetReason())
}

func TestPayment_ConcurrentAuthorizeCapturesOnce(t *testing.T) {
	store, _ := newStore(t)
	pay := store.Payment()
	ctx := t.Context()
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	const n = 20
	results := make([]*contracts.AuthorizePaymentRes, n)
	errs := make([]error, n)
	parallel(n, func(i int) { results[i], errs[i] = pay.Authorize(ctx, authReq("pay-1", "pm-ok", 500)) })
	for i := range n {
		noErr(t, errs[i])
		isTrue(t, results[i].GetAccepted())
	}
	captured, err := pay.Captured(ctx, "pay-1")
	noErr(t, err)
	equal(t, int64(500), captured)
	calls, err := pay.AuthorizeCalls(ctx, "pay-1")
	noErr(t, err)
	equal(t, int64(n), calls)
}

func TestPayment_UnknownMethodDeclines(t *testing.T) {
	store, _ := newStore(t)
	pay := store.Payment()
	ctx := t.Context()

	_, err := pay.GetMethod(ctx, "pm-missing")
	mustErrIs(t, err, commerce.ErrNotFound)

	res, err := pay.Authorize(ctx, authReq("pay-1", "pm-missing", 100))
	noErr(t, err)
	isFalse(t, res.GetAccepted())
	equal(t, "unknown payment method", res.GetReason())

	// Seeding the method afterwards does not rewrite the recorded decline.
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-missing", Approve: true}))
	res, err = pay.Authorize(ctx, authReq("pay-1", "pm-missing", 100))
	noErr(t, err)
	equal(t, &contracts.AuthorizePaymentRes{Accepted: false, Reason: str("unknown payment method")},
		&contracts.AuthorizePaymentRes{Accepted: res.GetAccepted(), Reason: res.Reason})
	captured, err := pay.Captured(ctx, "pay-1")
	noErr(t, err)
	isZero(t, captured)

	// A declining method without its own reason still gives one.
	noErr(t, pay.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-silent"}))
	res, err = pay.Authorize(ctx, authReq("pay-2", "pm-silent", 100))
	noErr(t, err)
	equal(t, commerce.ReasonPaymentDeclined, res.GetReason())

	for name, req := range map[string]*contracts.AuthorizePaymentReq{
		"nil":             nil,
		"no payment id":   authReq("", "pm-ok", 1),
		"no method":       authReq("pay-3", "", 1),
		"negative amount": authReq("pay-3", "pm-ok", -1),
	} {
		_, err := pay.Authorize(ctx, req)
		errIs(t, err, commerce.ErrInvalidArgument, name)
	}
}

func TestContextCancelled(t *testing.T) {
	store, _ := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := store.Carts().GetCart(ctx, "cart-1")
	mustErr(t, err)
	isTrue(t, errors.Is(err, context.Canceled), "got %v", err)
	isFalse(t, errors.Is(err, commerce.ErrNotFound))
}
