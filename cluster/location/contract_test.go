package location_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/location/locationtest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The Redis Location Store keeps the contract. The subtests share one
// server; each gets a keyspace of its own.
func TestRedisContract(t *testing.T) {
	c := redistest.Start(t).Client()
	t.Cleanup(func() { _ = c.Close() })
	var n atomic.Int64
	locationtest.RunContract(t, func(t *testing.T) location.Store {
		s, err := location.NewRedis(location.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:loc:", n.Add(1))})
		require.NoError(t, err)
		return s
	})
}
