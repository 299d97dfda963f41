package clustertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// echoKind is a grain that answers every request with the request itself,
// so the benchmark measures placement, context and remoting, not a grain.
const echoKind = "bench.echo"

type echoGrain struct{}

func (echoGrain) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*contracts.GetOrderStateReq); ok {
		ctx.Respond(m)
	}
}

func newEchoKind() *pcluster.Kind {
	return pcluster.NewKind(echoKind, actor.PropsFromProducer(func() actor.Actor { return echoGrain{} }))
}

// silentSystem is an actor system whose framework logs are discarded: at
// thousands of calls per second any log line would dominate the figure.
func silentSystem() *actor.ActorSystem {
	quiet := slog.New(slog.DiscardHandler)
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
}

// BenchmarkWarmCall compares one warm grain request through our Location
// Store lookup and context with the same request through protoactor's
// stock disthash lookup and default context. Each variant runs two members
// on the in-memory test provider; only one hosts the echo kind and the
// other one calls, so every request crosses remoting. The grain is
// activated before the timer starts, so neither variant touches Redis or a
// placement actor inside the loop.
func BenchmarkWarmCall(b *testing.B) {
	// Members are started here, once per variant, not inside b.Run: the
	// sub-benchmark function runs more than once (N=1, then the requested
	// N) and a member start costs over a second. Each pair is stopped
	// before the next starts so the variants do not share the CPU.
	call, stop := locationPair(b)
	b.Run("location", func(b *testing.B) { runWarm(b, call) })
	stop()
	call, stop = disthashPair(b)
	b.Run("disthash", func(b *testing.B) { runWarm(b, call) })
	stop()
}

type callFunc func(msg *contracts.GetOrderStateReq) (any, error)

func runWarm(b *testing.B, call callFunc) {
	msg := &contracts.GetOrderStateReq{OrderId: "echo-1"}
	// Activation (and, for the Location Store, its Redis round trips)
	// happens here, outside the measurement.
	var res any
	require.EventuallyWithT(b, func(c *assert.CollectT) {
		var err error
		res, err = call(msg)
		require.NoError(c, err)
	}, 10*time.Second, 10*time.Millisecond, "warm-up call never succeeded")
	r, ok := res.(*contracts.GetOrderStateReq)
	require.True(b, ok, "warm-up: unexpected reply %T %v", res, res)
	require.Equal(b, msg.OrderId, r.GetOrderId(), "warm-up reply")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := call(msg)
		if err != nil {
			require.NoError(b, err, "call %d", i)
		}
		if _, ok := res.(*contracts.GetOrderStateReq); !ok {
			require.FailNow(b, "unexpected reply", "call %d: %T", i, res)
		}
	}
	b.StopTimer()
}

func locationPair(b *testing.B) (callFunc, func()) {
	srv := redistest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stores, err := node.OpenStores(ctx, node.RedisURLs{Default: srv.URL()}, node.StoreOptions{})
	require.NoError(b, err)
	agent := test.NewInMemAgent()
	quiet := slog.New(slog.DiscardHandler)
	start := func(name string, kinds ...*pcluster.Kind) *cluster.Member {
		m, err := cluster.Start(ctx, cluster.Config{
			NodeName: name, Provider: cluster.ProviderTest, TestAgent: agent,
			RefreshTTL: 100 * time.Millisecond, Location: stores.Location,
			Kinds: kinds, Logger: quiet, FrameworkLogLevel: quietFramework,
		})
		require.NoError(b, err)
		return m
	}
	host := start("bench-host", newEchoKind())
	caller := start("bench-caller")
	require.Eventually(b, func() bool { return len(caller.Lookup.Eligible(echoKind)) == 1 }, 10*time.Second, 10*time.Millisecond, "caller to see the host")
	stop := func() {
		caller.Crash()
		host.Crash()
		stores.Close()
	}
	cctx := placement.NewContext(caller.Lookup)
	return func(msg *contracts.GetOrderStateReq) (any, error) {
		return cctx.Request(msg.GetOrderId(), echoKind, msg, pcluster.WithTimeout(5*time.Second))
	}, stop
}

func disthashPair(b *testing.B) (callFunc, func()) {
	agent := test.NewInMemAgent()
	start := func(kinds ...*pcluster.Kind) *pcluster.Cluster {
		provider := test.NewTestProvider(agent, test.WithTestProviderRefreshTtl(100*time.Millisecond))
		cfg := pcluster.Configure(cluster.Name, provider, disthash.New(), remote.Configure("127.0.0.1", 0),
			pcluster.WithKinds(kinds...), pcluster.WithRequestTimeout(5*time.Second))
		c := pcluster.New(silentSystem(), cfg)
		c.StartMember()
		return c
	}
	host := start(newEchoKind())
	caller := start()
	require.Eventually(b, func() bool { return caller.MemberList.Members().Len() == 2 }, 10*time.Second, 10*time.Millisecond, "caller to see the host")
	stop := func() {
		caller.Shutdown(false)
		host.Shutdown(false)
	}
	return func(msg *contracts.GetOrderStateReq) (any, error) {
		return caller.Request(msg.GetOrderId(), echoKind, msg, pcluster.WithTimeout(5*time.Second))
	}, stop
}
