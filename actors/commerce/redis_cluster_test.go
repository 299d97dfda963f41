package commerce_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/commerce/commercetest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The contract suites on a 3-master Redis Cluster through go-redis'
// cluster client, every subtest under a key prefix of its own;
// StartCluster fails the test on any CROSSSLOT reply, so a script over
// keys of several slots fails here even where the store handles the
// error.
func TestRedisClusterContracts(t *testing.T) {
	rc := redistest.StartCluster(t)
	var n atomic.Int64
	store := func(t *testing.T) *commerce.Redis {
		return newRedis(t, commerce.Config{Client: rc.Client, KeyPrefix: fmt.Sprintf("t%d:cs:", n.Add(1))})
	}
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
