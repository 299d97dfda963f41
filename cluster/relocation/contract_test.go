package relocation_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation/relocationtest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The Redis Relocation Store keeps the contract. The subtests share one
// server; each gets a keyspace of its own.
func TestRedisContract(t *testing.T) {
	c := redistest.Start(t).Client()
	t.Cleanup(func() { _ = c.Close() })
	var n atomic.Int64
	relocationtest.RunContract(t, func(t *testing.T) relocation.Store {
		s, err := relocation.NewRedis(relocation.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:rel:", n.Add(1))})
		require.NoError(t, err)
		return s
	})
}
