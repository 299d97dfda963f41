package main

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// seedIDs names this run's catalogue: its own carts, SKUs and methods, so
// a run never shares stock with another.
type seedIDs struct {
	CartOK, CartNoStock         string
	MethodOK, MethodDeclined    string
	SKUShirt, SKUMug, SKUNoneOf string
}

// ampleStock outlasts any run: a success takes 3 units.
const ampleStock = 1_000_000_000

func seed(ctx context.Context, rdb redis.UniversalClient, run string) (seedIDs, error) {
	ids := seedIDs{
		CartOK: "cart-" + run + "-ok", CartNoStock: "cart-" + run + "-nostock",
		MethodOK: "pm-" + run + "-ok", MethodDeclined: "pm-" + run + "-declined",
		SKUShirt: "sku-" + run + "-shirt", SKUMug: "sku-" + run + "-mug", SKUNoneOf: "sku-" + run + "-soldout",
	}
	s := commerce.Seed{
		Carts: []commerce.Cart{
			{CartID: ids.CartOK, Lines: []*contracts.OrderLine{{Sku: ids.SKUShirt, Quantity: 2}, {Sku: ids.SKUMug, Quantity: 1}},
				Amount: 2*1990 + 890, Currency: "EUR"},
			{CartID: ids.CartNoStock, Lines: []*contracts.OrderLine{{Sku: ids.SKUNoneOf, Quantity: 1}},
				Amount: 4990, Currency: "EUR"},
		},
		Stock: map[string]int64{ids.SKUShirt: ampleStock, ids.SKUMug: ampleStock, ids.SKUNoneOf: 0},
		Methods: []commerce.PaymentMethod{
			{MethodID: ids.MethodOK, Approve: true},
			{MethodID: ids.MethodDeclined, Approve: false, Reason: "card declined"},
		},
	}
	cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
	if err != nil {
		return ids, err
	}
	if err := cs.ApplySeed(ctx, s); err != nil {
		return ids, err
	}
	return ids, seedLegacy(ctx, rdb, s)
}

// seedLegacy writes the same stock and payment methods in the layout of
// commits before stock moved to one slot per SKU (48b0936): stock under
// the shared {inventory} tag and methods under {payment}. A baseline built
// from such a commit (BENCH_BASELINE) reads only these; without them every
// one of its orders fails for want of stock and the comparison is void.
// The current binaries never read them.
func seedLegacy(ctx context.Context, rdb redis.UniversalClient, s commerce.Seed) error {
	const prefix = commerce.DefaultKeyPrefix
	for sku, n := range s.Stock {
		if err := rdb.Set(ctx, prefix+"stock:{inventory}:"+sku, n, 0).Err(); err != nil {
			return err
		}
	}
	for _, m := range s.Methods {
		approve := "0"
		if m.Approve {
			approve = "1"
		}
		if err := rdb.HSet(ctx, prefix+"paymethod:{payment}:"+m.MethodID, "approve", approve, "reason", m.Reason).Err(); err != nil {
			return err
		}
	}
	return nil
}
