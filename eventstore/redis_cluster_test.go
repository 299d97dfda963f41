package eventstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/eventstoretest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The Store contract on a 3-master Redis Cluster through go-redis'
// cluster client; StartCluster fails the test on any CROSSSLOT reply.
func TestRedisClusterContract(t *testing.T) {
	rc := redistest.StartCluster(t)
	var n atomic.Int64
	eventstoretest.RunContract(t, func(t *testing.T) eventstore.Store {
		i := n.Add(1)
		if i%2 == 0 {
			return newRedis(t, eventstore.Config{Client: rc.Client})
		}
		return newRedis(t, eventstore.Config{Client: rc.Client, KeyPrefix: fmt.Sprintf("t%d:es:", i)})
	})
}

// The StreamChecker contract on the same kind of cluster: EXISTS routes
// by the stream key's hash tag.
func TestRedisClusterStreamCheckerContract(t *testing.T) {
	rc := redistest.StartCluster(t)
	eventstoretest.RunStreamCheckerContract(t, func(t *testing.T) eventstoretest.CheckedStore {
		return newRedis(t, eventstore.Config{Client: rc.Client})
	})
}
