package clustertest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := call(msg)
		if err == nil {
			if r, ok := res.(*contracts.GetOrderStateReq); !ok || r.GetOrderId() != msg.OrderId {
				b.Fatalf("warm-up: unexpected reply %T %v", res, res)
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("warm-up call never succeeded: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := call(msg)
		if err != nil {
			b.Fatalf("call %d: %v", i, err)
		}
		if _, ok := res.(*contracts.GetOrderStateReq); !ok {
			b.Fatalf("call %d: unexpected reply %T", i, res)
		}
	}
	b.StopTimer()
}

func locationPair(b *testing.B) (callFunc, func()) {
	srv := redisserver.ForTest(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stores, err := node.OpenStores(ctx, node.RedisURLs{Default: srv.URL()}, node.StoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	agent := test.NewInMemAgent()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(name string, kinds ...*pcluster.Kind) *cluster.Member {
		m, err := cluster.Start(ctx, cluster.Config{
			NodeName: name, Provider: cluster.ProviderTest, TestAgent: agent,
			RefreshTTL: 100 * time.Millisecond, Location: stores.Location,
			Kinds: kinds, Logger: quiet, FrameworkLogLevel: quietFramework,
		})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	host := start("bench-host", newEchoKind())
	caller := start("bench-caller")
	eventuallyB(b, func() bool { return len(caller.Lookup.Eligible(echoKind)) == 1 }, "caller to see the host")
	stop := func() {
		caller.Crash()
		host.Crash()
		stores.Close()
	}
	cctx := location.NewContext(caller.Lookup)
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
	eventuallyB(b, func() bool { return caller.MemberList.Members().Len() == 2 }, "caller to see the host")
	stop := func() {
		caller.Shutdown(false)
		host.Shutdown(false)
	}
	return func(msg *contracts.GetOrderStateReq) (any, error) {
		return caller.Request(msg.GetOrderId(), echoKind, msg, pcluster.WithTimeout(5*time.Second))
	}, stop
}

func eventuallyB(b *testing.B, cond func() bool, what string) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
