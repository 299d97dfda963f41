package clustertest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// BenchmarkMintedStart times a new order's start as the edge makes it (the
// creation lock held, the start travelling with its activation) from an
// API member to a workflow member in one process, on a real redis-server:
// with the grain's Ready commit in the start's append, and with the commit
// made before the first write instead (one Location round trip more, what
// every start cost before). Each iteration's order then runs to its end
// in the background, in both variants alike; the lock and the key are
// taken outside the timer.
func BenchmarkMintedStart(b *testing.B) {
	for _, v := range []struct {
		name    string
		inStart bool
	}{{"ready-in-start", true}, {"ready-committed-first", false}} {
		start := mintedStarter(b, v.inStart)
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ctx, cancel, req := start.prepare(b)
				b.StartTimer()
				_, recorded, err := start.client.StartOrderWorkflow(ctx, req)
				cancel()
				if err != nil || !recorded {
					require.FailNow(b, "start failed", "start %d: recorded=%v err=%v", i, recorded, err)
				}
			}
		})
	}
}

type mintedStart struct {
	h      *harness
	client *grain.Client
	rdb    *redis.Client
}

// mintedStarter starts a workflow member (on stores of its own, whose
// Location Store, unless inStart, hides that it can spell the Ready
// commit out as the start's writes) and an API member, quiet: neither logs
// evidence nor info lines into the benchmark's output.
func mintedStarter(b *testing.B, inStart bool) mintedStart {
	h := newHarness(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wfStores, err := node.OpenStores(ctx, node.RedisURLs{Default: h.redis.URL()}, node.StoreOptions{})
	require.NoError(b, err)
	b.Cleanup(wfStores.Close)
	if !inStart {
		// Only location.Redis's own ReadyWritesFor lets the activator
		// leave the commit to the start.
		wfStores.Location = struct{ location.Store }{wfStores.Location}
	}
	h.startWorkflow("workflow-a", func(c *node.WorkflowConfig) {
		c.Stores, c.Evidence = wfStores, io.Discard
	})
	a := h.startAPI("api-a")
	waitMembers(b, a.member.Lookup, 1)
	rdb := h.redis.Client()
	b.Cleanup(func() { _ = rdb.Close() })
	return mintedStart{h: h, client: a.client, rdb: rdb}
}

// prepare takes a new order's creation lock, as the edge's script does,
// and returns the start with its held-creation ctx. It shares one client
// across the loop: holdCreation's own client per call is too many here.
func (m mintedStart) prepare(b *testing.B) (context.Context, context.CancelFunc, *contracts.StartOrderWorkflowReq) {
	req := m.h.startReq(b, commerce.DemoCartOK, commerce.DemoMethodOK)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return m.h.takeCreation(ctx, b, m.rdb, req.OrderId, "held", "held"), cancel, req
}
