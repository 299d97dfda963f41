package location_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// The heartbeat and the gone record are read and written by one script,
// which a Redis Cluster runs only when both keys share a slot: the probe
// and the stale-heartbeat mark answer there as on one server, with no
// CROSSSLOT.
func TestRedisClusterHeartbeatSharesTheGoneSlot(t *testing.T) {
	rc := redistest.StartCluster(t)
	s, err := location.NewRedis(location.Config{Client: rc.Client, KeyPrefix: "hb:loc:"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, gone, err := s.ProbeSelf(ctx, "m-1", 200*time.Millisecond)
	require.NoError(t, err)
	require.False(t, gone)
	v, err := s.MarkGoneIfStale(ctx, "m-1", "workflow-a", 42)
	require.NoError(t, err)
	require.True(t, v.Fresh, "%+v", v)
	require.Eventually(t, func() bool {
		v, err := s.MarkGoneIfStale(ctx, "m-1", "workflow-a", 42)
		return err == nil && v.Won && v.Gone
	}, 5*time.Second, 50*time.Millisecond)
	_, gone, err = s.ProbeSelf(ctx, "m-1", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, gone)
}
