package readmodel_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The read model's contracts on a 3-master Redis Cluster through go-redis'
// cluster client: the Store (its ActiveIndex rebuild scans every master),
// the projected append (event and projection in one script on the order's
// slot) and the terminal notices (SPUBLISH from that script, on the
// order's channel in its slot). StartCluster fails the test on any CROSSSLOT
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

// On a Redis Cluster a shard channel is served by its slot's master
// only: the feed subscribes to each waited order's channel on that master,
// one connection per master whatever the number of orders, and every
// waiter is woken by its order's terminal write.
func TestRedisClusterFeedSubscribesOnEachOrdersMaster(t *testing.T) {
	const orders = 30
	rc := redistest.StartCluster(t)
	s := newRedis(t, readmodel.Config{Client: rc.Client, Logger: tLogger(t)})
	f := newFeed(t, s)
	id := func(i int) string { return fmt.Sprintf("spread-%d", i) }
	wakes := make([]<-chan struct{}, orders)
	for i := range orders {
		mustApply(t, s, id(i), 1, orderState(id(i), contracts.OrderStatus_Created, 1))
		wake, stop := f.Watch(id(i))
		t.Cleanup(stop)
		wakes[i] = wake
	}
	require.EqualValues(t, orders, f.OrderSubscriptions())
	masters := 0
	for _, n := range rc.Nodes() {
		c := n.Client()
		list, err := c.ClientList(ctxT(t)).Result()
		require.NoError(t, c.Close())
		require.NoError(t, err)
		shard := strings.Count(list, " ssub=") - strings.Count(list, " ssub=0 ")
		require.LessOrEqual(t, shard, 1, "one connection for the order channels of this master's slots")
		masters += shard
	}
	require.Equal(t, 3, masters, "%d orders spread over the three masters", orders)
	for i := range orders {
		mustApply(t, s, id(i), 2, orderState(id(i), contracts.OrderStatus_Confirmed, 2))
		recv(t, wakes[i], id(i)+"'s terminal write on its master")
	}
}
