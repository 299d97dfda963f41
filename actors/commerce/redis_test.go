package commerce_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/commerce/commercetest"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// newStore starts a private redis-server for the test and returns the
// store on the default prefix plus a raw client for inspecting keys.
func newStore(t *testing.T) (*commerce.Redis, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	return newRedis(t, commerce.Config{Client: c}), c
}

// newRedis is NewRedis for a Config the test knows to be valid.
func newRedis(t *testing.T, cfg commerce.Config) *commerce.Redis {
	t.Helper()
	s, err := commerce.NewRedis(cfg)
	require.NoError(t, err)
	return s
}

// perSubtest returns a store factory over one redis-server that gives
// every subtest a key prefix of its own, so the contract suites start
// empty without a server each.
func perSubtest(t *testing.T) func(t *testing.T) *commerce.Redis {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	var n atomic.Int64
	return func(t *testing.T) *commerce.Redis {
		return newRedis(t, commerce.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:cs:", n.Add(1))})
	}
}

// The contract suites on a real redis-server.
func TestRedisContracts(t *testing.T) {
	store := perSubtest(t)
	t.Run("Idempotency", func(t *testing.T) {
		commercetest.RunIdempotencyContract(t, func(t *testing.T) commerce.Idempotency { return store(t).Idempotency() })
	})
	t.Run("Carts", func(t *testing.T) {
		commercetest.RunCartsContract(t, func(t *testing.T) commerce.Carts { return store(t).Carts() })
	})
	t.Run("Inventory", func(t *testing.T) {
		commercetest.RunInventoryContract(t, func(t *testing.T) commerce.Inventory { return store(t).Inventory() })
	})
	t.Run("StockLedger", func(t *testing.T) {
		commercetest.RunStockLedgerContract(t, func(t *testing.T) commercetest.LedgeredInventory { return ledgered(store(t)) })
	})
	t.Run("Payment", func(t *testing.T) {
		commercetest.RunPaymentContract(t, func(t *testing.T) commerce.Payment { return store(t).Payment() })
	})
}

// ledgered is the store's inventory with its ledger, for the ledger
// contract.
func ledgered(s *commerce.Redis) commercetest.LedgeredInventory {
	return struct {
		commerce.Inventory
		commerce.StockLedger
	}{s.Inventory(), s.Ledger()}
}

func TestFingerprint(t *testing.T) {
	a := commerce.Fingerprint("cart-1", "addr-1", "pm-1")
	require.Equal(t, a, commerce.Fingerprint("cart-1", "addr-1", "pm-1"), "deterministic")
	require.Len(t, a, 64)
	require.NotEqual(t, a, commerce.Fingerprint("cart-1", "addr-1", "pm-2"))
	// Field boundaries must matter: plain concatenation would collide.
	require.NotEqual(t, commerce.Fingerprint("ab", "c", "d"), commerce.Fingerprint("a", "bc", "d"))
	require.NotEqual(t, commerce.Fingerprint("a", "", "b"), commerce.Fingerprint("", "a", "b"))
}

func TestIdempotency_InvalidAndCorrupt(t *testing.T) {
	store, raw := newStore(t)
	idem := store.Idempotency()
	ctx := t.Context()

	_, _, err := idem.Reserve(ctx, "", commerce.Mapping{OrderID: "o"})
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
	_, _, err = idem.Reserve(ctx, "k", commerce.Mapping{})
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)

	require.NoError(t, raw.HSet(ctx, "sm:cs:idem:order:{o}", "key", "bad-status", "orderId", "o", "status", "weird").Err())
	_, err = idem.Get(ctx, "bad-status", "o")
	require.ErrorIs(t, err, commerce.ErrCorrupt)
	_, _, err = idem.Reserve(ctx, "another-key", commerce.Mapping{OrderID: "o"})
	require.ErrorIs(t, err, commerce.ErrCorrupt, "an order's mapping is one key's")
	require.ErrorContains(t, err, `is key "bad-status"'s`)

	require.NoError(t, raw.Set(ctx, "sm:cs:idem:order:{o-2}", "x", 0).Err())
	_, _, err = idem.Reserve(ctx, "wrong-type", commerce.Mapping{OrderID: "o-2"})
	require.ErrorIs(t, err, commerce.ErrCorrupt, "a key of the wrong Redis type is a corrupt record")
	require.NoError(t, raw.HSet(ctx, "sm:cs:idem:{old-bad}", "orderId", "o-3", "status", "weird").Err())
	_, err = idem.Get(ctx, "old-bad", "o-3")
	require.ErrorIs(t, err, commerce.ErrCorrupt, "and so is an old layout's")
}

func TestRedis_UnreachableIsErrUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: t.TempDir() + "/none.sock", MaxRetries: -1,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	store := newRedis(t, commerce.Config{Client: c})
	_, err := store.Idempotency().Get(t.Context(), "k", "o")
	require.ErrorIs(t, err, commerce.ErrUnavailable)
	_, err = store.Inventory().Stock(t.Context(), "sku")
	require.ErrorIs(t, err, commerce.ErrUnavailable)
}

func TestCarts_ValidationAndCorrupt(t *testing.T) {
	store, raw := newStore(t)
	carts := store.Carts()
	ctx := t.Context()
	require.ErrorIs(t, carts.PutCart(ctx, commerce.Cart{CartID: "c", Currency: "EUR"}), commerce.ErrInvalidArgument, "no lines")
	require.ErrorIs(t, carts.PutCart(ctx, commerce.Cart{CartID: "c", Currency: "EUR",
		Lines: []*contracts.OrderLine{{Sku: "a", Quantity: 0}}}), commerce.ErrInvalidArgument, "zero quantity")

	require.NoError(t, raw.Set(ctx, "sm:cs:cart:{broken}", "{not json", 0).Err())
	_, err := carts.GetCart(ctx, "broken")
	require.ErrorIs(t, err, commerce.ErrCorrupt)
}

// The Redis module's rejection reason names the SKU, the request and the
// stock it found.
func TestInventory_InsufficientStockReason(t *testing.T) {
	store, _ := newStore(t)
	inv := store.Inventory()
	ctx := t.Context()
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	require.NoError(t, inv.SetStock(ctx, "b", 1))
	res, err := inv.Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: "res-1", Lines: []*contracts.OrderLine{
		{Sku: "a", Quantity: 3}, {Sku: "b", Quantity: 2}, {Sku: "unknown", Quantity: 1}}})
	require.NoError(t, err)
	require.False(t, res.GetAccepted())
	require.Equal(t, "insufficient stock for b: requested 2, available 1", res.GetReason())
}

func TestKeyLayout_EachKeyTaggedByItsOwnID(t *testing.T) {
	store, raw := newStore(t)
	ctx := t.Context()
	require.NoError(t, store.ApplySeed(ctx, commerce.DemoSeed()))
	_, err := store.Inventory().Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: "res-1", Lines: []*contracts.OrderLine{
		{Sku: commerce.DemoSKUShirt, Quantity: 1}, {Sku: commerce.DemoSKUMug, Quantity: 1}}})
	require.NoError(t, err)
	_, err = store.Payment().Authorize(ctx, &contracts.AuthorizePaymentReq{
		PaymentId: "pay-1", PaymentMethodId: commerce.DemoMethodOK, Amount: 1, Currency: "EUR"})
	require.NoError(t, err)
	_, _, err = store.Idempotency().Reserve(ctx, "key-1", commerce.Mapping{OrderID: "o"})
	require.NoError(t, err)

	skus := map[string]bool{commerce.DemoSKUShirt: true, commerce.DemoSKUMug: true, commerce.DemoSKUSoldOut: true}
	keys, err := raw.Keys(ctx, "*").Result()
	require.NoError(t, err)
	byKind := map[string]int{}
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, commerce.DefaultKeyPrefix), k)
		rest := strings.TrimPrefix(k, commerce.DefaultKeyPrefix)
		kind, _, _ := strings.Cut(rest, ":")
		byKind[kind]++
		switch kind {
		case "stock", "stockledger", "hold":
			require.True(t, skus[eventstore.HashTag(k)], "%s is tagged by its SKU", k)
		case "reservation":
			require.Equal(t, "res-1", eventstore.HashTag(k), k)
		case "payment":
			require.Equal(t, "pay-1", eventstore.HashTag(k), k)
		case "paymethod":
			require.Contains(t, []string{commerce.DemoMethodOK, commerce.DemoMethodDeclined}, eventstore.HashTag(k), k)
		case "idem":
			require.Equal(t, "o", eventstore.HashTag(k), "%s is tagged by the key's order", k)
		case "cart":
			require.Contains(t, []string{commerce.DemoCartOK, commerce.DemoCartNoStock}, eventstore.HashTag(k), k)
		default:
			t.Errorf("unexpected key %q", k)
		}
	}
	require.Equal(t, map[string]int{"stock": 3, "stockledger": 3, "hold": 2, "reservation": 1,
		"paymethod": 2, "payment": 1, "idem": 1, "cart": 2}, byKind)
}

// Every script the stepped paths run names keys of one hash tag only, so
// Redis Cluster can run it: a hook on the client checks each EVAL and
// EVALSHA while the contract suites run. (A single server takes the
// one-script paths, which span tags by design; the cluster variants of
// the suites count CROSSSLOT on real masters.)
func TestScripts_KeysOfOneTagOnly(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	var scripts, multiKey atomic.Int64
	c.AddHook(sameTagHook{t: t, scripts: &scripts, multiKey: &multiKey})
	var n atomic.Int64
	store := func(t *testing.T) *commerce.Redis {
		r := newRedis(t, commerce.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:cs:", n.Add(1))})
		commerce.UseSteppedPaths(r)
		return r
	}
	t.Run("Idempotency", func(t *testing.T) {
		commercetest.RunIdempotencyContract(t, func(t *testing.T) commerce.Idempotency { return store(t).Idempotency() })
	})
	t.Run("Inventory", func(t *testing.T) {
		commercetest.RunInventoryContract(t, func(t *testing.T) commerce.Inventory { return store(t).Inventory() })
	})
	t.Run("StockLedger", func(t *testing.T) {
		commercetest.RunStockLedgerContract(t, func(t *testing.T) commercetest.LedgeredInventory { return ledgered(store(t)) })
	})
	t.Run("Payment", func(t *testing.T) {
		commercetest.RunPaymentContract(t, func(t *testing.T) commerce.Payment { return store(t).Payment() })
	})
	t.Run("Seed", func(t *testing.T) {
		require.NoError(t, store(t).ApplySeed(t.Context(), commerce.DemoSeed()))
	})
	require.Positive(t, multiKey.Load(), "multi-key scripts ran")
	t.Logf("%d scripts, %d of them over several keys, each of one tag", scripts.Load(), multiKey.Load())
}

type sameTagHook struct {
	t                 *testing.T
	scripts, multiKey *atomic.Int64
}

func (sameTagHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h sameTagHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check(cmd)
		return next(ctx, cmd)
	}
}

func (h sameTagHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.check(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h sameTagHook) check(cmd redis.Cmder) {
	name := strings.ToLower(cmd.Name())
	if name != "eval" && name != "evalsha" {
		return
	}
	args := cmd.Args()
	numKeys, ok := args[2].(int)
	if !ok {
		h.t.Errorf("%s: numkeys is %T", name, args[2])
		return
	}
	h.scripts.Add(1)
	if numKeys > 1 {
		h.multiKey.Add(1)
	}
	tags := map[string]bool{}
	for _, k := range args[3 : 3+numKeys] {
		tags[eventstore.HashTag(k.(string))] = true
	}
	if len(tags) > 1 {
		h.t.Errorf("a script spans hash tags %v: %v", tags, args[3:3+numKeys])
	}
}

func TestRedis_KeyPrefix(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client()
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	one := newRedis(t, commerce.Config{Client: raw, KeyPrefix: "one:"})
	two := newRedis(t, commerce.Config{Client: raw, KeyPrefix: "two:"})
	require.NoError(t, one.Inventory().SetStock(ctx, "a", 3))
	n, err := two.Inventory().Stock(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, n, "prefixes separate stores on one server")
	exists, err := raw.Exists(ctx, "one:stock:{a}").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, exists)
}

func TestRedisConfigErrors(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client()
	t.Cleanup(func() { _ = raw.Close() })
	for name, cfg := range map[string]commerce.Config{
		"nil client":      {},
		"prefix with tag": {Client: raw, KeyPrefix: "x{y}:"},
	} {
		s, err := commerce.NewRedis(cfg)
		require.ErrorIs(t, err, commerce.ErrConfig, name)
		require.Nil(t, s, name)
		t.Logf("%s: %v", name, err)
	}
}

func TestContextCancelled(t *testing.T) {
	store, _ := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := store.Carts().GetCart(ctx, "cart-1")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, commerce.ErrNotFound)
}

// The ledger keeps about Config.LedgerMaxLen movements per SKU: the
// oldest go in the same script as an append (MAXLEN ~ drops whole stream
// nodes, 100 entries each by default), and what is kept still explains
// the stock. On the one-script and the stepped paths, through seeds,
// reservations, refusals and releases; a negative cap keeps everything.
func TestLedgerIsTrimmedToItsCap(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	const reserves, releases = 400, 100
	for _, stepped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stepped=%v", stepped), func(t *testing.T) {
			s := newRedis(t, commerce.Config{Client: c, KeyPrefix: fmt.Sprintf("trim%v:", stepped), LedgerMaxLen: 10})
			if stepped {
				commerce.UseSteppedPaths(s)
			}
			inv, ledger := s.Inventory(), s.Ledger()
			ctx := t.Context()
			require.NoError(t, inv.SetStock(ctx, "sku-t", reserves))
			line := func(q int32) []*contracts.OrderLine { return []*contracts.OrderLine{{Sku: "sku-t", Quantity: q}} }
			for i := range reserves {
				res, err := inv.Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: fmt.Sprintf("r%d", i), OrderId: fmt.Sprintf("o%d", i), Lines: line(1)})
				require.NoError(t, err)
				require.True(t, res.GetAccepted())
			}
			res, err := inv.Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: "short", OrderId: "o-short", Lines: line(1)})
			require.NoError(t, err)
			require.False(t, res.GetAccepted(), "the stock is gone: a refuse movement")
			for i := range releases {
				res, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{ReservationId: fmt.Sprintf("r%d", i), OrderId: fmt.Sprintf("o%d", i)})
				require.NoError(t, err)
				require.True(t, res.GetReleased())
			}

			a, err := ledger.Audit(ctx, "sku-t")
			require.NoError(t, err)
			require.True(t, a.Consistent(), "the kept movements explain the stock: %+v", a)
			require.EqualValues(t, releases, a.Available)
			made := 1 + reserves + 1 + releases
			require.GreaterOrEqual(t, a.Movements, 10)
			require.Less(t, a.Movements, 10+200, "trimmed: %d of %d movements kept", a.Movements, made)
			rep, err := ledger.StockReport(ctx, "sku-t", 3)
			require.NoError(t, err)
			require.Equal(t, commerce.MovementRelease, rep.Movements[0].Kind, "the newest are kept")
			require.EqualValues(t, releases, rep.Movements[0].Available)
		})
	}

	t.Run("negative keeps every movement", func(t *testing.T) {
		s := newRedis(t, commerce.Config{Client: c, KeyPrefix: "keep:", LedgerMaxLen: -1})
		ctx := t.Context()
		const seeds = 300
		for i := range seeds {
			require.NoError(t, s.Inventory().SetStock(ctx, "sku-k", int64(i%2+5)))
		}
		a, err := s.Ledger().Audit(ctx, "sku-k")
		require.NoError(t, err)
		require.Equal(t, seeds, a.Movements)
		require.True(t, a.Consistent(), "%+v", a)
		require.EqualValues(t, 5, a.Initial, "the first seed")
	})
}
