package readmodel_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The read model's contracts on a 3-master Redis Cluster through go-redis'
// cluster client: the Store (its ActiveIndex rebuild scans every master),
// the projected append (event and projection in one script on the order's
// slot) and the terminal notices (PUBLISH from that script reaches a
// subscriber on any master). StartCluster fails the test on any CROSSSLOT
// reply.
func TestRedisClusterContracts(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Client
	var n atomic.Int64
	t.Run("Store", func(t *testing.T) {
		readmodeltest.RunContract(t, func(t *testing.T) readmodel.Store {
			return newRedis(t, readmodel.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:rm:", n.Add(1))})
		})
	})
	t.Run("RedisCommitter", func(t *testing.T) {
		readmodeltest.RunProjectedAppendContract(t, func(t *testing.T) readmodeltest.Projected {
			i := n.Add(1)
			return newProjected(t, c, fmt.Sprintf("t%d:es:", i), fmt.Sprintf("t%d:rm:", i))
		})
	})
	t.Run("Terminal", func(t *testing.T) {
		readmodeltest.RunTerminalContract(t, func(t *testing.T) readmodeltest.Watched {
			i := n.Add(1)
			p := newProjected(t, c, fmt.Sprintf("t%d:es:", i), fmt.Sprintf("t%d:rm:", i))
			rm := p.ReadModel.(*readmodel.Redis)
			return readmodeltest.Watched{ReadModel: rm, Watcher: newFeed(t, rm), Append: p.Append, Events: p.Events}
		})
	})
}

// A MOVED reply that outlived the client's redirects (a slot moving in a
// failover) is the store not serving now, never an internal error: a
// client bound to one master reads orders whose slots another serves.
func TestRedisMovedIsUnavailable(t *testing.T) {
	rc := redistest.StartCluster(t)
	c := rc.Nodes()[0].Client()
	t.Cleanup(func() { _ = c.Close() })
	s := newRedis(t, readmodel.Config{Client: c})
	moved := 0
	for i := range 32 {
		_, _, err := s.Get(ctxT(t), fmt.Sprintf("o-moved-%d", i))
		if err == nil || errors.Is(err, readmodel.ErrNotFound) {
			continue
		}
		require.ErrorIs(t, err, readmodel.ErrUnavailable)
		require.Contains(t, err.Error(), "MOVED")
		moved++
	}
	require.Positive(t, moved, "no order's slot was on another master")
}
