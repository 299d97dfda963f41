package redisclustertest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// acked is a key the API acknowledged (201 or 200), its order, when its
// first attempt began and when it was acknowledged.
type acked struct {
	key, order string
	began, at  time.Time
}

// retryingLoad starts orders, each under its own key, retrying a key that
// was not acknowledged (503s while a master fails over) with the same
// body until it is, as a client of an order system does.
type retryingLoad struct {
	mu     sync.Mutex
	acks   []acked
	errors map[string]int
	// lastErr is when the last unacknowledged answer came.
	lastErr time.Time
}

func (l *retryingLoad) worker(ctx context.Context, api *client.API, run string, w int, stop <-chan struct{}) {
	for i := 0; ; i++ {
		key := fmt.Sprintf("fo-%s-%d-%d", run, w, i)
		began := time.Now()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, rep, err := api.StartOrder(ctx, &contracts.StartOrderReq{
				CartId: commerce.DemoCartOK, ShippingAddressId: "addr-fo", PaymentMethodId: commerce.DemoMethodOK, IdempotencyKey: key,
			})
			if err == nil && (rep.Status == http.StatusCreated || rep.Status == http.StatusOK) {
				l.mu.Lock()
				l.acks = append(l.acks, acked{key: key, order: res.GetOrderId(), began: began, at: time.Now()})
				l.mu.Unlock()
				break
			}
			what := "transport"
			if err == nil || rep.Status != 0 {
				what = strconv.Itoa(rep.Status)
				if rep.Error != nil {
					what += " " + rep.Error.Reason
				}
			}
			l.mu.Lock()
			l.errors[what]++
			l.lastErr = time.Now()
			l.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (l *retryingLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// TestAMasterKilledUnderLoadLosesNothing is the durability issue's Redis
// Cluster failover under order load: the local cluster on a 3-master
// Redis Cluster with a replica each and -redis-wait-replicas 1, orders
// through both APIs, one master SIGKILLed and nothing else done. Its
// replica takes its slots; writes there are in doubt (503) until the
// local supervisor has started the old master again, which rejoins as
// the new one's replica, and clients retry with the same key. New orders
// in the killed master's slots are acknowledged again without anyone
// acting; afterwards every acknowledged order is Confirmed by itself (no
// continue, no operator), with one OrderStartedEvent, the four success
// events and one authorization of its amount, and no workflow member
// restarted.
func TestAMasterKilledUnderLoadLosesNothing(t *testing.T) {
	c := startCluster(t, false, 1)
	rc := c.RedisCluster()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	t.Cleanup(hc.CloseIdleConnections)
	apis := c.APIs()
	l := &retryingLoad{errors: map[string]int{}}
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
	require.Eventually(t, func() bool { return l.count() >= 2*warmOrders }, 30*time.Second, 20*time.Millisecond)

	victim := 0
	replica := rc.Replicas(victim)[0]
	// The victim's slots, as the cluster sees them before the kill: the
	// orders whose recovery the per-slot figure below times.
	owners, err := rc.Owners(ctx)
	require.NoError(t, err)
	before := l.count()
	killed := time.Now()
	require.NoError(t, syscall.Kill(rc.Nodes()[victim].PID(), syscall.SIGKILL))
	rcl := replica.Client()
	defer rcl.Close()
	require.Eventually(t, func() bool {
		role, err := rcl.Do(ctx, "ROLE").Slice()
		return err == nil && role[0] == "master"
	}, 30*time.Second, 50*time.Millisecond, "the replica takes the killed master's slots")
	promoted := time.Since(killed)
	// Nobody restarts the old master here: the supervisor does, once its
	// slots failed over, and it comes back as the new master's replica.
	require.Eventually(t, func() bool { return len(c.Restarts("redis-1")) == 1 }, 60*time.Second, 50*time.Millisecond,
		"the supervisor starts the killed master again")
	restart := c.Restarts("redis-1")[0]
	// Back before the promotion, it would have stayed master with its own
	// append-only file and its replica would have resynchronised from it.
	// The promotion takes seconds and is seen within a 50 ms poll; a
	// restart without the wait would come within the supervisor's first
	// backoff (250 ms).
	require.True(t, restart.At.After(killed.Add(promoted-200*time.Millisecond)),
		"the killed master came back %s after the SIGKILL, before its replica took its slots (%s)", restart.At.Sub(killed), promoted)
	require.Eventually(t, func() bool { return replica.InSync(ctx) != nil && rc.Nodes()[victim].InSync(ctx) == nil }, 30*time.Second, 50*time.Millisecond,
		"the old master replicates the new one")
	inSync := time.Since(killed)
	// New orders (first tried after the kill) in the killed master's
	// slots are acknowledged again.
	firstInSlots := func() time.Duration {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, a := range l.acks {
			if a.began.After(killed) && owners[redisserver.Slot("{"+a.order+"}")] == victim {
				return a.at.Sub(killed)
			}
		}
		return 0
	}
	require.Eventually(t, func() bool { return firstInSlots() > 0 }, 60*time.Second, 20*time.Millisecond,
		"a new order in the killed master's slots is acknowledged without an operator")
	resumed := l.count()
	require.Eventually(t, func() bool { return l.count() >= resumed+2*warmOrders }, 60*time.Second, 20*time.Millisecond,
		"orders keep being acknowledged")
	l.mu.Lock()
	lastErr := l.lastErr.Sub(killed)
	l.mu.Unlock()
	t.Logf("FIGURE redis cluster master killed under load: old master restarted by the supervisor %s after the SIGKILL, in sync as a replica after %s; last refused answer %s after; first order started after the kill in its slots acknowledged %s after the SIGKILL",
		restart.At.Sub(killed).Round(10*time.Millisecond), inSync.Round(10*time.Millisecond), lastErr.Round(10*time.Millisecond), firstInSlots().Round(10*time.Millisecond))
	stopLoad()

	l.mu.Lock()
	acks := append([]acked(nil), l.acks...)
	errs := l.errors
	l.mu.Unlock()
	t.Logf("FIGURE redis cluster master killed under load: replica promoted %s after the SIGKILL; %d orders acknowledged (%d before the kill); retried answers %v",
		promoted.Round(10*time.Millisecond), len(acks), before, errs)
	// A failover is ordinary: every answer the clients retried is a 503
	// or 504 with a reason, never a 500 and never a bare 5xx.
	for what, n := range errs {
		code, reason, _ := strings.Cut(what, " ")
		if (code == "503" || code == "504") && reason != "" {
			continue
		}
		for _, api := range apis {
			for _, line := range strings.Split(localcluster.Tail(c.LogPath(api), 400), "\n") {
				if strings.Contains(line, `"status":`+code) {
					t.Logf("%s: %s", api, line)
				}
			}
		}
		t.Errorf("%d answers %q during the failover: only 503/504 with a reason may be retried", n, what)
	}

	cc := rc.Client()
	defer cc.Close()
	es, err := eventstore.NewRedis(eventstore.Config{Client: cc})
	require.NoError(t, err)
	cs, err := commerce.NewRedis(commerce.Config{Client: cc})
	require.NoError(t, err)
	reader := &client.API{BaseURL: c.APIURL(apis[0]), HTTP: hc}
	want := []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentAuthorized, order.TypeOrderConfirmed}
	settle := time.Now()
	seen := map[string]bool{}
	for _, a := range acks {
		require.False(t, seen[a.order], "key %s: its order %s was acknowledged for another key too", a.key, a.order)
		seen[a.order] = true
		st, terminal, rep, err := reader.WaitTerminal(ctx, a.order, 30*time.Second)
		require.NoError(t, err, "%s %s", a.order, rep)
		require.True(t, terminal, "acknowledged order %s is terminal by itself", a.order)
		require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus(), a.order)
		envs, err := es.Load(ctx, a.order)
		require.NoError(t, err)
		types := make([]string, len(envs))
		for i, e := range envs {
			types[i] = e.EventType
		}
		require.Equal(t, want, types, "order %s: one start, the success events, once each", a.order)
		captured, err := cs.Payment().Captured(ctx, order.PaymentID(a.order))
		require.NoError(t, err)
		require.Equal(t, st.GetAmount(), captured, "order %s authorized once, for its amount", a.order)
	}
	t.Logf("FIGURE redis cluster master killed under load: %d of %d acknowledged orders Confirmed, each effect once, all terminal %s after the load stopped",
		len(acks), len(acks), time.Since(settle).Round(10*time.Millisecond))
	for _, w := range c.Workflows() {
		require.Empty(t, c.Restarts(w), "%s was not restarted", w)
	}
}
