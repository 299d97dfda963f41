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

// The Location Store contract on a 3-master Redis Cluster through
// go-redis' cluster client (ScanRecords scans every master); StartCluster
// fails the test on any CROSSSLOT reply.
func TestRedisClusterContract(t *testing.T) {
	rc := redistest.StartCluster(t)
	var n atomic.Int64
	locationtest.RunContract(t, func(t *testing.T) location.Store {
		s, err := location.NewRedis(location.Config{Client: rc.Client, KeyPrefix: fmt.Sprintf("t%d:loc:", n.Add(1))})
		require.NoError(t, err)
		return s
	})
}
