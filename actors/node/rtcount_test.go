package node

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

func TestRoundTripsCountsCommandsAndPipelines(t *testing.T) {
	srv := redisserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt := &RoundTrips{}
	c := srv.Client()
	defer c.Close()
	c.AddHook(rt)

	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, "v", c.Get(ctx, "k").Val())
	require.ErrorIs(t, c.Get(ctx, "missing").Err(), redis.Nil)
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "n")
		p.Incr(ctx, "n")
		p.Get(ctx, "k")
		return nil
	})
	require.NoError(t, err)
	// A script not yet cached costs EVALSHA (NOSCRIPT) then EVAL.
	s := redis.NewScript(`return 1`)
	require.NoError(t, s.Run(ctx, c, nil).Err())
	require.NoError(t, s.Run(ctx, c, nil).Err())

	snap := rt.Snapshot()
	t.Logf("snapshot %v", snap)
	// The connection handshake (HELLO, CLIENT SETINFO) goes through the
	// hooks too; it is counted apart, so only our calls are round trips.
	require.GreaterOrEqual(t, snap[RoundTripsConnSetup], int64(1))
	require.Zero(t, snap["hello"])
	require.Equal(t, int64(3+1+3), snap[RoundTripsTotal]) // set, get, get, pipeline, evalsha, eval, evalsha
	require.Equal(t, int64(3+3+3), snap[RoundTripsCommands])
	require.Equal(t, int64(1), snap[RoundTripsPipelines])
	require.Equal(t, int64(1), snap["set"])
	require.Equal(t, int64(3), snap["get"])
	require.Equal(t, int64(2), snap["incr"])
	require.Equal(t, int64(2), snap["evalsha"])
	require.Equal(t, int64(1), snap["eval"])
}

func TestRoundTripsThroughOpenStores(t *testing.T) {
	srv := redisserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt := &RoundTrips{}
	s, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{Hook: rt})
	require.NoError(t, err)
	defer s.Close()
	// OpenStores checks the one shared client with a PING.
	require.Equal(t, int64(1), rt.Snapshot()["ping"])
	_, _, err = s.ReadModel.Get(ctx, "ord-none")
	require.Error(t, err)
	snap := rt.Snapshot()
	require.Equal(t, int64(1), snap["hmget"])
	require.Equal(t, int64(2), snap[RoundTripsTotal])
}
