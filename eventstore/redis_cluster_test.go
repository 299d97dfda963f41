package eventstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

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

// A MOVED reply that outlived the client's redirects (a slot moving in a
// failover) is the store not serving now, never an internal error: a
// client bound to one master reads orders whose slots another serves.
func TestRedisMovedIsUnavailable(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Nodes()[0].Client()
	t.Cleanup(func() { _ = c.Close() })
	s := newRedis(t, eventstore.Config{Client: c})
	moved := 0
	for i := range 32 {
		_, err := s.Load(ctxT(t), fmt.Sprintf("o-moved-%d", i))
		if err == nil {
			continue
		}
		require.ErrorIs(t, err, eventstore.ErrUnavailable)
		require.Contains(t, err.Error(), "MOVED")
		moved++
	}
	require.Positive(t, moved, "no order's slot was on another master")
}
