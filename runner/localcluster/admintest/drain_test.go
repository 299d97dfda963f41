package admintest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// A planned stop of a workflow member (SIGTERM, its drain) records the
// member gone before it leaves, so no API takes the loss for a partition:
// without the record an API saw the member leave its topology while its
// heartbeat was fresh and its port still open, and left to rejoin as a
// new member (exit 4) at every rolling restart. Both APIs keep running as
// the processes they were, and serve orders on the member that stays.
func TestADrainedMemberIsRecordedGoneAndNoAPIRejoins(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opt, err := redis.ParseURL(e.c.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)
	names, err := loc.MemberNames(ctx)
	require.NoError(t, err)
	var member string
	for id, n := range names {
		if n == localcluster.WorkflowA {
			member = id
		}
	}
	require.NotEmpty(t, member, "%s published its name: %v", localcluster.WorkflowA, names)
	pids := map[string]int{}
	offsets := map[string]int64{}
	for _, api := range localcluster.APINodes {
		pids[api] = e.c.PID(api)
		offsets[api], err = localcluster.LogSize(e.c.LogPath(api))
		require.NoError(t, err)
	}

	require.NoError(t, e.c.Drain(localcluster.WorkflowA))
	gone, err := loc.Gone(ctx)
	require.NoError(t, err)
	require.Contains(t, gone, member, "the drained member recorded itself gone before it left")
	require.Equal(t, localcluster.WorkflowA, gone[member].Node)
	for _, api := range localcluster.APINodes {
		require.NoError(t, localcluster.WaitLines(ctx, e.c.LogPath(api), offsets[api], localcluster.DefaultPoll,
			localcluster.Lines(localcluster.Exact("shoppingmall-topology left node="+api+" target="+localcluster.WorkflowA))...))
	}
	// An API decides to rejoin on its first look at the lost member, at
	// once; an order started and finished through each API after both saw
	// the loss is well past that look.
	for i, api := range localcluster.APINodes {
		res, rep, err := e.public[api].StartOrder(ctx, &contracts.StartOrderReq{
			CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: fmt.Sprintf("drain-%d-%d", i, time.Now().UnixNano())})
		require.NoError(t, err)
		require.True(t, rep.OK(), "%s", rep)
		e.waitStatus(res.GetOrderId(), contracts.OrderStatus_Confirmed)
	}
	for _, api := range localcluster.APINodes {
		require.True(t, e.c.Running(api), "%s still runs", api)
		require.Equal(t, pids[api], e.c.PID(api), "%s is the process it was", api)
		n, err := localcluster.CountLines(e.c.LogPath(api), offsets[api], localcluster.Pattern(`rejoining the cluster`))
		require.NoError(t, err)
		require.Zero(t, n, "%s did not leave to rejoin", api)
	}
}
