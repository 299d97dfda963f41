package clustertest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// commandCounter counts every command a client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Warm calls are served from the pid cache: the caller's Location Store
// sees no command at all.
func TestWarmCallsMakeNoLocationRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	counter := &commandCounter{}
	rc := h.redis.Client()
	rc.AddHook(counter)
	t.Cleanup(func() { _ = rc.Close() })
	loc, err := location.NewRedis(location.Config{Client: rc})
	require.NoError(t, err)
	m, err := cluster.Start(ctxT(t, 20*time.Second), cluster.Config{
		NodeName: "api-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: loc,
		Logger: h.logger("api-a"), FrameworkLogLevel: quietFramework,
	})
	require.NoError(t, err)
	t.Cleanup(m.Crash)
	client := grain.NewClient(m.Lookup)
	waitMembers(t, m.Lookup, 1)

	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err = client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	cold := counter.n.Load()
	require.Positive(t, cold, "the cold call reads the Location Store")
	for i := 0; i < 50; i++ {
		_, err := client.RebuildOrderProjection(ctxT(t, 10*time.Second), &contracts.RebuildOrderProjectionReq{OrderId: req.OrderId})
		require.NoError(t, err)
	}
	require.Equal(t, cold, counter.n.Load(), "warm calls must not touch the Location Store")
}
