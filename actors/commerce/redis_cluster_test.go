package commerce_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// A MOVED reply that outlived the client's redirects (a slot moving in a
// failover) is the store not serving now, never an internal error: a
// client bound to one master reads payments whose slots another serves.
func TestRedisMovedIsUnavailable(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Nodes()[0].Client()
	t.Cleanup(func() { _ = c.Close() })
	s := newRedis(t, commerce.Config{Client: c})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	moved := 0
	for i := range 32 {
		_, err := s.Payment().Captured(ctx, fmt.Sprintf("pay-moved-%d", i))
		if err == nil {
			continue
		}
		require.ErrorIs(t, err, commerce.ErrUnavailable)
		require.Contains(t, err.Error(), "MOVED")
		moved++
	}
	require.Positive(t, moved, "no payment's slot was on another master")
}
