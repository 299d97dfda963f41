package pausetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

const (
	// pauseFor is the SIGSTOP: longer than the 2 s health-check timeout
	// after which the automanaged provider drops a silent member (checks
	// every -refresh, 500 ms), so the member is evicted for certain.
	pauseFor = 3500 * time.Millisecond
	// capacityWithin bounds "a few seconds" from SIGCONT until both APIs
	// count two workflow members again: fence, exit, supervisor backoff,
	// start, join.
	capacityWithin = 15 * time.Second
	// ordersPerAPI are started through each API before the pause; cold
	// activations alternate, so both workflow members own some.
	ordersPerAPI = 4
)

type fixture struct {
	c    *localcluster.Cluster
	apis map[string]*client.API
	loc  *location.Redis
	hc   *http.Client
}

// startCluster starts redis-server and the four nodes under the default
// restart policy (the supervisor restarts a node that exits on its own),
// with the demo catalogue seeded first.
func startCluster(t *testing.T, workflowArgs ...string) *fixture {
	t.Helper()
	return startClusterWith(t, func(c *localcluster.Config) { c.WorkflowArgs = workflowArgs })
}

// startClusterWith is startCluster with edit's changes to the Config.
func startClusterWith(t *testing.T, edit func(*localcluster.Config)) *fixture {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		RequestTimeout: 5 * time.Second,
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
	}
	edit(&cfg)
	c, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
				t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 25))
			}
		}
		// Killed, not drained: a drain of every order would only slow
		// the teardown. Kill takes each node from the supervisor first.
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
	hc := &http.Client{Timeout: 15 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)
	f := &fixture{c: c, apis: map[string]*client.API{}, loc: loc, hc: hc}
	for _, n := range localcluster.APINodes {
		f.apis[n] = &client.API{BaseURL: c.APIURL(n), HTTP: hc}
	}
	return f
}

func newRedis(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// workflowMembers is what an API's /readyz counts, or -1 if it is not
// ready or does not answer.
func (f *fixture) workflowMembers(api string) int {
	res, err := f.hc.Get(f.c.APIURL(api) + "/readyz")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var body struct {
		WorkflowMembers int `json:"workflowMembers"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &body) != nil {
		return -1
	}
	return body.WorkflowMembers
}

func ownerGone(rep client.Reply) bool {
	return rep.Status == http.StatusServiceUnavailable && rep.Error != nil &&
		rep.Error.Code == edge.CodeUnavailable && rep.Error.Reason == edge.ReasonOwnerGone
}

// TestPausedOwnerIsRecordedGoneFencesItselfAndCapacityReturns: workflow-a,
// owning confirmed orders, is SIGSTOPped for 3.5 s and continued. The
// others record it gone while it is stopped; it finds the record, logs
// "self-fenced: ...", exits 3 and is started again by the supervisor, and
// both APIs count two workflow members again within capacityWithin of the
// SIGCONT. Its old orders answer 503 UNAVAILABLE OWNER_GONE from both
// APIs with their records untouched; workflow-b was never disturbed (the
// paused member's stale view recorded nobody gone), and new orders
// confirm.
func TestPausedOwnerIsRecordedGoneFencesItselfAndCapacityReturns(t *testing.T) {
	f := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	names, err := f.loc.MemberNames(ctx)
	require.NoError(t, err)
	memberOf := map[string]string{}
	for id, n := range names {
		memberOf[n] = id
	}
	paused, other := localcluster.WorkflowA, localcluster.WorkflowB
	require.NotEmpty(t, memberOf[paused], "member names: %v", names)
	oldMember := memberOf[paused]

	// Orders on both members, all Confirmed, each owner known.
	var ids []string
	for _, api := range localcluster.APINodes {
		for i := range ordersPerAPI {
			res, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
				CartId: commerce.DemoCartOK, ShippingAddressId: "addr-pause", PaymentMethodId: commerce.DemoMethodOK,
				IdempotencyKey: fmt.Sprintf("pause-%s-%s-%d", run, api, i),
			})
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, rep.Status, "%s", rep)
			ids = append(ids, res.GetOrderId())
		}
	}
	owned := map[string][]string{}
	before := map[string]location.Record{}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			st, _, err := f.apis[localcluster.APIA].GetOrder(ctx, id)
			return err == nil && st.GetStatus() == contracts.OrderStatus_Confirmed
		}, 30*time.Second, 20*time.Millisecond, "order %s confirms", id)
		rec, err := f.loc.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		require.Equal(t, location.Ready, rec.Status)
		before[id] = rec
		owned[names[rec.Owner]] = append(owned[names[rec.Owner]], id)
	}
	require.NotEmpty(t, owned[paused], "no order on %s: %v", paused, owned)
	require.NotEmpty(t, owned[other], "no order on %s: %v", other, owned)
	for _, api := range localcluster.APINodes {
		require.Equal(t, 2, f.workflowMembers(api), "%s counts both workflow members before the pause", api)
	}
	pid, otherPID := f.c.PID(paused), f.c.PID(other)
	logFrom, err := localcluster.LogSize(f.c.LogPath(paused))
	require.NoError(t, err)

	// The pause.
	var contOnce sync.Once
	var contAt time.Time
	cont := func() {
		contOnce.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Logf("SIGCONT %s pid %d: %v", paused, pid, err)
			}
			contAt = time.Now()
		})
	}
	t.Cleanup(cont) // never leave it stopped
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stopAt := time.Now()
	t.Logf("SIGSTOP %s pid=%d member=%s, owning %d orders", paused, pid, oldMember, len(owned[paused]))
	require.Eventually(t, func() bool { return proctest.ProcState(pid) == "T" }, time.Second, 5*time.Millisecond)
	// While it is stopped, watch for its gone record (pacing: the pause
	// lasts pauseFor whatever happens).
	var recordedAt time.Time
	for time.Since(stopAt) < pauseFor {
		if recordedAt.IsZero() {
			if _, ok, err := f.loc.IsGone(ctx, oldMember); err == nil && ok {
				recordedAt = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(min(50*time.Millisecond, time.Until(stopAt.Add(pauseFor)))):
		}
	}
	cont()
	t.Logf("SIGCONT %s after %s stopped", paused, contAt.Sub(stopAt).Round(time.Millisecond))

	// Recorded gone by the others while it was stopped.
	g, ok, err := f.loc.IsGone(ctx, oldMember)
	require.NoError(t, err)
	require.True(t, ok, "%s's member %s is recorded gone", paused, oldMember)
	require.False(t, recordedAt.IsZero(), "the gone record was written while the member was stopped")
	require.Equal(t, paused, g.Node)
	leftAt := time.UnixMilli(g.LeftAtUnixMs)
	require.True(t, !leftAt.Before(stopAt.Truncate(time.Millisecond)) && leftAt.Before(contAt),
		"left at %s, stopped %s..%s", leftAt, stopAt, contAt)

	// It fences itself, exits 3, and the supervisor starts it again.
	require.Eventually(t, func() bool { return len(f.c.Restarts(paused)) == 1 }, capacityWithin, 20*time.Millisecond,
		"%s was not restarted by the supervisor", paused)
	r := f.c.Restarts(paused)[0]
	t.Logf("supervisor: %s", r)
	require.Equal(t, pid, r.OldPID)
	require.Equal(t, "exit status 3", r.Exit, "the self-fenced exit status")
	fenced, err := localcluster.NewLogCursor(f.c.LogPath(paused), logFrom), error(nil)
	require.NoError(t, fenced.Refresh())
	fenceLines := fenced.Lines(localcluster.MatchFunc(`"msg":"self-fenced: `, func(l string) bool {
		return strings.Contains(l, `"msg":"self-fenced: `) && strings.Contains(l, "recorded gone")
	}))
	require.Len(t, fenceLines, 1, "the paused incarnation logs why it fenced itself")
	t.Logf("%s: %s", paused, fenceLines[0])
	stalls := fenced.Count(localcluster.MatchFunc("stall", func(l string) bool {
		return strings.Contains(l, "not recording a member gone")
	}))
	t.Logf("departures the paused member saw and did not record: %d", stalls)

	// Capacity back: both APIs count two workflow members again.
	var capacityAt time.Time
	require.Eventually(t, func() bool {
		if f.workflowMembers(localcluster.APIA) == 2 && f.workflowMembers(localcluster.APIB) == 2 {
			capacityAt = time.Now()
			return true
		}
		return false
	}, capacityWithin, 20*time.Millisecond, "the APIs do not count two workflow members again")
	t.Logf("FIGURE pause -> capacity back: gone recorded %s after SIGSTOP; exited %s after SIGCONT; restarted %s after the exit; "+
		"workflowMembers=2 on both APIs %s after SIGCONT (%s after SIGSTOP)",
		recordedAt.Sub(stopAt).Round(time.Millisecond), r.ExitedAt.Sub(contAt).Round(time.Millisecond),
		r.At.Sub(r.ExitedAt).Round(time.Millisecond), capacityAt.Sub(contAt).Round(time.Millisecond),
		capacityAt.Sub(stopAt).Round(time.Millisecond))
	// The new incarnation publishes its name once it has joined, so the
	// APIs may count it a moment before its name is in the store.
	newMember := ""
	require.Eventually(t, func() bool {
		names, err := f.loc.MemberNames(ctx)
		require.NoError(t, err)
		for id, n := range names {
			if n == paused && id != oldMember {
				newMember = id
			}
		}
		return newMember != ""
	}, capacityWithin, 20*time.Millisecond, "%s came back as a new member id", paused)

	// The paused member's old orders: OWNER_GONE from both APIs, fast,
	// records untouched (no release, no relocation, no takeover).
	for _, id := range owned[paused] {
		for _, api := range localcluster.APINodes {
			began := time.Now()
			_, rep, err := f.apis[api].Continue(ctx, id)
			require.NoError(t, err)
			require.True(t, ownerGone(rep), "continue of %s through %s: %s", id, api, rep)
			proctest.RequireFaster(t, time.Since(began), time.Second, "Unavailable at once")
		}
		rec, err := f.loc.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		require.Equal(t, before[id], rec, "the record of %s stays Ready at the old member", id)
	}
	// workflow-b was not disturbed: same process, nobody else gone, its
	// orders served.
	require.Equal(t, otherPID, f.c.PID(other), "%s was not restarted", other)
	require.Empty(t, f.c.Restarts(other))
	gone, err := f.loc.Gone(ctx)
	require.NoError(t, err)
	require.Len(t, gone, 1, "only the paused member is recorded gone: %v", gone)
	for _, id := range owned[other] {
		for _, api := range localcluster.APINodes {
			st, rep, err := f.apis[api].Continue(ctx, id)
			require.NoError(t, err)
			require.True(t, rep.OK(), "continue of %s (on %s) through %s: %s", id, other, api, rep)
			require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
		}
	}
	// New orders confirm, on both members again: orders go on until one
	// lands on the new member, within capacityWithin (placement's
	// rotation, not this test, decides where the first few go).
	onNew := 0
	newUntil := time.Now().Add(capacityWithin)
	for i := 0; i < 2*ordersPerAPI || (onNew == 0 && time.Now().Before(newUntil)); i++ {
		api := localcluster.APINodes[i%2]
		res, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
			CartId: commerce.DemoCartOK, ShippingAddressId: "addr-pause", PaymentMethodId: commerce.DemoMethodOK,
			IdempotencyKey: fmt.Sprintf("pause-%s-after-%d", run, i),
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, rep.Status, "start after the pause: %s", rep)
		id := res.GetOrderId()
		require.Eventually(t, func() bool {
			st, _, err := f.apis[api].GetOrder(ctx, id)
			return err == nil && st.GetStatus() == contracts.OrderStatus_Confirmed
		}, 30*time.Second, 20*time.Millisecond, "order %s started after the pause confirms", id)
		rec, err := f.loc.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		require.NotEqual(t, oldMember, rec.Owner)
		if rec.Owner == newMember {
			onNew++
		}
	}
	require.Positive(t, onNew, "the restarted %s takes new orders", paused)
}

// TestAPrunedPausedMemberFencesInsteadOfServing: workflow-a, owning no
// order, is SIGSTOPped; the others record it gone, and workflow-b's
// reconciler (every 300 ms here, pruning members gone for 1 ms) prunes
// its name and gone record while it is stopped. Its lease is 2 minutes,
// so on SIGCONT the lease does not fence it, and its gone record is no
// longer there to: only its pruned name can. It logs "self-fenced: ...
// recorded gone and pruned", exits 3 and is started again as a new
// member, and no gone record of the old member id comes back.
func TestAPrunedPausedMemberFencesInsteadOfServing(t *testing.T) {
	f := startCluster(t, "-lease", "2m", "-reconcile-every", "300ms", "-prune-members-after", "1ms")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names, err := f.loc.MemberNames(ctx)
	require.NoError(t, err)
	var old string
	for id, n := range names {
		if n == localcluster.WorkflowA {
			old = id
		}
	}
	require.NotEmpty(t, old, "member names: %v", names)
	pid := f.c.PID(localcluster.WorkflowA)
	logFrom, err := localcluster.LogSize(f.c.LogPath(localcluster.WorkflowA))
	require.NoError(t, err)

	var contOnce sync.Once
	cont := func() { contOnce.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(cont)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stopAt := time.Now()
	require.Eventually(t, func() bool { return proctest.ProcState(pid) == "T" }, time.Second, 5*time.Millisecond)
	var recorded bool
	require.Eventually(t, func() bool {
		if _, ok, err := f.loc.IsGone(ctx, old); err == nil && ok {
			recorded = true
		}
		name, err := f.loc.MemberName(ctx, old)
		_, gone, err2 := f.loc.IsGone(ctx, old)
		return recorded && err == nil && err2 == nil && name == "" && !gone
	}, 60*time.Second, 20*time.Millisecond, "workflow-a recorded gone (%v), then pruned, while stopped", &recorded)
	t.Logf("workflow-a (member %s) recorded gone and pruned %s after its SIGSTOP", old, time.Since(stopAt).Round(time.Millisecond))
	cont()

	require.Eventually(t, func() bool { return len(f.c.Restarts(localcluster.WorkflowA)) == 1 }, capacityWithin, 20*time.Millisecond,
		"workflow-a was not restarted by the supervisor")
	r := f.c.Restarts(localcluster.WorkflowA)[0]
	require.Equal(t, pid, r.OldPID)
	require.Equal(t, "exit status 3", r.Exit, "the self-fenced exit status")
	lines := localcluster.NewLogCursor(f.c.LogPath(localcluster.WorkflowA), logFrom)
	require.NoError(t, lines.Refresh())
	fenceLines := lines.Lines(localcluster.MatchFunc(`"msg":"self-fenced: `, func(l string) bool {
		return strings.Contains(l, `"msg":"self-fenced: `)
	}))
	require.Len(t, fenceLines, 1, "the paused incarnation logs why it fenced itself")
	require.Contains(t, fenceLines[0], "recorded gone and pruned", "its pruned name fenced it, not its lease nor a gone record")
	require.Contains(t, fenceLines[0], `"leaseExpired":false`)
	t.Logf("workflow-a: %s", fenceLines[0])
	_, gone, err := f.loc.IsGone(ctx, old)
	require.NoError(t, err)
	require.False(t, gone, "the pruned member's record stays pruned")
	for _, api := range localcluster.APINodes {
		require.Eventually(t, func() bool { return f.workflowMembers(api) == 2 }, capacityWithin, 50*time.Millisecond,
			"%s counts two workflow members again", api)
	}
}

// restarts is how many times TestMembershipKeysStayBoundedAcrossRestarts
// kills a workflow member: each kill leaves a member name, a gone record,
// a heartbeat and an index that only pruning takes away.
const restarts = 12

// TestMembershipKeysStayBoundedAcrossRestarts: the two workflow members
// are SIGKILLed and started again by the supervisor, one after the
// other, restarts times, while an order starts every 100 ms through the
// APIs. Every incarnation leaves its name, its gone record, its heartbeat
// and its index behind, and the orders it owned wait (Unavailable)
// until an operator takes its node's dead incarnations over. Then the
// reconcilers (every 500 ms here, pruning members gone for 3 s) prune
// every dead incarnation, so the membership keys hold the live members
// alone, and every acknowledged order is confirmed.
func TestMembershipKeysStayBoundedAcrossRestarts(t *testing.T) {
	f := startClusterWith(t, func(c *localcluster.Config) {
		c.Admin = true
		c.WorkflowArgs = []string{"-reconcile-every", "500ms", "-prune-members-after", "3s"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	before, err := f.loc.MembershipSize(ctx)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	refused := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			api := localcluster.APINodes[i%len(localcluster.APINodes)]
			res, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
				CartId: commerce.DemoCartOK, ShippingAddressId: "addr-restarts", PaymentMethodId: commerce.DemoMethodOK,
				IdempotencyKey: fmt.Sprintf("restarts-%s-%d", run, i),
			})
			mu.Lock()
			if err == nil && rep.OK() {
				ids = append(ids, res.GetOrderId())
			} else {
				refused++ // not acknowledged: a client would retry
			}
			mu.Unlock()
		}
	}()
	began := time.Now()
	for i := range restarts {
		name := localcluster.WorkflowNodes[i%len(localcluster.WorkflowNodes)]
		n := len(f.c.Restarts(name))
		require.NoError(t, syscall.Kill(f.c.PID(name), syscall.SIGKILL))
		require.Eventually(t, func() bool { return len(f.c.Restarts(name)) > n }, 30*time.Second, 10*time.Millisecond,
			"restart %d: the supervisor starts %s again", i+1, name)
		for _, api := range localcluster.APINodes {
			require.Eventually(t, func() bool { return f.workflowMembers(api) == len(localcluster.WorkflowNodes) }, 30*time.Second, 20*time.Millisecond,
				"restart %d of %s: %s counts every workflow member again", i+1, name, api)
		}
	}
	took := time.Since(began)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	during, err := f.loc.MembershipSize(ctx)
	require.NoError(t, err)
	t.Logf("%d SIGKILL restarts in %s; %d orders acknowledged meanwhile, %d not", restarts, took.Round(time.Millisecond), len(ids), refused)
	require.NotEmpty(t, ids)

	// The operator takes every dead incarnation of each node over.
	for _, node := range localcluster.WorkflowNodes {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.c.AdminURL(localcluster.APIA)+"/admin/members/"+node+"/takeover", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+f.c.AdminToken())
		res, err := f.hc.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, "takeover of %s: %s", node, body)
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			st, _, err := f.apis[localcluster.APIA].GetOrder(ctx, id)
			if err == nil && st.GetStatus() == contracts.OrderStatus_Confirmed {
				return true
			}
			_, _, _ = f.apis[localcluster.APIB].Continue(ctx, id) // the client's retry of its own order
			return false
		}, 60*time.Second, 100*time.Millisecond, "acknowledged order %s confirms", id)
	}

	var after location.MembershipSize
	require.Eventually(t, func() bool {
		after, err = f.loc.MembershipSize(ctx)
		return err == nil && after.Gone == 0 && after.Names == before.Names
	}, 60*time.Second, 100*time.Millisecond, "the membership keys shrink back to the live members: before %+v, now %+v", &before, &after)
	require.LessOrEqual(t, after.Heartbeats, len(localcluster.WorkflowNodes))
	require.LessOrEqual(t, after.Indexes, len(localcluster.WorkflowNodes))
	t.Logf("FIGURE membership keys: before %d restarts %+v; right after them %+v; once pruned %+v", restarts, before, during, after)
}

func TestMain(m *testing.M) { proctest.Main(m) }
