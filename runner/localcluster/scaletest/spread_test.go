package scaletest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

const (
	workflows = 6
	apis      = 3
	orders    = 1000
	// workers bounds the orders in flight: enough to keep nine processes
	// busy on two cores, few enough that no request nears its timeout.
	workers = 24
	// maxShare is the most one member may own, as a multiple of the fair
	// share (orders / workflows). Placement is round-robin per API, so a
	// member owning twice its share means the spread is broken, not noisy.
	maxShare = 2.0
)

func newRedis(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// startCluster starts redis-server, six workflow and three API processes,
// with the demo catalogue seeded first.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	began := time.Now()
	apiBin, wfBin := proctest.Binaries(t)
	t.Logf("binaries built in %s", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		Workflows: workflows, APIs: apis,
		RequestTimeout: 10 * time.Second,
		Env:            localcluster.ChildEnv(os.Environ()),
		StopGrace:      10 * time.Second,
		Logf:           t.Logf,
		BeforeNodes: func(ctx context.Context, url string) error {
			rdb, err := newRedis(url)
			if err != nil {
				return err
			}
			defer rdb.Close()
			cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
			if err != nil {
				return err
			}
			return cs.ApplySeed(ctx, commerce.DemoSeed())
		},
	})
	require.NoError(t, err)
	t.Logf("%d workflow and %d API processes ready in %s", len(c.Workflows()), len(c.APIs()), time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		nodes := append(c.APIs(), c.Workflows()...)
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 25))
			}
		}
		// Killed, not drained: draining 1,000 orders would only slow the
		// teardown. Kill takes each node from the supervisor first.
		for _, n := range nodes {
			if err := c.Kill(n); err != nil {
				t.Logf("kill %s: %v", n, err)
			}
		}
		if err := c.Stop(); err != nil {
			t.Logf("stop: %v", err)
		}
	})
	return c
}

// TestOrdersSpreadOverSixWorkflowMembers: with six workflow and three API
// processes running, 1,000 orders started through the three APIs in turn
// are each owned (Location record Ready) by a workflow member, every one
// of the six owns some, and none owns more than twice the fair share.
func TestOrdersSpreadOverSixWorkflowMembers(t *testing.T) {
	c := startCluster(t)
	require.Len(t, c.Workflows(), workflows)
	require.Equal(t, []string{"api-a", "api-b", "api-c"}, c.APIs())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	rdb, err := newRedis(c.RedisURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	t.Cleanup(hc.CloseIdleConnections)
	var clients []*client.API
	for _, n := range c.APIs() {
		clients = append(clients, &client.API{BaseURL: c.APIURL(n), HTTP: hc})
	}

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	ids := make([]string, orders)
	perAPI := make([]atomic.Int64, len(clients))
	var next atomic.Int64
	var mu sync.Mutex
	var failures []string
	began := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= orders {
					return
				}
				a := i % len(clients)
				res, rep, err := clients[a].StartOrder(ctx, &contracts.StartOrderReq{
					CartId: commerce.DemoCartOK, ShippingAddressId: "addr-scale", PaymentMethodId: commerce.DemoMethodOK,
					IdempotencyKey: fmt.Sprintf("scale-%s-%d", run, i),
				})
				if err != nil || rep.Status != http.StatusCreated {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("order %d via %s: %v %s", i, c.APIs()[a], err, rep))
					mu.Unlock()
					continue
				}
				ids[i] = res.GetOrderId()
				perAPI[a].Add(1)
			}
		}()
	}
	wg.Wait()
	placed := time.Since(began)
	require.Empty(t, failures, "every order is accepted")

	names, err := loc.MemberNames(ctx)
	require.NoError(t, err)
	perNode := map[string]int{}
	for _, id := range ids {
		rec, err := loc.Get(ctx, grain.KindName, id)
		require.NoError(t, err, "order %s", id)
		require.Equal(t, location.Ready, rec.Status, "order %s is owned", id)
		node, ok := names[rec.Owner]
		require.True(t, ok, "order %s: owner %s has no node name (names %v)", id, rec.Owner, names)
		perNode[node]++
	}

	fair := float64(orders) / workflows
	t.Logf("FIGURE spread: %d orders through %d APIs (%d in flight) placed in %s (%.0f orders/s) over %d workflow members; fair share %.1f",
		orders, apis, workers, placed.Round(time.Millisecond), float64(orders)/placed.Seconds(), workflows, fair)
	t.Logf("FIGURE spread: %-12s %7s %7s", "member", "orders", "share")
	wfs := c.Workflows()
	sort.Strings(wfs)
	minN, maxN := orders, 0
	for _, n := range wfs {
		k := perNode[n]
		minN, maxN = min(minN, k), max(maxN, k)
		t.Logf("FIGURE spread: %-12s %7d %6.1f%%", n, k, 100*float64(k)/orders)
	}
	var via []string
	for i, n := range c.APIs() {
		via = append(via, fmt.Sprintf("%s %d", n, perAPI[i].Load()))
	}
	t.Logf("FIGURE spread: min/max per member %d/%d (%.2f/%.2f of the fair share); accepted per API: %s",
		minN, maxN, float64(minN)/fair, float64(maxN)/fair, strings.Join(via, ", "))

	for n := range perNode {
		require.Contains(t, wfs, n, "only workflow members own orders")
	}
	for _, n := range wfs {
		require.Positive(t, perNode[n], "%s owns some orders: %v", n, perNode)
		require.LessOrEqual(t, float64(perNode[n]), maxShare*fair, "%s owns at most %.0f× the fair share: %v", n, maxShare, perNode)
	}
}

func TestMain(m *testing.M) { proctest.Main(m) }
