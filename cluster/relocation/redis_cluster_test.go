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

// The Relocation Store contract on a 3-master Redis Cluster through
// go-redis' cluster client; StartCluster fails the test on any CROSSSLOT
// reply.
func TestRedisClusterContract(t *testing.T) {
	rc := redistest.StartCluster(t)
	var n atomic.Int64
	relocationtest.RunContract(t, func(t *testing.T) relocation.Store {
		s, err := relocation.NewRedis(relocation.Config{Client: rc.Client, KeyPrefix: fmt.Sprintf("t%d:rel:", n.Add(1))})
		require.NoError(t, err)
		return s
	})
}
