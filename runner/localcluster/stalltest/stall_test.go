package stalltest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

const (
	// lease is the workflows' -lease: short, so that an outage of
	// lease+4s (outage) outlasts it by far and the test stays short.
	lease  = 3 * time.Second
	outage = lease + 4*time.Second
	// clients start orders in a closed loop, each alternating between
	// the two APIs, from warmUp before the outage to coolDown after.
	clients  = 4
	warmUp   = 1500 * time.Millisecond
	coolDown = 2 * time.Second
	// failurePace spaces a client's next key after a failed start.
	failurePace = 200 * time.Millisecond
	// requestTimeout is the APIs' -request-timeout.
	requestTimeout = 4 * time.Second
	// terminalWithin bounds, from the moment the store answers again,
	// how long an acknowledged order may take to reach a terminal status
	// (issue 26: 60 s).
	terminalWithin = 60 * time.Second
	// retryFor bounds the retries of a failed key until acknowledged.
	retryFor  = 30 * time.Second
	retryPace = 200 * time.Millisecond
)

const (
	cartID    = "cart-stall"
	skuA      = "sku-stall-a"
	methodOK  = "pm-stall-ok"
	addressID = "addr-stall"
)

func seed() commerce.Seed {
	return commerce.Seed{
		Carts:   []commerce.Cart{{CartID: cartID, Lines: []*contracts.OrderLine{{Sku: skuA, Quantity: 1}}, Amount: 1990, Currency: "EUR"}},
		Stock:   map[string]int64{skuA: 1_000_000},
		Methods: []commerce.PaymentMethod{{MethodID: methodOK, Approve: true}},
	}
}

type fixture struct {
	c    *localcluster.Cluster
	apis []*client.API
}

func startCluster(t *testing.T) *fixture {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		// Only an append-only file fsynced before every reply keeps, over
		// a SIGKILL, every write Redis acknowledged.
		RedisPersist: true, RedisAppendFsync: "always",
		RequestTimeout: requestTimeout,
		WorkflowLease:  lease,
		Env:            localcluster.ChildEnv(os.Environ()),
		StopGrace:      10 * time.Second,
		Logf:           t.Logf,
		BeforeNodes: func(ctx context.Context, url string) error {
			opt, err := redis.ParseURL(url)
			if err != nil {
				return err
			}
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
			if err != nil {
				return err
			}
			return cs.ApplySeed(ctx, seed())
		},
	})
	require.NoError(t, err)
	nodes := append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...)
	t.Cleanup(func() {
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
	hc := &http.Client{Timeout: requestTimeout + 5*time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	f := &fixture{c: c}
	for _, n := range localcluster.APINodes {
		f.apis = append(f.apis, &client.API{BaseURL: c.APIURL(n), HTTP: hc})
	}
	return f
}

// attempt is one POST /orders and what it was told.
type attempt struct {
	key        string
	begin, end time.Time
	status     int
	code       string
	reason     string
	orderID    string
	err        error
}

func (a attempt) acked() bool {
	return a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK) && a.orderID != ""
}

func (a attempt) outcome() string {
	switch {
	case a.acked():
		return strconv.Itoa(a.status)
	case a.status == 0:
		return "transport error"
	default:
		return strings.TrimSpace(fmt.Sprintf("%d %s %s", a.status, a.code, a.reason))
	}
}

func (f *fixture) start(ctx context.Context, api int, key string) attempt {
	a := attempt{key: key, begin: time.Now()}
	res, rep, err := f.apis[api%len(f.apis)].StartOrder(ctx, &contracts.StartOrderReq{
		CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: key,
	})
	a.end, a.status, a.err = time.Now(), rep.Status, err
	if rep.Error != nil {
		a.code, a.reason = rep.Error.Code, rep.Error.Reason
	}
	if err == nil && res != nil {
		a.orderID = res.GetOrderId()
	}
	return a
}

// statusOf reads an order's status through the APIs, either one.
func (f *fixture) statusOf(ctx context.Context, id string, n int) string {
	st, rep, err := f.apis[n%len(f.apis)].GetOrder(ctx, id)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case st == nil:
		return rep.String()
	}
	return st.GetStatus().String()
}

func terminal(s string) bool {
	return s == contracts.OrderStatus_Confirmed.String() || s == contracts.OrderStatus_Failed.String()
}

func tally(as []attempt) string {
	n := map[string]int{}
	for _, a := range as {
		n[a.outcome()]++
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
	return strings.Join(parts, ", ")
}

// pace waits d unless ctx ends first: pacing of the load and the fault,
// never a wait for a condition.
func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ride runs the light load around fault, which makes the store stop
// answering and returns once it answers again (when), and checks every
// outcome issue 26 asks of a stall.
func ride(t *testing.T, name string, fault func(ctx context.Context, f *fixture) (began, answered time.Time)) {
	f := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano()&0xffffffffff, 36)
	pids := map[string]int{}
	logFrom := map[string]int64{}
	for _, n := range localcluster.WorkflowNodes {
		pids[n] = f.c.PID(n)
		off, err := localcluster.LogSize(f.c.LogPath(n))
		require.NoError(t, err)
		logFrom[n] = off
	}

	// ---- Load, with the fault in the middle.
	var mu sync.Mutex
	var all []attempt
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; loadCtx.Err() == nil; j++ {
				a := f.start(ctx, i+j, fmt.Sprintf("stall-%s-%s-c%d-%04d", name, run, i, j))
				mu.Lock()
				all = append(all, a)
				mu.Unlock()
				if !a.acked() {
					pace(loadCtx, failurePace)
				}
			}
		}()
	}
	pace(ctx, warmUp)
	began, answered := fault(ctx, f)
	t.Logf("%s: the store stopped answering for %s", name, answered.Sub(began).Round(time.Millisecond))
	pace(ctx, coolDown)
	stopLoad()
	wg.Wait()

	var failed []attempt
	var internal []attempt
	acked := map[string]string{} // key -> order id
	for _, a := range all {
		if a.acked() {
			acked[a.key] = a.orderID
			continue
		}
		failed = append(failed, a)
		if a.status == http.StatusInternalServerError || a.code == "INTERNAL" || a.reason == "NO_ELIGIBLE_MEMBER" {
			internal = append(internal, a)
		}
	}
	t.Logf("load: %d starts by %d clients: %d acknowledged, %d failed; answers: %s", len(all), clients, len(acked), len(failed), tally(all))
	require.NotEmpty(t, failed, "no start failed: the fault had no effect")

	// ---- Every failed key, retried with the same key and body, is
	// acknowledged.
	retryDeadline := time.Now().Add(retryFor)
	var retries []attempt
	var unacked []string
	for i, a := range failed {
		for n := i; ; n++ {
			r := f.start(ctx, n, a.key)
			retries = append(retries, r)
			if r.acked() {
				acked[a.key] = r.orderID
				break
			}
			if time.Now().After(retryDeadline) {
				unacked = append(unacked, fmt.Sprintf("%s: last %s", a.key, r.outcome()))
				break
			}
			pace(ctx, retryPace)
		}
	}
	t.Logf("retry: %d failed keys retried with %d starts; answers: %s", len(failed), len(retries), tally(retries))
	require.Empty(t, unacked, "failed keys that a retry with the same key and body never acknowledged")

	// ---- Every acknowledged order reaches a terminal status by itself.
	pending := map[string]string{}
	for key, id := range acked {
		pending[id] = key
	}
	deadline := answered.Add(terminalWithin)
	last := map[string]string{}
	var allTerminalAt time.Time
	for n := 0; ; n++ {
		for id := range pending {
			s := f.statusOf(ctx, id, n)
			last[id] = s
			if terminal(s) {
				delete(pending, id)
			}
		}
		if len(pending) == 0 {
			allTerminalAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			break
		}
		pace(ctx, 200*time.Millisecond)
	}
	var stuck []string
	for id, key := range pending {
		stuck = append(stuck, fmt.Sprintf("%s (key %s): %s", id, key, last[id]))
	}
	sort.Strings(stuck)
	require.Empty(t, stuck, "acknowledged orders not terminal %s after the store answered again", terminalWithin)
	t.Logf("FIGURE %s: %d acknowledged orders (%d of them keys that failed first) all terminal %s after the store answered again",
		name, len(acked), len(failed), allTerminalAt.Sub(answered).Round(time.Millisecond))

	// ---- No member restarted or fenced itself; each suspended and
	// resumed, and nothing answered INTERNAL or NO_ELIGIBLE_MEMBER.
	suspendedSomewhere := 0
	for _, n := range localcluster.WorkflowNodes {
		require.Empty(t, f.c.Restarts(n), "%s was restarted", n)
		require.Equal(t, pids[n], f.c.PID(n), "%s is the same process", n)
		cur := localcluster.NewLogCursor(f.c.LogPath(n), logFrom[n])
		require.NoError(t, cur.Refresh())
		fenced := cur.Lines(localcluster.MatchFunc("self-fenced", func(l string) bool { return strings.Contains(l, `"msg":"self-fenced: `) }))
		require.Empty(t, fenced, "%s fenced itself", n)
		susp := cur.Count(localcluster.MatchFunc("suspended", func(l string) bool { return strings.Contains(l, `"msg":"suspended: `) }))
		res := cur.Count(localcluster.MatchFunc("resumed", func(l string) bool { return strings.Contains(l, `"msg":"resumed: `) }))
		t.Logf("%s: suspended %d times, resumed %d times", n, susp, res)
		require.Equal(t, susp, res, "%s resumed after each suspension", n)
		suspendedSomewhere += susp
	}
	require.Positive(t, suspendedSomewhere, "no member suspended: the outage did not outlast the lease")
	for _, a := range internal {
		t.Logf("  INTERNAL or NO_ELIGIBLE_MEMBER: %s %s", a.key, a.outcome())
	}
	require.Empty(t, internal, "answers that were INTERNAL or NO_ELIGIBLE_MEMBER")
}

// TestFrozenStoreIsRiddenOut: redis-server frozen with SIGSTOP for
// lease+4s under load, then SIGCONT.
func TestFrozenStoreIsRiddenOut(t *testing.T) {
	ride(t, "frozen", func(ctx context.Context, f *fixture) (time.Time, time.Time) {
		pid := f.c.RedisPID()
		var once sync.Once
		cont := func() {
			once.Do(func() {
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Logf("SIGCONT redis-server pid %d: %v", pid, err)
				}
			})
		}
		t.Cleanup(cont) // never leave it stopped
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		began := time.Now()
		t.Logf("SIGSTOP redis-server pid=%d for %s (lease %s)", pid, outage, lease)
		pace(ctx, outage)
		cont()
		return began, time.Now()
	})
}

// TestKilledStoreIsRiddenOut: redis-server SIGKILLed under load and
// started again from its append-only file lease+4s later.
func TestKilledStoreIsRiddenOut(t *testing.T) {
	ride(t, "killed", func(ctx context.Context, f *fixture) (time.Time, time.Time) {
		require.NoError(t, f.c.KillRedis())
		began := time.Now()
		t.Logf("SIGKILL redis-server; restarting it from its AOF in %s (lease %s)", outage, lease)
		pace(ctx, outage)
		require.NoError(t, f.c.RestartRedis(ctx))
		return began, time.Now()
	})
}

func TestMain(m *testing.M) { proctest.Main(m) }

// TestPausedMemberFencesOnTheGap: the other case of a lease without a
// read, told apart from a stall: workflow-a itself is SIGSTOPped for
// longer than the lease while the store answers all along. Once it runs
// again it fences on the gap alone ("did not run"), exits 3 and is
// started again as a new member, and orders started afterwards confirm.
func TestPausedMemberFencesOnTheGap(t *testing.T) {
	f := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	paused := localcluster.WorkflowA
	pid := f.c.PID(paused)
	logFrom, err := localcluster.LogSize(f.c.LogPath(paused))
	require.NoError(t, err)
	var once sync.Once
	cont := func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Logf("SIGCONT %s pid %d: %v", paused, pid, err)
			}
		})
	}
	t.Cleanup(cont)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	pace(ctx, lease+1500*time.Millisecond)
	cont()
	require.Eventually(t, func() bool { return len(f.c.Restarts(paused)) == 1 }, 20*time.Second, 20*time.Millisecond,
		"%s was not restarted after fencing itself", paused)
	r := f.c.Restarts(paused)[0]
	require.Equal(t, "exit status 3", r.Exit, "the self-fenced exit status")
	cur := localcluster.NewLogCursor(f.c.LogPath(paused), logFrom)
	require.NoError(t, cur.Refresh())
	fenced := cur.Lines(localcluster.MatchFunc("self-fenced", func(l string) bool { return strings.Contains(l, `"msg":"self-fenced: `) }))
	require.Len(t, fenced, 1)
	t.Logf("%s: %s", paused, fenced[0])
	// The gap decides before any read; a read that found the gone record
	// the others wrote meanwhile would say "recorded gone".
	require.Contains(t, fenced[0], "did not run", "fenced on the gap, before reading anything")
	require.Zero(t, cur.Count(localcluster.MatchFunc("suspended", func(l string) bool { return strings.Contains(l, `"msg":"suspended: `) })),
		"a pause is no stall")

	for i := range 4 {
		var a attempt
		require.Eventually(t, func() bool {
			a = f.start(ctx, i, fmt.Sprintf("stall-gap-%d-%d", time.Now().UnixNano(), i))
			return a.acked()
		}, 20*time.Second, 200*time.Millisecond, "a start after the pause: %s", a.outcome())
		require.Eventually(t, func() bool { return f.statusOf(ctx, a.orderID, i) == contracts.OrderStatus_Confirmed.String() },
			30*time.Second, 50*time.Millisecond, "order %s confirms", a.orderID)
	}
}
