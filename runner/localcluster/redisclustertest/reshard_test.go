package redisclustertest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

const (
	// workers keep orders in flight while the slots move.
	workers = 6
	// moves is how many slots, each holding a live order's keys, move.
	moves = 10
	// warmOrders complete before the first move, so every master holds
	// keys and every process has loaded the slot map it will find stale.
	warmOrders = 30
)

// startCluster starts the local cluster on a 3-master Redis Cluster with
// the demo catalogue; fixtures starts the workflows with their runner-only
// interrupt points (-fixtures), and replicas gives each master that many
// replicas (the nodes then wait for one per write).
func startCluster(t *testing.T, fixtures bool, replicas int) *localcluster.Cluster {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		RedisCluster:         true,
		RedisClusterReplicas: replicas,
		Fixtures:             fixtures,
		RequestTimeout:       10 * time.Second,
		Env:                  localcluster.ChildEnv(os.Environ()),
		StopGrace:            10 * time.Second,
		Logf:                 t.Logf,
		BeforeNodes: func(ctx context.Context, url string) error {
			rdb, err := redisurl.NewClient(url, redisurl.Options{})
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
	t.Logf("cluster on a Redis Cluster ready in %s: %s", time.Since(began).Round(time.Millisecond), c.RedisURL())
	t.Cleanup(func() {
		nodes := append(c.APIs(), c.Workflows()...)
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 25))
			}
		}
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

// load keeps orders flowing through both APIs and remembers which are in
// flight (accepted, outcome not yet seen).
type load struct {
	mu       sync.Mutex
	inflight map[string]bool
	done     int
	failures []string
	outcomes map[contracts.OrderStatus]int
}

func (l *load) fail(format string, a ...any) {
	l.mu.Lock()
	l.failures = append(l.failures, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

func (l *load) worker(ctx context.Context, api *client.API, run string, w int, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		res, rep, err := api.StartOrder(ctx, &contracts.StartOrderReq{
			CartId: commerce.DemoCartOK, ShippingAddressId: "addr-rc", PaymentMethodId: commerce.DemoMethodOK,
			IdempotencyKey: fmt.Sprintf("rc-%s-%d-%d", run, w, i),
		})
		if err != nil || rep.Status != http.StatusCreated {
			l.fail("start (worker %d, #%d): %v %s", w, i, err, rep)
			continue
		}
		id := res.GetOrderId()
		l.mu.Lock()
		l.inflight[id] = true
		l.mu.Unlock()
		st, terminal, rep, err := api.WaitTerminal(ctx, id, 20*time.Second)
		l.mu.Lock()
		delete(l.inflight, id)
		l.mu.Unlock()
		if err != nil || !terminal {
			l.fail("wait %s: terminal=%v %v %s", id, terminal, err, rep)
			continue
		}
		l.mu.Lock()
		l.done++
		l.outcomes[st.GetStatus()]++
		l.mu.Unlock()
	}
}

// live returns an order in flight whose slot is not in skip, if any.
func (l *load) live(skip map[int]bool) (string, int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.inflight {
		if s := redisserver.Slot("{" + id + "}"); !skip[s] {
			return id, s, true
		}
	}
	return "", 0, false
}

func (l *load) isLive(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight[id]
}

func (l *load) completed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// TestSlotsWithLiveOrdersMoveUnderLoad: while orders flow through both
// APIs, the slot of an order in flight moves to another master, ten
// times; while each slot migrates, the order is read through an API, and
// again after. The masters answer ASK during the moves and MOVED after
// them (errorstats), the processes' cluster clients follow both: every
// order is accepted and confirmed and every read succeeds (no request
// fails for good), no master answers CROSSSLOT, and every master holds
// keys.
func TestSlotsWithLiveOrdersMoveUnderLoad(t *testing.T) {
	c := startCluster(t, false, 0)
	rc := c.RedisCluster()
	require.NotNil(t, rc)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	t.Cleanup(hc.CloseIdleConnections)
	apis := c.APIs()
	l := &load{inflight: map[string]bool{}, outcomes: map[contracts.OrderStatus]int{}}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		api := &client.API{BaseURL: c.APIURL(apis[w%len(apis)]), HTTP: hc}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.worker(ctx, api, run, w, stop)
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)

	require.Eventually(t, func() bool { return l.completed() >= warmOrders }, 30*time.Second, 20*time.Millisecond,
		"%d orders confirmed before the first move", warmOrders)
	before, err := rc.ErrorStats(ctx)
	require.NoError(t, err)

	type move struct {
		order      string
		slot       int
		from, to   int
		keys       int
		liveAfter  bool
		askDuring  bool
		tookMillis int64
	}
	var done []move
	moved := map[int]bool{}
	for len(done) < moves {
		var id string
		var slot int
		require.Eventually(t, func() bool {
			var ok bool
			id, slot, ok = l.live(moved)
			return ok
		}, 10*time.Second, time.Millisecond, "an order in flight to move")
		from, err := rc.Owner(ctx, slot)
		require.NoError(t, err)
		to := (from + 1) % len(rc.Nodes())
		began := time.Now()
		askBase, err := rc.Nodes()[from].ErrorStats(ctx)
		require.NoError(t, err)
		askDuring := false
		// Halfway (the order's keys on the target, the slot migrating),
		// the order is read through an API until the old owner answered
		// ASK (bounded): the API process's cluster client meets the
		// migration and follows it, and every read succeeds.
		reader := &client.API{BaseURL: c.APIURL(apis[len(done)%len(apis)]), HTTP: hc}
		read := func(ctx context.Context) error {
			st, rep, err := reader.GetOrder(ctx, id)
			if err != nil || !rep.OK() || st.GetOrderId() != id {
				return fmt.Errorf("GET order %s: %v %s", id, err, rep)
			}
			return nil
		}
		hold := func(ctx context.Context, _ int) error {
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if err := read(ctx); err != nil {
					return err
				}
				st, err := rc.Nodes()[from].ErrorStats(ctx)
				if err != nil {
					return err
				}
				if st["ASK"] > askBase["ASK"] {
					askDuring = true
					return nil
				}
			}
			return nil
		}
		n, err := rc.MoveSlots(ctx, []int{slot}, to, redisserver.MoveOptions{Between: hold})
		require.NoError(t, err, "move slot %d of order %s", slot, id)
		moved[slot] = true
		owner, err := rc.Owner(ctx, slot)
		require.NoError(t, err)
		require.Equal(t, to, owner, "slot %d now served by master %d", slot, to)
		left, err := rc.CountKeysInSlot(ctx, from, slot)
		require.NoError(t, err)
		require.Zero(t, left, "slot %d: no key left on the old owner", slot)
		// The API's slot map is stale now: the old owner answers MOVED,
		// the client follows it.
		require.NoError(t, read(ctx), "read after the move")
		done = append(done, move{order: id, slot: slot, from: from, to: to, keys: n[slot], liveAfter: l.isLive(id), askDuring: askDuring, tookMillis: time.Since(began).Milliseconds()})
	}
	// The load runs on a little after the last move, so the processes
	// meet the moved slots with stale maps (MOVED).
	last := l.completed()
	require.Eventually(t, func() bool { return l.completed() >= last+2*workers }, 30*time.Second, 20*time.Millisecond)
	stopLoad()

	after, err := rc.ErrorStats(ctx)
	require.NoError(t, err)
	spread, err := rc.KeysPerMaster(ctx)
	require.NoError(t, err)

	withKeys, asked := 0, 0
	for _, m := range done {
		t.Logf("FIGURE move: slot %5d of order %s: master %d -> %d, %d keys, %d ms, ASK answered while it moved: %v, order in flight after: %v",
			m.slot, m.order, m.from+1, m.to+1, m.keys, m.tookMillis, m.askDuring, m.liveAfter)
		if m.keys > 0 {
			withKeys++
		}
		if m.askDuring {
			asked++
		}
	}
	delta := func(k string) int64 { return after[k] - before[k] }
	t.Logf("FIGURE redirects during the moves: ASK %d, MOVED %d, TRYAGAIN %d; CROSSSLOT over the run: %d",
		delta("ASK"), delta("MOVED"), delta("TRYAGAIN"), after["CROSSSLOT"])
	addrs := make([]string, 0, len(spread))
	for a := range spread {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var parts []string
	for _, a := range addrs {
		parts = append(parts, fmt.Sprintf("%s %d", a, spread[a]))
	}
	l.mu.Lock()
	t.Logf("FIGURE orders: %d terminal (%v), %d failures; keys per master: %s", l.done, l.outcomes, len(l.failures), strings.Join(parts, ", "))
	failures := append([]string(nil), l.failures...)
	outcomes := l.outcomes
	l.mu.Unlock()

	require.Empty(t, failures, "no request failed")
	require.Equal(t, map[contracts.OrderStatus]int{contracts.OrderStatus_Confirmed: outcomes[contracts.OrderStatus_Confirmed]}, outcomes, "every order confirmed")
	require.Positive(t, withKeys, "some moved slot held keys when it moved")
	require.Positive(t, asked, "a live order's client was sent ASK while its slot moved")
	require.Positive(t, delta("ASK"), "the masters answered ASK during the moves")
	require.Positive(t, delta("MOVED"), "the masters answered MOVED after the moves")
	require.Zero(t, after["CROSSSLOT"], "no CROSSSLOT reply")
	require.Len(t, spread, 3)
	for a, n := range spread {
		require.Positive(t, n, "master %s holds keys", a)
	}
}

func TestMain(m *testing.M) { proctest.Main(m) }
