package commerce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

const validSeed = `{
  "carts": [
    {"cartId": "cart-1", "lines": [{"sku": "a", "quantity": 2}, {"sku": "b", "quantity": 1}], "amount": 4870, "currency": "EUR"}
  ],
  "stock": {"a": 5, "b": 0},
  "paymentMethods": [
    {"methodId": "pm-ok", "approve": true},
    {"methodId": "pm-no", "approve": false, "reason": "card declined"}
  ]
}`

func TestLoadSeed_ValidAppliesToStore(t *testing.T) {
	seed, err := commerce.LoadSeed(strings.NewReader(validSeed))
	require.NoError(t, err)
	require.Len(t, seed.Carts, 1)
	require.Equal(t, "cart-1", seed.Carts[0].CartID)
	require.Equal(t, int64(4870), seed.Carts[0].Amount)
	require.Len(t, seed.Carts[0].Lines, 2)
	require.Equal(t, "a", seed.Carts[0].Lines[0].GetSku())
	require.Equal(t, int32(2), seed.Carts[0].Lines[0].GetQuantity())
	require.Equal(t, map[string]int64{"a": 5, "b": 0}, seed.Stock)
	require.Equal(t, []commerce.PaymentMethod{
		{MethodID: "pm-ok", Approve: true},
		{MethodID: "pm-no", Approve: false, Reason: "card declined"},
	}, seed.Methods)

	store, _ := newStore(t)
	ctx := t.Context()
	require.NoError(t, store.ApplySeed(ctx, seed))
	cart, err := store.Carts().GetCart(ctx, "cart-1")
	require.NoError(t, err)
	require.Equal(t, "EUR", cart.Currency)
	a, err := store.Inventory().Stock(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(5), a)
	m, err := store.Payment().GetMethod(ctx, "pm-no")
	require.NoError(t, err)
	require.Equal(t, commerce.PaymentMethod{MethodID: "pm-no", Reason: "card declined"}, m)

	// The JSON form round-trips.
	b, err := json.Marshal(seed)
	require.NoError(t, err)
	again, err := commerce.LoadSeed(strings.NewReader(string(b)))
	require.NoError(t, err)
	b2, err := json.Marshal(again)
	require.NoError(t, err)
	require.JSONEq(t, string(b), string(b2))
	require.JSONEq(t, validSeed, string(b))
}

func TestLoadSeed_ValidationErrors(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"not json":         {`{`, "unexpected EOF"},
		"trailing data":    {`{} {}`, "trailing data"},
		"unknown field":    {`{"cart": []}`, `unknown field "cart"`},
		"unknown in cart":  {`{"carts": [{"cartId": "c", "price": 1}]}`, `unknown field "price"`},
		"unknown in line":  {`{"carts": [{"cartId": "c", "lines": [{"sku": "a", "qty": 1}]}]}`, `unknown field "qty"`},
		"empty cart id":    {`{"carts": [{"lines": [{"sku": "a", "quantity": 1}], "amount": 1, "currency": "EUR"}]}`, "carts[0]: cartId is empty"},
		"no lines":         {`{"carts": [{"cartId": "c", "amount": 1, "currency": "EUR"}]}`, `carts[0]: cart "c" has no lines`},
		"empty sku":        {`{"carts": [{"cartId": "c", "lines": [{"quantity": 1}], "amount": 1, "currency": "EUR"}]}`, "lines[0]: sku is empty"},
		"zero quantity":    {`{"carts": [{"cartId": "c", "lines": [{"sku": "a", "quantity": 0}], "amount": 1, "currency": "EUR"}]}`, "quantity 0, want > 0"},
		"negative amount":  {`{"carts": [{"cartId": "c", "lines": [{"sku": "a", "quantity": 1}], "amount": -1, "currency": "EUR"}]}`, "amount -1 is negative"},
		"bad currency":     {`{"carts": [{"cartId": "c", "lines": [{"sku": "a", "quantity": 1}], "amount": 1, "currency": "euro"}]}`, `currency "euro"`},
		"fractional money": {`{"carts": [{"cartId": "c", "lines": [{"sku": "a", "quantity": 1}], "amount": 12.5, "currency": "EUR"}]}`, "cannot unmarshal number 12.5"},
		"duplicate cart": {`{"carts": [{"cartId": "c", "lines": [{"sku": "a", "quantity": 1}], "amount": 1, "currency": "EUR"},
			{"cartId": "c", "lines": [{"sku": "a", "quantity": 1}], "amount": 1, "currency": "EUR"}]}`, `carts[1]: duplicate cartId "c"`},
		"negative stock":   {`{"stock": {"a": -1}}`, `stock["a"]: -1, want >= 0`},
		"empty stock sku":  {`{"stock": {"": 1}}`, "stock: empty sku"},
		"empty method id":  {`{"paymentMethods": [{"approve": true}]}`, "paymentMethods[0]: methodId is empty"},
		"approve + reason": {`{"paymentMethods": [{"methodId": "m", "approve": true, "reason": "x"}]}`, "approves but has a decline reason"},
		"duplicate method": {`{"paymentMethods": [{"methodId": "m", "approve": true}, {"methodId": "m"}]}`, `paymentMethods[1]: duplicate methodId "m"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := commerce.LoadSeed(strings.NewReader(tc.json))
			require.Error(t, err)
			require.ErrorIs(t, err, commerce.ErrInvalidArgument)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestSeed_ValidateReportsEveryProblem(t *testing.T) {
	err := commerce.Seed{
		Carts:   []commerce.Cart{{CartID: "c", Currency: "EUR"}},
		Stock:   map[string]int64{"a": -5},
		Methods: []commerce.PaymentMethod{{}},
	}.Validate()
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
	for _, want := range []string{"carts[0]", `stock["a"]`, "paymentMethods[0]"} {
		require.Contains(t, err.Error(), want)
	}
}

func TestApplySeed_RefusesInvalidSeedAndWritesNothing(t *testing.T) {
	store, raw := newStore(t)
	ctx := t.Context()
	err := store.ApplySeed(ctx, commerce.Seed{
		Stock:   map[string]int64{"a": 5},
		Methods: []commerce.PaymentMethod{{MethodID: ""}},
	})
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
	n, err := raw.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestDemoSeed_AppliesAndDrivesAllThreePaths(t *testing.T) {
	store, _ := newStore(t)
	ctx := t.Context()
	seed := commerce.DemoSeed()
	require.NoError(t, seed.Validate())
	require.NoError(t, store.ApplySeed(ctx, seed))
	require.NoError(t, store.ApplySeed(ctx, seed), "applying again converges")

	ok, err := store.Carts().GetCart(ctx, commerce.DemoCartOK)
	require.NoError(t, err)
	require.Len(t, ok.Lines, 2)
	require.Equal(t, int64(4870), ok.Amount)
	for _, l := range ok.Lines {
		stock, err := store.Inventory().Stock(ctx, l.GetSku())
		require.NoError(t, err)
		require.Equal(t, int64(1_000_000), stock, l.GetSku())
	}

	// Success path: stock is taken and payment approved.
	res, err := store.Inventory().Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: "r-ok", Lines: ok.Lines})
	require.NoError(t, err)
	require.True(t, res.GetAccepted())
	pay, err := store.Payment().Authorize(ctx, &contracts.AuthorizePaymentReq{
		PaymentId: "p-ok", PaymentMethodId: commerce.DemoMethodOK, Amount: ok.Amount, Currency: ok.Currency})
	require.NoError(t, err)
	require.True(t, pay.GetAccepted())

	// Payment-failure path.
	pay, err = store.Payment().Authorize(ctx, &contracts.AuthorizePaymentReq{
		PaymentId: "p-no", PaymentMethodId: commerce.DemoMethodDeclined, Amount: ok.Amount, Currency: ok.Currency})
	require.NoError(t, err)
	require.False(t, pay.GetAccepted())
	require.Equal(t, "card declined", pay.GetReason())

	// Inventory-failure path.
	none, err := store.Carts().GetCart(ctx, commerce.DemoCartNoStock)
	require.NoError(t, err)
	require.Len(t, none.Lines, 1)
	require.Equal(t, commerce.DemoSKUSoldOut, none.Lines[0].GetSku())
	res, err = store.Inventory().Reserve(ctx, &contracts.ReserveInventoryReq{ReservationId: "r-no", Lines: none.Lines})
	require.NoError(t, err)
	require.False(t, res.GetAccepted())
	require.Contains(t, res.GetReason(), "insufficient stock for "+commerce.DemoSKUSoldOut)
}

// A seed started while its Redis is down lands once Redis is back, after
// failed attempts it reports; an invalid seed fails at once; a Redis that
// never comes back ends the seed with the caller's context, naming the
// last attempt's failure.
func TestApplySeedRetryingRidesOutARedisThatIsDown(t *testing.T) {
	r := redistest.StartRestartable(t)
	rc, err := redisurl.NewClient(r.Server().URL(), redisurl.Options{})
	require.NoError(t, err)
	defer rc.Close()
	store, err := commerce.NewRedis(commerce.Config{Client: rc})
	require.NoError(t, err)
	require.ErrorIs(t, store.ApplySeedRetrying(context.Background(), commerce.Seed{Stock: map[string]int64{"a": -1}}, nil),
		commerce.ErrInvalidArgument, "an invalid seed is not retried")

	r.Down()
	var mu sync.Mutex
	var failed []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, fmt.Sprintf(format, args...))
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- store.ApplySeedRetrying(ctx, commerce.DemoSeed(), logf)
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(failed) >= 2
	}, 10*time.Second, 10*time.Millisecond, "no failed attempt reported while Redis is down")
	r.Up()
	require.NoError(t, <-done)
	n, err := rc.Get(context.Background(), commerce.DefaultKeyPrefix+"stock:{"+commerce.DemoSKUShirt+"}").Int64()
	require.NoError(t, err, "the seed landed")
	require.Positive(t, n)
	t.Logf("failed attempts while down: %q", failed)

	r.Down()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = store.ApplySeedRetrying(ctx, commerce.DemoSeed(), nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "last attempt")
}
