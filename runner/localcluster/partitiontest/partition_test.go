package partitiontest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/partition"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

const (
	// cutFor is the partition: longer than the 2 s health-check timeout
	// after which the automanaged provider drops a member it cannot
	// reach, and than the heartbeat bound (2 s), so that a member judged
	// by one observer alone would be recorded gone several times over.
	cutFor = 8 * time.Second
	// firstFast bounds the cut API's first answer after the cut, while
	// its topology still lists the member: the call waits 500 ms for a
	// reply, then a dial of the member finds the link down (300 ms). The
	// request timeout is 5 s, so a 504 at the deadline fails it.
	firstFast = 1500 * time.Millisecond
	// fast bounds each later OWNER_UNREACHABLE answer: nothing is sent
	// to a link found down.
	fast = time.Second
	// servedWithin bounds the heal until every API serves the member's
	// orders again: the dial that sees the link back, the cut API's
	// graceful stop, the supervisor's backoff, a start and a join.
	servedWithin = 30 * time.Second
	ordersPerAPI = 4
	// isolatedWithin bounds the isolation rule: the APIs drop the member
	// (2 s), it withholds its heartbeat after seeing none for its bound
	// (2 s), the heartbeat goes stale (2 s), an API records it gone, and
	// its next probe reads the record, fences and exits.
	isolatedWithin = 30 * time.Second
)

type fixture struct {
	c    *localcluster.Cluster
	net  *partition.Net
	apis map[string]*client.API
	loc  location.Store
}

func startCluster(t *testing.T) *fixture {
	t.Helper()
	net, err := partition.New(partition.Config{Logf: t.Logf})
	require.NoError(t, err, "the partition needs root, cgroup v2 and iptables (scripts/install-iptables.sh)")
	// Last to run: the processes have exited by then, so the cgroups can
	// go.
	t.Cleanup(func() {
		if err := net.Close(); err != nil {
			t.Errorf("partition close: %v", err)
		}
	})
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		RequestTimeout: 5 * time.Second,
		Env:            localcluster.ChildEnv(os.Environ()),
		StopGrace:      10 * time.Second,
		Logf:           t.Logf,
		Cgroup: func(node string) string {
			if node == localcluster.APIA || node == localcluster.APIB || node == localcluster.WorkflowA {
				return net.Cgroup(node)
			}
			return ""
		},
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
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
				t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 30))
			}
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
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)
	hc := &http.Client{Timeout: 15 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	f := &fixture{c: c, net: net, apis: map[string]*client.API{}, loc: loc}
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

// ordersOn starts ordersPerAPI orders through each API, waits until all
// are Confirmed, and returns node's member id and the orders it owns
// (at least one).
func (f *fixture) ordersOn(ctx context.Context, t *testing.T, run, node string) (string, []string) {
	t.Helper()
	names, err := f.loc.MemberNames(ctx)
	require.NoError(t, err)
	var member string
	for id, n := range names {
		if n == node {
			member = id
		}
	}
	require.NotEmpty(t, member, "member names: %v", names)

	var ids []string
	for _, api := range localcluster.APINodes {
		for i := range ordersPerAPI {
			res, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
				CartId: commerce.DemoCartOK, ShippingAddressId: "addr-partition", PaymentMethodId: commerce.DemoMethodOK,
				IdempotencyKey: fmt.Sprintf("partition-%s-%s-%d", run, api, i),
			})
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, rep.Status, "%s", rep)
			ids = append(ids, res.GetOrderId())
		}
	}
	var owned []string
	for _, id := range ids {
		require.Eventually(t, func() bool {
			st, _, err := f.apis[localcluster.APIB].GetOrder(ctx, id)
			return err == nil && st.GetStatus() == contracts.OrderStatus_Confirmed
		}, 30*time.Second, 20*time.Millisecond, "order %s confirms", id)
		rec, err := f.loc.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		if rec.Owner == member {
			owned = append(owned, id)
		}
	}
	require.NotEmpty(t, owned, "no order on %s", node)
	return member, owned
}

func reason(rep client.Reply) string {
	if rep.Error == nil {
		return ""
	}
	return rep.Error.Reason
}

func ownerGone(rep client.Reply) bool {
	return rep.Status == http.StatusServiceUnavailable && rep.Error != nil &&
		rep.Error.Code == edge.CodeUnavailable && rep.Error.Reason == edge.ReasonOwnerGone
}

func unreachable(rep client.Reply) bool {
	return rep.Status == http.StatusServiceUnavailable && rep.Error != nil &&
		rep.Error.Code == edge.CodeUnavailable && rep.Error.Reason == edge.ReasonOwnerUnreachable
}

// TestPartitionedOwnerIsNotRecordedGoneAndIsServedThroughEveryAPIOnceHealed:
// api-a and workflow-a, which owns confirmed orders, are cut apart for 8 s
// while both reach Redis and every other process. workflow-a is never
// recorded gone (its heartbeat stays fresh), never fences and never
// restarts; its orders are served through api-b the whole time, and api-a
// answers them 503 OWNER_UNREACHABLE from its first answer on, within 1.5 s
// while its topology still lists workflow-a (the link drops silently, so
// no connection breaks) and at once after that, never a 504 at the
// deadline, OWNER_GONE or a 500; new orders start through both
// APIs. Once healed, api-a rejoins as a new member (exit 4, restarted) and
// both APIs serve workflow-a's orders again.
func TestPartitionedOwnerIsNotRecordedGoneAndIsServedThroughEveryAPIOnceHealed(t *testing.T) {
	f := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cutAPI, otherAPI, cutWF := localcluster.APIA, localcluster.APIB, localcluster.WorkflowA

	member, cutOrders := f.ordersOn(ctx, t, run, cutWF)
	for _, api := range localcluster.APINodes {
		for _, id := range cutOrders {
			_, rep, err := f.apis[api].Continue(ctx, id)
			require.NoError(t, err)
			require.True(t, rep.OK(), "continue of %s through %s before the cut: %s", id, api, rep)
		}
	}
	wfPID, apiPID := f.c.PID(cutWF), f.c.PID(cutAPI)
	wfLogFrom, err := localcluster.LogSize(f.c.LogPath(cutWF))
	require.NoError(t, err)

	// The cut.
	require.NoError(t, f.net.Cut(cutAPI, apiPID, cutWF, wfPID))
	cutAt := time.Now()
	healed := false
	heal := func() {
		if !healed {
			healed = true
			require.NoError(t, f.net.Heal())
		}
	}
	t.Cleanup(func() {
		if !healed {
			_ = f.net.Heal()
		}
	})
	t.Logf("cut %s (pid %d) from %s (pid %d, member %s, owning %d orders)", cutAPI, apiPID, cutWF, wfPID, member, len(cutOrders))

	var firstUnreachable time.Time
	var slowest, firstTook time.Duration
	unreachableAnswers, servedAnswers, started := 0, 0, 0
	for i := 0; time.Since(cutAt) < cutFor; i++ {
		id := cutOrders[i%len(cutOrders)]
		// Through the other API: served.
		_, rep, err := f.apis[otherAPI].Continue(ctx, id)
		require.NoError(t, err)
		require.True(t, rep.OK(), "continue of %s through %s during the partition: %s", id, otherAPI, rep)
		servedAnswers++
		// Through the cut API: OWNER_UNREACHABLE, fast, from the first
		// answer on, although its topology lists the member for another
		// 2 s: never a 504 at the deadline, never OWNER_GONE, never a 500.
		began := time.Now()
		_, rep, err = f.apis[cutAPI].Continue(ctx, id)
		took := time.Since(began)
		require.NoError(t, err)
		require.NotEqual(t, http.StatusInternalServerError, rep.Status, "%s", rep)
		require.NotEqual(t, edge.ReasonOwnerGone, reason(rep), "continue of %s through %s: %s", id, cutAPI, rep)
		require.True(t, unreachable(rep), "continue of %s through %s %s after the cut: %s (after %s)",
			id, cutAPI, time.Since(cutAt).Round(time.Millisecond), rep, took.Round(time.Millisecond))
		if firstUnreachable.IsZero() {
			firstUnreachable, firstTook = time.Now(), took
			proctest.RequireFaster(t, took, firstFast, "the first OWNER_UNREACHABLE through %s", cutAPI)
		} else {
			slowest = max(slowest, took)
			proctest.RequireFaster(t, took, fast, "OWNER_UNREACHABLE at once through %s", cutAPI)
		}
		unreachableAnswers++
		// New orders start through both APIs: the cut API activates them
		// on the member it still sees.
		if i%5 == 0 {
			for _, api := range localcluster.APINodes {
				_, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
					CartId: commerce.DemoCartOK, ShippingAddressId: "addr-partition", PaymentMethodId: commerce.DemoMethodOK,
					IdempotencyKey: fmt.Sprintf("partition-%s-during-%s-%d", run, api, i),
				})
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, rep.Status, "start through %s during the partition: %s", api, rep)
				started++
			}
		}
		_, gone, err := f.loc.IsGone(ctx, member)
		require.NoError(t, err)
		require.False(t, gone, "%s was recorded gone during the partition", cutWF)
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.False(t, firstUnreachable.IsZero(), "%s never answered OWNER_UNREACHABLE", cutAPI)
	heal()
	healAt := time.Now()
	t.Logf("healed after %s", healAt.Sub(cutAt).Round(time.Millisecond))

	// Every API serves the member's orders again.
	var servedAt time.Time
	require.Eventually(t, func() bool {
		for _, api := range localcluster.APINodes {
			for _, id := range cutOrders {
				_, rep, err := f.apis[api].Continue(ctx, id)
				if err != nil || !rep.OK() {
					return false
				}
			}
		}
		servedAt = time.Now()
		return true
	}, servedWithin, 100*time.Millisecond, "not every API serves %s's orders again", cutWF)

	// The cut API rejoined as a new member; the workflow member is the
	// same process, never fenced, never recorded gone.
	r := f.c.Restarts(cutAPI)
	require.Len(t, r, 1, "%s rejoins once", cutAPI)
	require.Equal(t, "exit status 4", r[0].Exit, "the rejoin exit status")
	require.Empty(t, f.c.Restarts(cutWF), "%s restarted", cutWF)
	require.Equal(t, wfPID, f.c.PID(cutWF))
	require.Empty(t, f.c.Restarts(otherAPI))
	cur := localcluster.NewLogCursor(f.c.LogPath(cutWF), wfLogFrom)
	require.NoError(t, cur.Refresh())
	require.Zero(t, cur.Count(localcluster.MatchFunc("self-fenced", func(l string) bool {
		return strings.Contains(l, "self-fenced")
	})), "%s fenced itself", cutWF)
	_, gone, err := f.loc.IsGone(ctx, member)
	require.NoError(t, err)
	require.False(t, gone, "%s is recorded gone", cutWF)
	for _, api := range localcluster.APINodes {
		for _, id := range cutOrders {
			st, _, err := f.apis[api].GetOrder(ctx, id)
			require.NoError(t, err)
			require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
		}
	}
	t.Logf("FIGURE partition %s: %s answered OWNER_UNREACHABLE %s after the cut (in %s), then %d times, slowest %s; "+
		"%s served %d continues; %d orders started during it; every API served again %s after the heal (%s rejoined: %s)",
		cutFor, cutAPI, firstUnreachable.Sub(cutAt).Round(time.Millisecond), firstTook.Round(time.Millisecond), unreachableAnswers, slowest.Round(time.Millisecond),
		otherAPI, servedAnswers, started, servedAt.Sub(healAt).Round(time.Millisecond), cutAPI, r[0])
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("out of time")
	}
}

// TestAMemberNoAPICanReachIsRecordedGoneAndFences proves the isolation
// rule (cluster/placement/gone.go) with real processes: workflow-a is cut
// apart from both APIs while it still reaches Redis and workflow-b. It
// keeps beating for its heartbeat bound, then withholds its heartbeat, so
// the APIs that lost it record it gone; it reads its own record, fences
// itself and exits 3, and the supervisor starts it as a new member. Its
// orders answer 503 OWNER_GONE through both APIs, and keep doing so after
// the heal: nothing fails over by itself. workflow-b is not disturbed and
// takes every new order meanwhile.
func TestAMemberNoAPICanReachIsRecordedGoneAndFences(t *testing.T) {
	f := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cut, other := localcluster.WorkflowA, localcluster.WorkflowB
	member, owned := f.ordersOn(ctx, t, run, cut)
	before := map[string]location.Record{}
	for _, id := range owned {
		rec, err := f.loc.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		before[id] = rec
	}
	wfPID, otherPID := f.c.PID(cut), f.c.PID(other)
	logFrom, err := localcluster.LogSize(f.c.LogPath(cut))
	require.NoError(t, err)

	for _, api := range localcluster.APINodes {
		require.NoError(t, f.net.Cut(api, f.c.PID(api), cut, wfPID))
	}
	cutAt := time.Now()
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = f.net.Heal()
		}
	})
	t.Logf("cut %s (pid %d, member %s, owning %d orders) from both APIs", cut, wfPID, member, len(owned))

	// Recorded gone, fenced, restarted; new orders start meanwhile.
	var goneAt time.Time
	started := 0
	require.Eventually(t, func() bool {
		api := localcluster.APINodes[started%len(localcluster.APINodes)]
		_, rep, err := f.apis[api].StartOrder(ctx, &contracts.StartOrderReq{
			CartId: commerce.DemoCartOK, ShippingAddressId: "addr-isolated", PaymentMethodId: commerce.DemoMethodOK,
			IdempotencyKey: fmt.Sprintf("isolated-%s-%d", run, started),
		})
		if err != nil || rep.Status != http.StatusCreated {
			t.Errorf("start through %s during the cut: %v %s", api, err, rep)
			return true
		}
		started++
		if goneAt.IsZero() {
			if _, gone, err := f.loc.IsGone(ctx, member); err == nil && gone {
				goneAt = time.Now()
			}
		}
		return !goneAt.IsZero() && len(f.c.Restarts(cut)) == 1
	}, isolatedWithin, 50*time.Millisecond, "%s was not recorded gone and restarted", cut)
	require.False(t, t.Failed())
	r := f.c.Restarts(cut)[0]
	require.Equal(t, wfPID, r.OldPID)
	require.Equal(t, "exit status 3", r.Exit, "the self-fenced exit status")
	cur := localcluster.NewLogCursor(f.c.LogPath(cut), logFrom)
	require.NoError(t, cur.Refresh())
	require.Equal(t, 1, cur.Count(localcluster.MatchFunc("withheld", func(l string) bool {
		return strings.Contains(l, "withholding")
	})), "%s logs once that it withholds its heartbeat", cut)
	require.Equal(t, 1, cur.Count(localcluster.MatchFunc("self-fenced", func(l string) bool {
		return strings.Contains(l, `"msg":"self-fenced: `) && strings.Contains(l, "recorded gone")
	})), "%s fences itself because it is recorded gone", cut)

	// Its orders: OWNER_GONE through both APIs, their records untouched.
	gone := func(when string) {
		for _, id := range owned {
			for _, api := range localcluster.APINodes {
				_, rep, err := f.apis[api].Continue(ctx, id)
				require.NoError(t, err)
				require.True(t, ownerGone(rep), "continue of %s through %s %s: %s", id, api, when, rep)
			}
			rec, err := f.loc.Get(ctx, grain.KindName, id)
			require.NoError(t, err)
			require.Equal(t, before[id], rec, "the record of %s stays at the gone member", id)
		}
	}
	require.Eventually(t, func() bool {
		for _, id := range owned {
			for _, api := range localcluster.APINodes {
				if _, rep, err := f.apis[api].Continue(ctx, id); err != nil || !ownerGone(rep) {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "%s's orders do not answer OWNER_GONE", cut)
	gone("during the cut")
	require.NoError(t, f.net.Heal())
	healed = true
	healAt := time.Now()

	// After the heal the new incarnation joins both APIs' views, and the
	// old orders still wait for an operator.
	newMember := ""
	require.Eventually(t, func() bool {
		names, err := f.loc.MemberNames(ctx)
		for id, n := range names {
			if err == nil && n == cut && id != member {
				newMember = id
			}
		}
		return newMember != ""
	}, 10*time.Second, 50*time.Millisecond, "%s came back as a new member id", cut)
	require.Eventually(t, func() bool {
		st, rep, err := f.apis[localcluster.APIA].GetOrder(ctx, owned[0])
		return err == nil && rep.OK() && st.GetStatus() == contracts.OrderStatus_Confirmed
	}, 10*time.Second, 50*time.Millisecond, "the read model still serves %s", owned[0])
	gone("after the heal")
	_, isGone, err := f.loc.IsGone(ctx, newMember)
	require.NoError(t, err)
	require.False(t, isGone, "the new incarnation %s is recorded gone", newMember)
	all, err := f.loc.Gone(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1, "only the isolated member is recorded gone: %v", all)
	require.Equal(t, otherPID, f.c.PID(other), "%s was not restarted", other)
	require.Empty(t, f.c.Restarts(other))
	for _, api := range localcluster.APINodes {
		require.Empty(t, f.c.Restarts(api), "%s restarted", api)
	}
	t.Logf("FIGURE isolation: %s recorded gone %s after the cut, exited %s after it, restarted as %s; %d orders started during it; "+
		"its %d orders answered OWNER_GONE during the cut and %s after the heal",
		cut, goneAt.Sub(cutAt).Round(time.Millisecond), r.ExitedAt.Sub(cutAt).Round(time.Millisecond), newMember, started,
		len(owned), time.Since(healAt).Round(time.Millisecond))
}
