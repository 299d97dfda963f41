package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The catalogue every test seeds: one cart on two SKUs with stock for far
// more orders than a run can start, and a method that approves. Every
// order's only correct terminal status is therefore Confirmed.
const (
	cartID       = "cart-fault"
	skuA         = "sku-fault-a"
	skuB         = "sku-fault-b"
	qtyA         = 2
	qtyB         = 1
	methodOK     = "pm-fault-ok"
	addressID    = "addr-fault"
	initialStock = 1_000_000
)

// keepRunDirEnv names a directory under which the run directories (node
// logs, Redis data) are kept after the test instead of a temporary one.
const keepRunDirEnv = "FAULTTEST_RUN_DIR"

func seed() commerce.Seed {
	return commerce.Seed{
		Carts: []commerce.Cart{{
			CartID:   cartID,
			Lines:    []*contracts.OrderLine{{Sku: skuA, Quantity: qtyA}, {Sku: skuB, Quantity: qtyB}},
			Amount:   qtyA*1990 + qtyB*890,
			Currency: "EUR",
		}},
		Stock:   map[string]int64{skuA: initialStock, skuB: initialStock},
		Methods: []commerce.PaymentMethod{{MethodID: methodOK, Approve: true}},
	}
}

// fixture is one started cluster with its clients.
type fixture struct {
	c        *localcluster.Cluster
	apiNames []string
	apis     []*client.API
	stores   *commerce.Redis
	rdb      *redis.Client
}

type clusterOpts struct {
	// persist keeps Redis' data in an append-only file fsynced before
	// every reply (appendfsync always): only then does a SIGKILLed
	// redis-server keep every write it acknowledged. Under everysec Redis
	// postpones the file's write, replies still going out, while a
	// background fsync is slow, and a kill loses those writes.
	persist        bool
	requestTimeout time.Duration
}

// startCluster builds the binaries, starts redis-server, api-a, api-b,
// workflow-a and workflow-b through runner/localcluster, seeds the catalogue
// before any node starts, and stops everything by PID when the test ends
// (nodes killed first: a graceful drain of every live order would only
// slow the teardown). On failure it logs the tail of every log.
func startCluster(t *testing.T, o clusterOpts) *fixture {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	if o.requestTimeout <= 0 {
		o.requestTimeout = 10 * time.Second
	}
	runDir := t.TempDir()
	if keep := os.Getenv(keepRunDirEnv); keep != "" {
		runDir = filepath.Join(keep, fmt.Sprintf("%s-%d", t.Name(), time.Now().Unix()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: runDir, APIBin: apiBin, WorkflowBin: wfBin,
		RedisPersist: o.persist,
		RedisAppendFsync: func() string {
			if o.persist {
				return "always"
			}
			return ""
		}(),
		RequestTimeout: o.requestTimeout,
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
			return cs.ApplySeed(ctx, seed())
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, c)
		}
		for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
			if err := c.Kill(n); err != nil {
				t.Logf("kill %s: %v", n, err)
			}
		}
		if err := c.Stop(); err != nil {
			t.Logf("stop: %v", err)
		}
	})
	rdb, err := newRedis(c.RedisURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })

	// The HTTP client outlives the APIs' own request timeout, so a slow
	// answer is the API's 504, not a client-side cut.
	hc := &http.Client{Timeout: o.requestTimeout + 5*time.Second, Transport: &http.Transport{
		MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
	}}
	t.Cleanup(hc.CloseIdleConnections)
	stores, err := commerce.NewRedis(commerce.Config{Client: rdb})
	require.NoError(t, err)
	f := &fixture{c: c, apiNames: localcluster.APINodes, rdb: rdb, stores: stores}
	for _, n := range localcluster.APINodes {
		f.apis = append(f.apis, &client.API{BaseURL: c.APIURL(n), HTTP: hc})
	}
	return f
}

func newRedis(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 32
	return redis.NewClient(opt), nil
}

func logTails(t *testing.T, c *localcluster.Cluster) {
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 25))
	}
	redisLog := filepath.Join(c.RunDir(), "redis.log")
	t.Logf("---- redis (%s), last lines:\n%s", redisLog, localcluster.Tail(redisLog, 15))
}

// traceOrders logs, for each of the first few orders named, every line
// of every node's log that mentions it or its key, but the reads of its
// state: a stuck order's own story, which the logs' last lines seldom
// hold.
func traceOrders(t *testing.T, c *localcluster.Cluster, keyOf map[string]string, ids []string) {
	nodes := append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...)
	for _, id := range firstN(ids, 3) {
		needles := []string{id}
		if key := keyOf[id]; key != "" {
			needles = append(needles, key)
		}
		for _, n := range nodes {
			b, err := os.ReadFile(c.LogPath(n))
			if err != nil {
				t.Logf("---- %s: %v", n, err)
				continue
			}
			var hits []string
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, `"method":"GET"`) {
					continue
				}
				for _, needle := range needles {
					if strings.Contains(line, needle) {
						hits = append(hits, line)
						break
					}
				}
			}
			t.Logf("---- %s, lines about %s:\n%s", n, id, strings.Join(firstN(hits, 40), "\n"))
		}
	}
}

// attempt is one POST /orders and what it was told.
type attempt struct {
	key        string
	api        int
	begin, end time.Time
	status     int    // 0: no HTTP answer
	code       string // error code of a non-2xx answer
	orderID    string
	err        error // transport or contract failure
}

// acked: the start was acknowledged with an order id (201 or 200).
func (a attempt) acked() bool {
	return a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK) && a.orderID != ""
}

// outcome names what the client was told, for counting.
func (a attempt) outcome() string {
	switch {
	case a.acked():
		return strconv.Itoa(a.status)
	case a.status == 0:
		return "transport error"
	case a.code != "":
		return strconv.Itoa(a.status) + " " + a.code
	default:
		return strconv.Itoa(a.status)
	}
}

func (a attempt) String() string {
	s := fmt.Sprintf("key %s via api #%d: %s after %s", a.key, a.api, a.outcome(), a.end.Sub(a.begin).Round(time.Millisecond))
	if a.err != nil {
		s += ": " + a.err.Error()
	}
	return s
}

func startReq(key string) *contracts.StartOrderReq {
	return &contracts.StartOrderReq{CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: key}
}

// start sends one POST /orders for key through API number api.
func (f *fixture) start(ctx context.Context, api int, key string) attempt {
	a := attempt{key: key, api: api, begin: time.Now()}
	res, rep, err := f.apis[api].StartOrder(ctx, startReq(key))
	a.end = time.Now()
	a.status, a.err = rep.Status, err
	if rep.Error != nil {
		a.code = rep.Error.Code
	}
	if err == nil && res != nil {
		a.orderID = res.GetOrderId()
	}
	return a
}

// waitTerminal polls GET /orders/{id} (both APIs in turn, bounded
// concurrency) until every order is Confirmed or Failed or the deadline
// passes. It returns each order's last seen status (or last answer, for
// one that was never read) and when the last order became terminal.
func (f *fixture) waitTerminal(ctx context.Context, ids []string, deadline time.Time) (final map[string]string, allAt time.Time) {
	final = make(map[string]string, len(ids))
	pending := append([]string(nil), ids...)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for round := 0; ; round++ {
		var mu sync.Mutex
		var next []string
		work := make(chan string)
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					st, rep, err := f.apis[(round+len(id))%len(f.apis)].GetOrder(ctx, id)
					var seen string
					switch {
					case err != nil:
						seen = "error: " + err.Error()
					case st == nil:
						seen = rep.String()
					default:
						seen = st.GetStatus().String()
					}
					mu.Lock()
					final[id] = seen
					if !terminal(seen) {
						next = append(next, id)
					}
					mu.Unlock()
				}
			}()
		}
		for _, id := range pending {
			work <- id
		}
		close(work)
		wg.Wait()
		pending = next
		if len(pending) == 0 {
			return final, time.Now()
		}
		if time.Now().After(deadline) {
			return final, time.Time{}
		}
		select {
		case <-ctx.Done():
			return final, time.Time{}
		case <-tick.C:
		}
	}
}

func terminal(status string) bool {
	return status == contracts.OrderStatus_Confirmed.String() || status == contracts.OrderStatus_Failed.String()
}

// tally counts values and prints them sorted, e.g. "201: 3, 500 INTERNAL: 1".
func tally[T any](items []T, key func(T) string) string {
	n := map[string]int{}
	for _, it := range items {
		n[key(it)]++
	}
	ks := make([]string, 0, len(n))
	for k := range n {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// firstN returns at most n items, for messages that must stay readable.
func firstN[T any](items []T, n int) []T {
	if len(items) > n {
		return items[:n]
	}
	return items
}

// logLines returns the lines of the log at path, from offset from, that
// re matches.
func logLines(path string, from int64, re *regexp.Regexp) ([]string, error) {
	c := localcluster.NewLogCursor(path, from)
	if err := c.Refresh(); err != nil {
		return nil, err
	}
	return c.Lines(localcluster.MatchFunc(re.String(), re.MatchString)), nil
}

// pause waits d unless ctx ends first: pacing only, never a wait for a
// condition.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func TestMain(m *testing.M) { proctest.Main(m) }
