package clustertest

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster"
)

// freePort reserves a loopback port and gives it back for a member to
// bind.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return p
}

// The automanaged provider, as the local cluster runs it: each member
// polls every seed's /_health and its topology holds the members that
// answered. A member whose /_health one observer cannot get (a failed
// poll, or no answer within the provider's 2 s timeout) leaves that
// observer's topology at its next refresh, and protoactor blocks
// its id there for good: it does not come back when it answers again,
// while the members that never lost it keep it. A new incarnation of the
// observer (a new member id, a fresh view) sees it again. That is why an
// API that lost a workflow member rejoins as a new member after a
// partition heals (edgenode.API.Rejoin).
func TestAutomanagedDropsAMemberOneObserverCannotPollAndBlocksItThereForGood(t *testing.T) {
	h := newHarness(t)
	aPort, bPort := freePort(t), freePort(t)
	bURL, err := url.Parse("http://127.0.0.1:" + strconv.Itoa(bPort))
	require.NoError(t, err)
	// api-a reaches workflow-b's endpoint only through this proxy, which
	// the test cuts.
	var cut atomic.Bool
	rp := httputil.NewSingleHostReverseProxy(bURL)
	proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = proxy.Serve(pl) }()
	t.Cleanup(func() { _ = proxy.Close() })

	start := func(name string, port int, seeds ...string) *cluster.Member {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m, err := cluster.Start(ctx, cluster.Config{
			NodeName: name, Provider: cluster.ProviderAutomanaged, AutomanagedPort: port, Seeds: seeds,
			RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger(name),
			FrameworkLogLevel: quietFramework,
		})
		require.NoError(t, err)
		return m
	}
	aSeed, bSeed := "127.0.0.1:"+strconv.Itoa(aPort), "127.0.0.1:"+strconv.Itoa(bPort)
	b := start("workflow-b", bPort, aSeed, bSeed)
	t.Cleanup(b.Stop)
	a := start("api-a", aPort, aSeed, pl.Addr().String())
	stopA := a.Stop
	t.Cleanup(func() { stopA() })
	require.Eventually(t, func() bool { return a.Lookup.Live(b.ID()) && b.Lookup.Live(a.ID()) },
		10*time.Second, 20*time.Millisecond, "both see each other")

	cut.Store(true)
	cutAt := time.Now()
	require.Eventually(t, func() bool { return !a.Lookup.Live(b.ID()) }, 10*time.Second, 20*time.Millisecond,
		"api-a drops the member it cannot poll")
	t.Logf("api-a dropped workflow-b %s after the cut", time.Since(cutAt).Round(time.Millisecond))
	require.True(t, b.Lookup.Live(a.ID()), "workflow-b, which polls api-a directly, keeps it")
	require.True(t, a.Cluster.Remote.BlockList().IsBlocked(b.ID()), "protoactor blocks the dropped id")

	cut.Store(false)
	require.Never(t, func() bool { return a.Lookup.Live(b.ID()) }, 2*time.Second, 50*time.Millisecond,
		"a blocked member came back into api-a's topology")

	// A new incarnation of api-a sees it again.
	a.Stop()
	a2 := start("api-a", aPort, aSeed, pl.Addr().String())
	stopA = a2.Stop
	require.NotEqual(t, a.ID(), a2.ID())
	require.Eventually(t, func() bool { return a2.Lookup.Live(b.ID()) }, 10*time.Second, 20*time.Millisecond,
		"the new incarnation sees workflow-b")
	require.Eventually(t, func() bool { return b.Lookup.Live(a2.ID()) && !b.Lookup.Live(a.ID()) },
		10*time.Second, 20*time.Millisecond, "workflow-b sees the new incarnation, not the old")
}
