package edge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The waits on a real Redis: the edge's read model and its TerminalFeed
// on the API's own client, and a "workflow" writing the projections with
// the projected append on another client, as the two processes do.

// commandLog records the name of every command a client sends.
type commandLog struct {
	mu    sync.Mutex
	names map[string]int
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.add(c)
		}
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(cmd redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names[cmd.Name()]++
}

func (l *commandLog) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.names {
		out[k] = v
	}
	return out
}

// tLog writes log lines to t.Log.
type tLog struct{ t *testing.T }

func (w tLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// redisWaits is one API process's edge on Redis and the workflow's writer.
type redisWaits struct {
	t        *testing.T
	api      *redis.Client // the API process's client
	commands *commandLog   // what the API process sent
	feed     *readmodel.TerminalFeed
	orders   *fakeOrders
	reg      *telemetry.Registry // the API process's metrics
	base     string
	events   *eventstore.Redis
	append   *readmodel.RedisCommitter
	fences   map[string]eventstore.Fence
	versions map[string]int64
	// told are the orders started through the API, whose owner (the
	// test's project) tells the API of their end, as a grain does over
	// the cluster link.
	told map[string]bool
}

func newRedisWaits(t *testing.T, network, addr string) *redisWaits {
	t.Helper()
	log := slog.New(slog.NewTextHandler(tLog{t}, nil))
	w := &redisWaits{t: t, commands: &commandLog{names: map[string]int{}}, orders: &fakeOrders{started: map[string]bool{}}, reg: telemetry.NewRegistry(),
		fences: map[string]eventstore.Fence{}, versions: map[string]int64{}, told: map[string]bool{}}
	w.api = redis.NewClient(&redis.Options{Network: network, Addr: addr, PoolSize: 8})
	w.api.AddHook(w.commands)
	t.Cleanup(func() { w.api.Close() })
	rm, err := readmodel.NewRedis(readmodel.Config{Client: w.api, Logger: log})
	require.NoError(t, err)
	w.feed = rm.NewTerminalFeed()
	w.feed.UseLinkNotices()
	t.Cleanup(func() { require.NoError(t, w.feed.Close()) })
	carts := &fakeCarts{carts: map[string]commerce.Cart{cartOK: {CartID: cartOK,
		Lines: []*contracts.OrderLine{{Sku: "sku-a", Quantity: 1}}, Amount: 100, Currency: "EUR"}}}
	srv, err := New(Config{NodeID: "api-t", Idempotency: &fakeIdempotency{m: map[string]commerce.Mapping{}}, Carts: carts,
		ReadModel: rm, Terminal: w.feed, Orders: w.orders, Topology: &fakeTopology{}, Logger: log, Metrics: w.reg, OrderIDSecret: []byte(testOrderIDSecret)})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	w.base = hs.URL

	wf := redis.NewClient(&redis.Options{Network: network, Addr: addr})
	t.Cleanup(func() { wf.Close() })
	w.events, err = eventstore.NewRedis(eventstore.Config{Client: wf})
	require.NoError(t, err)
	wrm, err := readmodel.NewRedis(readmodel.Config{Client: wf, Logger: log})
	require.NoError(t, err)
	w.append, err = readmodel.NewRedisCommitter(readmodel.RedisCommitterConfig{Events: w.events, ReadModel: wrm})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.feed.Subscriptions() == 1 }, 10*time.Second, 5*time.Millisecond)
	return w
}

// project is the workflow's step: one event and the order's new
// projection, in one projected append.
func (w *redisWaits) project(ctx context.Context, orderID string, st contracts.OrderStatus) error {
	f, ok := w.fences[orderID]
	if !ok {
		var err error
		if f, _, err = w.events.Open(ctx, orderID, 1); err != nil {
			return err
		}
		w.fences[orderID] = f
	}
	v := w.versions[orderID]
	id := fmt.Sprintf("%s-e%d", orderID, v+1)
	state := &contracts.OrderState{OrderId: orderID, Status: st, UpdatedAtUnixMs: v + 1}
	_, err := readmodeltest.Commit(ctx, w.append, orderID, v, f,
		[]eventstore.Envelope{{EventID: id, OrderID: orderID, EventType: "X", SourceCommandID: "cmd-" + id, CreatedAtUnixMs: 1, Data: []byte("{}")}},
		state)
	if err == nil {
		w.versions[orderID] = v + 1
		if w.told[orderID] && readmodel.Terminal(st) {
			w.feed.Deliver(state)
		}
	}
	return err
}

type waitReply struct {
	status int
	wait   string
	state  *contracts.OrderState
	err    error
}

func (w *redisWaits) wait(client *http.Client, orderID string, timeoutMs int) waitReply {
	res, err := client.Get(w.base + waitPath(orderID, fmt.Sprint(timeoutMs)))
	if err != nil {
		return waitReply{err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	r := waitReply{status: res.StatusCode, wait: res.Header.Get(HeaderWait), err: err}
	if err == nil && res.StatusCode == http.StatusOK {
		m := &contracts.GetOrderStateRes{}
		r.err = contracts.UnmarshalJSON(body, m)
		r.state = m.GetState()
	} else if err == nil {
		r.err = fmt.Errorf("status %d: %s", res.StatusCode, body)
	}
	return r
}

// subscribers counts the server's connections subscribed to a channel.
func subscribers(t *testing.T, c *redis.Client) int {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		sub := strings.Contains(" "+line, " sub=") && !strings.Contains(" "+line, " sub=0 ")
		ssub := strings.Contains(" "+line, " ssub=") && !strings.Contains(" "+line, " ssub=0 ")
		if sub || ssub {
			n++
		}
	}
	return n
}

// 200 concurrent waits over 50 orders: every one is answered by its
// order's terminal projection, while the process holds ONE subscription
// connection and no waiter holds a pooled one; the API sent nothing but
// read-model reads, and no grain was called.
func TestRedisManyWaitsOneSubscription(t *testing.T) {
	const (
		orders = 50
		waits  = 200
	)
	w, admin, ctx := startRedisWaits(t)
	id := func(i int) string { return fmt.Sprintf("ord-%d", i%orders) }
	for i := range orders {
		require.NoError(t, w.project(ctx, id(i), contracts.OrderStatus_Created))
	}
	keysBefore, err := admin.DBSize(ctx).Result()
	require.NoError(t, err)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: waits}}
	t.Cleanup(client.CloseIdleConnections)
	replies := make([]chan waitReply, waits)
	for i := range waits {
		replies[i] = make(chan waitReply, 1)
		go func() { replies[i] <- w.wait(client, id(i), 20_000) }()
	}
	require.Eventually(t, func() bool { return w.feed.Waiters() == waits }, 15*time.Second, 5*time.Millisecond)

	// Everybody waits: two subscriber connections on the server, the
	// feed's (the order channels', the legacy channel's), with one
	// subscription per waited order; the API's pool has no connection in
	// use.
	require.Equal(t, 2, subscribers(t, admin), "two subscription connections for %d waits", waits)
	numsub, err := admin.PubSubNumSub(ctx, readmodel.TerminalChannel("")).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, numsub[readmodel.TerminalChannel("")])
	for i := range orders {
		n, err := admin.PubSubShardNumSub(ctx, readmodel.OrderChannel("", id(i))).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n[readmodel.OrderChannel("", id(i))], "one subscription to %s's channel, whatever its waiters", id(i))
	}
	require.EqualValues(t, orders, w.feed.OrderSubscriptions())
	require.EqualValues(t, 2, w.api.PoolStats().PubSubStats.Active, "the API process's client holds two subscription connections")
	// A wait registers before its first read, so the count of waiters can
	// be complete while a read is still to be sent: wait for the reads,
	// then for the pool. Once they are done, no pooled connection is in
	// use while all of them go on waiting, and no wait read twice.
	require.Eventually(t, func() bool { return w.commands.snapshot()["hmget"] >= waits },
		10*time.Second, 5*time.Millisecond, "each wait reads before waiting")
	require.Eventually(t, func() bool {
		ps := w.api.PoolStats()
		return ps.TotalConns == ps.IdleConns
	}, 10*time.Second, 5*time.Millisecond, "no waiter holds a pooled connection")
	require.Equal(t, waits, w.feed.Waiters())
	reads := w.commands.snapshot()["hmget"]
	require.Equal(t, waits, reads, "each wait read once before waiting")
	t.Logf("API pool while %d waits wait: %+v", waits, *w.api.PoolStats())
	keysWaiting, err := admin.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, keysBefore, keysWaiting, "waiting wrote no key")

	// The workflow moves every order on, then ends it.
	for i := range orders {
		require.NoError(t, w.project(ctx, id(i), contracts.OrderStatus_InventoryReserved))
	}
	for i := range orders {
		st := contracts.OrderStatus_Confirmed
		if i%5 == 0 {
			st = contracts.OrderStatus_Failed
		}
		require.NoError(t, w.project(ctx, id(i), st))
	}
	for i, ch := range replies {
		var r waitReply
		select {
		case r = <-ch:
		case <-ctx.Done():
			require.FailNow(t, "wait not answered", "wait %d for %s", i, id(i))
		}
		require.NoError(t, r.err, "wait %d", i)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, WaitReached, r.wait, "wait %d", i)
		want := contracts.OrderStatus_Confirmed
		if (i%orders)%5 == 0 {
			want = contracts.OrderStatus_Failed
		}
		require.Equal(t, want, r.state.GetStatus(), "wait %d for %s", i, id(i))
	}

	// No side effects: the API read (HMGET) and nothing else, so it
	// wrote no key; it called no grain; every waiter is gone.
	sent := w.commands.snapshot()
	for name := range sent {
		require.Contains(t, []string{"hmget", "hello", "client", "ping", "ssubscribe", "sunsubscribe"}, name, "the API process sent %q (all: %v)", name, sent)
	}
	require.LessOrEqual(t, sent["hmget"], 3*waits, "a wait reads at its start and once per wake: %v", sent)
	require.Equal(t, waits, sent["hmget"], "the terminal notice carries the record: no wait reads it again: %v", sent)
	require.Zero(t, w.orders.calls())
	require.Zero(t, w.feed.Waiters())
	require.EqualValues(t, waits, w.waits(WaitReached, false), "orders this API did not start: every wait read")
	require.Zero(t, w.waits(WaitReached, true))
	t.Logf("API commands for %d waits: %v", waits, sent)
}

// A Redis restart while a client waits: the feed reconnects by itself and
// the wait is answered once the order turns terminal after the restart.
func TestRedisWaitSurvivesARedisRestart(t *testing.T) {
	r := redistest.StartRestartable(t)
	srv := r.Server()
	w := newRedisWaits(t, srv.Network(), srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.project(ctx, "ord-r", contracts.OrderStatus_Created))

	reply := make(chan waitReply, 1)
	start := time.Now()
	go func() { reply <- w.wait(http.DefaultClient, "ord-r", 20_000) }()
	require.Eventually(t, func() bool { return w.feed.Waiters() == 1 }, 10*time.Second, 5*time.Millisecond)

	r.Restart()
	require.Eventually(t, func() bool { return w.feed.Subscriptions() == 2 }, 15*time.Second, 5*time.Millisecond,
		"the feed resubscribes after the restart")
	select {
	case got := <-reply:
		require.FailNow(t, "the wait ended with the restart", "%+v", got)
	default:
	}
	require.NoError(t, w.project(ctx, "ord-r", contracts.OrderStatus_Confirmed))
	var got waitReply
	select {
	case got = <-reply:
	case <-ctx.Done():
		require.FailNow(t, "the wait was not answered after the restart")
	}
	require.NoError(t, got.err)
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, WaitReached, got.wait)
	require.Equal(t, contracts.OrderStatus_Confirmed, got.state.GetStatus())
	require.Less(t, time.Since(start), 20*time.Second, "answered by the terminal write, not the timeout")
	require.Zero(t, w.orders.calls())
}

// startRedisWaits is newRedisWaits on a redis-server of its own, with an
// admin client on it and a context for the test's writes.
func startRedisWaits(t *testing.T) (*redisWaits, *redis.Client, context.Context) {
	t.Helper()
	srv := redistest.Start(t)
	w := newRedisWaits(t, srv.Network(), srv.Addr())
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return w, admin, ctx
}

// waits is MetricWaits' series for an outcome, vouched or not.
func (w *redisWaits) waits(outcome string, vouched bool) float64 {
	w.t.Helper()
	v, err := telemetry.Sum(w.reg.Gatherer(), MetricWaits, map[string]string{LabelOutcome: outcome, LabelVouched: fmt.Sprint(vouched)})
	require.NoError(w.t, err)
	return v
}

// start is POST /orders through the API, whose (fake) grain records the
// start with the order's first projection, as the workflow's start does.
func (w *redisWaits) start(ctx context.Context, key string) string {
	w.t.Helper()
	w.orders.check = func(req *contracts.StartOrderWorkflowReq) {
		require.NoError(w.t, w.project(ctx, req.OrderId, contracts.OrderStatus_Created))
	}
	res, err := http.Post(w.base+"/orders", "application/json", strings.NewReader(startBody(cartOK, "a", "p", key)))
	require.NoError(w.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(w.t, err)
	require.Equal(w.t, http.StatusCreated, res.StatusCode, "%s", body)
	m := &contracts.StartOrderRes{}
	require.NoError(w.t, contracts.UnmarshalJSON(body, m))
	w.told[m.GetOrderId()] = true
	return m.GetOrderId()
}

// A wait for an order this API process just started reads nothing: the
// feed vouches that the order is not terminal, then hands over the record
// its terminal notice carried, whether that notice comes during the wait
// or before it. After a resubscription (the feed's connection killed, so
// a notice may have been lost) the vouch is gone and the wait reads.
func TestRedisWaitAfterItsOwnStartReadsNothing(t *testing.T) {
	w, admin, ctx := startRedisWaits(t)
	reads := func() int { return w.commands.snapshot()["hmget"] }

	// Terminal during the wait.
	id := w.start(ctx, "k-during")
	reply := make(chan waitReply, 1)
	go func() { reply <- w.wait(http.DefaultClient, id, 20_000) }()
	require.Eventually(t, func() bool { return w.feed.Waiters() == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, w.project(ctx, id, contracts.OrderStatus_InventoryReserved))
	require.NoError(t, w.project(ctx, id, contracts.OrderStatus_Confirmed))
	got := <-reply
	require.NoError(t, got.err)
	require.Equal(t, WaitReached, got.wait)
	require.Equal(t, contracts.OrderStatus_Confirmed, got.state.GetStatus())
	require.Zero(t, reads(), "the wait read nothing")

	// Terminal before the wait began.
	id = w.start(ctx, "k-before")
	require.NoError(t, w.project(ctx, id, contracts.OrderStatus_Failed))
	require.Eventually(t, func() bool { st, ok := w.feed.Known(id); return ok && st != nil }, 10*time.Second, 5*time.Millisecond)
	got = w.wait(http.DefaultClient, id, 20_000)
	require.NoError(t, got.err)
	require.Equal(t, WaitReached, got.wait)
	require.Equal(t, contracts.OrderStatus_Failed, got.state.GetStatus())
	require.Zero(t, reads(), "the wait answered from the notice it missed")

	// A timeout answers what the read model holds, read then.
	id = w.start(ctx, "k-timeout")
	got = w.wait(http.DefaultClient, id, 50)
	require.NoError(t, got.err)
	require.Equal(t, WaitTimeout, got.wait)
	require.Equal(t, contracts.OrderStatus_Created, got.state.GetStatus())
	require.Equal(t, 1, reads(), "the timeout's read only")

	// The subscription drops: nothing is vouched for any more.
	id = w.start(ctx, "k-dropped")
	_, known := w.feed.Known(id)
	require.True(t, known)
	require.NoError(t, admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	require.Eventually(t, func() bool { return w.feed.Subscriptions() == 2 }, 15*time.Second, 5*time.Millisecond)
	go func() { reply <- w.wait(http.DefaultClient, id, 20_000) }()
	require.Eventually(t, func() bool { return reads() == 2 }, 10*time.Second, 5*time.Millisecond, "the wait reads after a resubscription")
	require.NoError(t, w.project(ctx, id, contracts.OrderStatus_Confirmed))
	got = <-reply
	require.NoError(t, got.err)
	require.Equal(t, WaitReached, got.wait)
	require.Equal(t, contracts.OrderStatus_Confirmed, got.state.GetStatus())
	require.Equal(t, 2, reads())
	require.Equal(t, 4, w.orders.calls(), "the four starts, and no grain call for a wait")
	require.EqualValues(t, 2, w.waits(WaitReached, true), "answered without a read, by MetricWaits")
	require.EqualValues(t, 1, w.waits(WaitTimeout, true))
	require.EqualValues(t, 1, w.waits(WaitReached, false), "the wait after the resubscription")
	require.Zero(t, w.waits(WaitTimeout, false))
}
