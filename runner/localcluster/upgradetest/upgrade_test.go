//go:build upgradetest

package upgradetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck/selfcheckapi"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

const (
	oldNode, newNode   = localcluster.WorkflowA, localcluster.WorkflowB
	cartOK, cartScarce = "cart-upg-ok", "cart-upg-scarce"
	sku, skuScarce     = "sku-upg", "sku-upg-scarce"
	methodOK, declined = "pm-upg-ok", "pm-upg-declined"
	// idle passivates a grain soon after its last turn, so that orders
	// come back on a cold activation within the schedule.
	idle = 2 * time.Second
	// within bounds every wait of the schedule.
	within = 45 * time.Second
)

// builds are the executables of one schedule: the old build's and the
// new build's API and workflow.
type builds struct {
	oldAPI, oldWF, newAPI, newWF string
}

// A rolling upgrade with a raise and a rollback after it, the issue's
// schedule: a mixed cluster (orders on both builds, orders that passivate
// and come back on the other build), the old member rolled to the new
// build, the raise, the old build back (drain, relocation across the
// builds), the rollback of the new build, and a new-build member again.
// Orders that hold schema-2 events answer 503 VERSION_UNSUPPORTED and are
// listed as stuck while no member reads them, then continue; every other
// order continues throughout.
func TestARollingUpgradeWithARollbackAfterTheRaise(t *testing.T) {
	fig, err := upgrade(t, tolerant(t), true)
	require.NoError(t, err)
	fig.print(t, "rollback after the raise")
	require.Positive(t, fig.unsupported, "orders of schema 2 were refused while only the old build ran")
	require.Equal(t, fig.unsupported, fig.resumed, "each of them continued once a new-build member ran")
}

// The same without the raise: every order continues on the old build
// after the rollback, and none is ever refused.
func TestARollbackBeforeTheRaise(t *testing.T) {
	fig, err := upgrade(t, tolerant(t), false)
	require.NoError(t, err)
	fig.print(t, "rollback before the raise")
	require.Zero(t, fig.unsupported)
}

// The negative run: the schedule with the raise, on builds whose reader
// of stored bodies refuses a field it does not know, fails. The newer
// build's own field (and the value its upcaster gives older orders) is
// unknown to its generated contract, so it cannot read an order back.
func TestWithoutTheTolerantReaderTheUpgradeFails(t *testing.T) {
	// The APIs keep the tolerant builds: the proof is about the members
	// that fold the streams.
	oldAPI, _ := proctest.Binaries(t)
	newAPI, _ := proctest.Build(t, "upgradetest")
	_, oldWF := proctest.Build(t, "strictreader")
	_, newWF := proctest.Build(t, "upgradetest,strictreader")
	_, err := upgrade(t, builds{oldAPI: oldAPI, oldWF: oldWF, newAPI: newAPI, newWF: newWF}, true)
	require.Error(t, err, "the schedule passed without the tolerant reader: the proof cannot fail")
	t.Logf("FIGURE negative run (tolerant reader off) failed as it must: %v", err)
}

func tolerant(t *testing.T) builds {
	oldAPI, oldWF := proctest.Binaries(t)
	newAPI, newWF := proctest.Build(t, "upgradetest")
	return builds{oldAPI: oldAPI, oldWF: oldWF, newAPI: newAPI, newWF: newWF}
}

// figures are a schedule's outcome.
type figures struct {
	started     map[string]int // orders by the build that first hosted them
	crossed     int            // orders that came back on, or moved to, the other build
	refusedMove int            // relocations to a member that cannot read the order, rolled back
	wedged      int            // orders not terminal at the end (goal 0)
	repeated    int            // orders with a repeated effect (goal 0)
	unsupported int            // orders refused with VERSION_UNSUPPORTED after the rollback
	resumed     int            // of those, continued once a new-build member ran
	orders      int
}

func (f figures) print(t *testing.T, name string) {
	t.Logf("FIGURE %s: orders=%d first hosted by old=%d new=%d, across builds=%d, relocations refused=%d, "+
		"wedged=%d (goal 0), repeated effects=%d (goal 0), VERSION_UNSUPPORTED after rollback=%d, continued after=%d",
		name, f.orders, f.started["old"], f.started["new"], f.crossed, f.refusedMove, f.wedged, f.repeated, f.unsupported, f.resumed)
}

// failed carries a schedule's first broken expectation out of it.
type failed struct{ err error }

// run is one schedule's cluster and what it drives it with.
type run struct {
	t      *testing.T
	ctx    context.Context
	b      builds
	c      *localcluster.Cluster
	token  string
	admin  map[string]string
	public map[string]*client.API
	hc     *http.Client
	events eventstore.Store
	// orders are every order started, with the build that first hosted it.
	orders map[string]string
	// nodeBuild is the build each workflow node runs now: old or new.
	nodeBuild map[string]string
	fig       figures
	seq       int
}

func (r *run) failf(format string, a ...any) { panic(failed{fmt.Errorf(format, a...)}) }

// eventually waits for cond, which says what it saw, up to within.
func (r *run) eventually(what string, cond func() (bool, string)) {
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, saw := cond()
		if ok {
			return
		}
		last = saw
		time.Sleep(100 * time.Millisecond)
	}
	r.failf("%s: not within %v (last: %s)", what, within, last)
}

// upgrade runs the schedule on b, with or without the raise, and returns
// its figures or the first expectation it broke.
func upgrade(t *testing.T, b builds, raise bool) (fig figures, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := &run{t: t, ctx: ctx, b: b, orders: map[string]string{}, fig: figures{started: map[string]int{}},
		nodeBuild: map[string]string{oldNode: "old", newNode: "new"}}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(failed)
			if !ok {
				panic(p)
			}
			err = f.err
		}
	}()
	r.start()

	// 1. A mixed cluster: orders on both builds; parked ones passivate
	// and come back on the other build.
	r.waitSchemas(map[string]int{oldNode: 1, newNode: 2})
	done := r.runThrough(8)
	parked := r.park(6)
	r.passivated(parked)
	for _, id := range parked[:2] {
		r.relocate(id, other(r.orders[id]))
		r.finish(id)
	}
	waiting1 := parked[2:] // schema 1, parked, nobody owns them

	// 2. The raise: the old member rolls to the new build first (a raise
	// is refused while a member does not read the level).
	var waiting2 []string
	if raise {
		if code, b := r.adminCall("POST", localcluster.APIA, "/admin/schema/raise", `{"to":2,"by":"upgradetest"}`); code != http.StatusConflict {
			r.failf("a raise with an old member running answered %d: %s", code, b)
		}
		r.roll(oldNode, r.b.newWF)
		r.waitSchemas(map[string]int{oldNode: 2, newNode: 2})
		if code, b := r.adminCall("POST", localcluster.APIB, "/admin/schema/raise", `{"to":2,"by":"upgradetest"}`); code != http.StatusOK {
			r.failf("the raise answered %d: %s", code, b)
		}
		r.waitWrites(2, oldNode, newNode)
		waiting2 = r.park(4)
		done = append(done, r.runThrough(4)...)
		for _, id := range append(slices.Clone(waiting2), done[len(done)-4:]...) {
			if s := r.highest(id); s != 2 {
				r.failf("%s started after the raise holds schema %d", id, s)
			}
		}
		// 3. The old build comes back: the member that ran the new build
		// drains (its orders move to the other member) and restarts as
		// the old build.
		r.passivated(waiting2)
		r.roll(oldNode, r.b.oldWF)
		r.waitSchemas(map[string]int{oldNode: 1, newNode: 2})
		// A schema-2 order cannot move to the old build: the move rolls
		// back and the order stays where it is.
		code, b := r.relocateCall(waiting2[0], oldNode)
		if code < 400 || code == http.StatusInternalServerError {
			r.failf("relocating a schema-2 order to the old build answered %d: %s", code, b)
		}
		r.fig.refusedMove++
	}
	// 3. Orders of schema 1 move across the builds.
	for _, id := range waiting1 {
		r.relocate(id, other(r.orders[id]))
	}
	r.passivated(append(slices.Clone(waiting1), waiting2...))

	// 4. The rollback: the new build's member leaves.
	if err := r.c.Drain(newNode); err != nil {
		r.failf("drain %s: %v", newNode, err)
	}
	r.waitLive(oldNode)
	for _, id := range waiting2 {
		for _, api := range localcluster.APINodes {
			_, rep, err := r.public[api].Continue(r.ctx, id)
			r.transport(err)
			if rep.Status != http.StatusServiceUnavailable || rep.Error == nil || rep.Error.Reason != "VERSION_UNSUPPORTED" {
				r.failf("continue %s on %s with no member reading it: %s", id, api, rep)
			}
		}
		r.fig.unsupported++
	}
	if len(waiting2) > 0 {
		r.stuckNames(waiting2)
	}
	// Every other order continues on the old build.
	for _, id := range waiting1 {
		r.finish(id)
	}
	r.runThrough(4)

	// 5. A new-build member again: it continues the orders only it reads.
	if err := r.c.Restart(r.ctx, newNode); err != nil {
		r.failf("restart %s: %v", newNode, err)
	}
	for _, id := range waiting2 {
		r.terminal(id)
		r.fig.resumed++
	}
	r.runThrough(2)
	r.check()
	return r.fig, nil
}

// start starts the cluster: workflow-a and api-a of the old build,
// workflow-b and api-b of the new one.
func (r *run) start() {
	t := r.t
	runDir := t.TempDir()
	cfg := localcluster.Config{
		RunDir: runDir, APIBin: r.b.oldAPI, WorkflowBin: r.b.oldWF,
		NodeBins: map[string]string{newNode: r.b.newWF, localcluster.APIB: r.b.newAPI},
		Admin:    true, SelfCheck: true, Fixtures: true,
		WorkflowIdleTimeout: idle,
		Env:                 localcluster.ChildEnv(os.Environ()),
		StopGrace:           20 * time.Second,
		Logf:                t.Logf,
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
			return cs.ApplySeed(ctx, commerce.Seed{
				Carts: []commerce.Cart{
					{CartID: cartOK, Lines: []*contracts.OrderLine{{Sku: sku, Quantity: 1}}, Amount: 1990, Currency: "EUR"},
					{CartID: cartScarce, Lines: []*contracts.OrderLine{{Sku: skuScarce, Quantity: 5}}, Amount: 4990, Currency: "EUR"},
				},
				Stock:   map[string]int64{sku: 1_000_000, skuScarce: 1},
				Methods: []commerce.PaymentMethod{{MethodID: methodOK, Approve: true}, {MethodID: declined, Reason: "card declined"}},
			})
		},
	}
	sctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(sctx, cfg)
	require.NoError(t, err)
	r.c = c
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append(c.APIs(), c.Workflows()...) {
				t.Logf("---- %s, last lines:\n%s", n, localcluster.Tail(c.LogPath(n), 30))
			}
		}
		if err := c.Stop(); err != nil {
			t.Logf("stop: %v", err)
		}
	})
	st := c.State()
	token, err := localcluster.ReadAdminToken(filepath.Dir(st.AdminTokenFile))
	require.NoError(t, err)
	r.token, r.admin, r.public = token, map[string]string{}, map[string]*client.API{}
	r.hc = &http.Client{Timeout: 30 * time.Second}
	for _, api := range localcluster.APINodes {
		n, ok := st.Node(api)
		require.True(t, ok)
		r.admin[api] = n.AdminURL
		r.public[api] = &client.API{BaseURL: n.URL, HTTP: r.hc}
	}
	opt, err := redis.ParseURL(c.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	r.events, err = eventstore.NewRedis(eventstore.Config{Client: rdb})
	require.NoError(t, err)
}

// api is the API the next call goes to: both, in turn.
func (r *run) api() string {
	r.seq++
	return localcluster.APINodes[r.seq%len(localcluster.APINodes)]
}

// transport fails the schedule on a request that got no answer.
func (r *run) transport(err error) {
	if err != nil {
		r.failf("request failed: %v", err)
	}
}

// answered fails the schedule on a 500: no step of an upgrade may be one.
func (r *run) answered(what string, rep client.Reply) {
	if rep.Status >= 500 && rep.Status != http.StatusServiceUnavailable && rep.Status != http.StatusGatewayTimeout {
		r.failf("%s answered %s", what, rep)
	}
}

// startOrder starts one order on the next API, parked at
// InventoryReserved when park, and records which build hosts it.
func (r *run) startOrder(cart, method string, park bool) string {
	api := r.api()
	key := fmt.Sprintf("upg-%s-%d-%d", strings.ReplaceAll(r.t.Name(), "/", "-"), time.Now().UnixNano(), r.seq)
	if park {
		if code, b := r.adminCall("POST", api, selfcheckapi.GatesPath, fmt.Sprintf(`{"idempotencyKey":%q,"mode":%q}`, key, selfcheckapi.GateStop)); code != http.StatusOK {
			r.failf("arm the gate: %d %s", code, b)
		}
	}
	var id string
	r.eventually("start an order on "+api, func() (bool, string) {
		res, rep, err := r.public[api].StartOrder(r.ctx, &contracts.StartOrderReq{
			IdempotencyKey: key, CartId: cart, ShippingAddressId: "addr-upg", PaymentMethodId: method,
		})
		r.transport(err)
		r.answered("start", rep)
		if res == nil {
			return false, rep.String() // a busy machine's OVERLOADED: retried with the same key
		}
		id = res.GetState().GetOrderId()
		return true, ""
	})
	r.orders[id] = r.build(r.evidence(id).OwnerNode)
	r.fig.started[r.orders[id]]++
	return id
}

// build names the build a workflow node runs now.
func (r *run) build(node string) string {
	b, ok := r.nodeBuild[node]
	if !ok {
		r.failf("no workflow node %q", node)
	}
	return b
}

func other(build string) string {
	if build == "old" {
		return newNode
	}
	return oldNode
}

// runThrough starts n orders that run to their end (one of four on a
// scarce cart, one of four with a declined payment) and waits for it.
func (r *run) runThrough(n int) []string {
	var ids []string
	for i := range n {
		cart, method := cartOK, methodOK
		switch i % 4 {
		case 2:
			cart = cartScarce
		case 3:
			method = declined
		}
		ids = append(ids, r.startOrder(cart, method, false))
	}
	for _, id := range ids {
		r.terminal(id)
	}
	return ids
}

// park starts n orders that stop at InventoryReserved.
func (r *run) park(n int) []string {
	var ids []string
	for range n {
		ids = append(ids, r.startOrder(cartOK, methodOK, true))
	}
	for _, id := range ids {
		r.eventually(id+" parks at InventoryReserved", func() (bool, string) {
			st, rep, err := r.public[r.api()].GetOrder(r.ctx, id)
			r.transport(err)
			r.answered("get", rep)
			return st.GetStatus() == contracts.OrderStatus_InventoryReserved, st.GetStatus().String()
		})
	}
	return ids
}

// terminal waits until id's read model is Confirmed or Failed.
func (r *run) terminal(id string) {
	r.eventually(id+" ends", func() (bool, string) {
		st, done, rep, err := r.public[r.api()].WaitTerminal(r.ctx, id, 2*time.Second)
		r.transport(err)
		r.answered("wait", rep)
		return done, st.GetStatus().String()
	})
}

// finish continues a parked order and waits for its end.
func (r *run) finish(id string) {
	r.eventually("continue "+id, func() (bool, string) {
		_, rep, err := r.public[r.api()].Continue(r.ctx, id)
		r.transport(err)
		r.answered("continue", rep)
		return rep.OK(), rep.String()
	})
	r.terminal(id)
}

// passivated waits until nobody owns any of ids.
func (r *run) passivated(ids []string) {
	for _, id := range ids {
		r.eventually(id+" passivates", func() (bool, string) {
			a := r.evidence(id).Authority
			return a == "Missing" || a == "", a
		})
	}
}

// relocate moves id to target and checks that it is there, on the
// target's build.
func (r *run) relocate(id, target string) {
	var code int
	var b []byte
	r.eventually("relocate "+id+" to "+target, func() (bool, string) {
		code, b = r.relocateCall(id, target)
		if code == http.StatusOK {
			return true, ""
		}
		// The request activates an order nobody owns first; should that
		// cold activation land on the target, the order is there already
		// (and the move is refused as one to its own owner).
		return r.evidence(id).OwnerNode == target, fmt.Sprintf("%d %s", code, b)
	})
	if got := r.evidence(id).OwnerNode; got != target {
		r.failf("%s relocated to %s is owned by %q", id, target, got)
	}
	if r.build(target) != r.orders[id] {
		r.fig.crossed++
	}
}

func (r *run) relocateCall(id, target string) (int, []byte) {
	code, b := r.adminCall("POST", r.api(), "/admin/orders/"+id+"/relocate", fmt.Sprintf(`{"orderId":%q,"targetNode":%q}`, id, target))
	if code == http.StatusInternalServerError {
		r.failf("relocate %s to %s answered 500: %s", id, target, b)
	}
	return code, b
}

// roll replaces node's process by one of bin: a drain (its live orders
// move to the other member), then a restart.
func (r *run) roll(node, bin string) {
	if err := r.c.Drain(node); err != nil {
		r.failf("drain %s: %v", node, err)
	}
	if err := r.c.SetBinary(node, bin); err != nil {
		r.failf("%v", err)
	}
	if err := r.c.Restart(r.ctx, node); err != nil {
		r.failf("restart %s: %v", node, err)
	}
	r.nodeBuild[node] = "old"
	if bin == r.b.newWF {
		r.nodeBuild[node] = "new"
	}
}

// waitSchemas waits until the schema report of each API shows exactly
// these workflow members live, each advertising its schema: each API
// learns of a join or a leave from its own view of the membership.
func (r *run) waitSchemas(want map[string]int) {
	r.eventually(fmt.Sprintf("workflow members advertise %v", want), func() (bool, string) {
		for _, api := range localcluster.APINodes {
			code, b := r.adminCall("GET", api, "/admin/schema", "")
			var rep compat.Report
			if code != http.StatusOK || json.Unmarshal(b, &rep) != nil {
				return false, string(b)
			}
			got := map[string]int{}
			for _, m := range rep.Members {
				if m.Workflow {
					got[m.Node] = m.Schema
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return false, api + ": " + string(b)
			}
		}
		return true, ""
	})
}

// waitLive waits until node is the only live workflow member.
func (r *run) waitLive(node string) {
	r.waitSchemas(map[string]int{node: 1})
}

// waitWrites waits until each node's writer has read the level.
func (r *run) waitWrites(level int, nodes ...string) {
	m := localcluster.MatchFunc(compat.LevelReadMsg, func(line string) bool {
		var rec map[string]any
		return json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == compat.LevelReadMsg && rec[compat.LevelKey] == float64(level)
	})
	for _, n := range nodes {
		r.eventually(n+" writes at level "+fmt.Sprint(level), func() (bool, string) {
			k, err := localcluster.CountLines(r.c.LogPath(n), 0, m)
			return err == nil && k > 0, fmt.Sprint(err)
		})
	}
}

// stuckNames checks that the stuck report lists ids as VERSION_UNSUPPORTED
// at schema 2.
func (r *run) stuckNames(ids []string) {
	code, b := r.adminCall("GET", r.api(), "/admin/orders/stuck?olderThan=0s", "")
	if code != http.StatusOK {
		r.failf("stuck report: %d %s", code, b)
	}
	var rep struct {
		Orders []struct {
			OrderID string `json:"orderId"`
			Reason  string `json:"reason"`
			Schema  int    `json:"schema"`
		} `json:"orders"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		r.failf("stuck report: %v", err)
	}
	for _, id := range ids {
		found := false
		for _, e := range rep.Orders {
			if e.OrderID == id && e.Reason == "VERSION_UNSUPPORTED" && e.Schema == 2 {
				found = true
			}
		}
		if !found {
			r.failf("the stuck report does not list %s as VERSION_UNSUPPORTED at schema 2: %s", id, b)
		}
	}
}

// highest is the highest schema of id's events.
func (r *run) highest(id string) int {
	envs, err := r.events.Load(r.ctx, id)
	if err != nil {
		r.failf("load %s: %v", id, err)
	}
	h := 0
	for _, e := range envs {
		h = max(h, e.Schema)
	}
	return h
}

// check is the end of every schedule: every order terminal, no effect
// repeated, the read model equal to the fold of the stream.
func (r *run) check() {
	r.fig.orders = len(r.orders)
	for id := range r.orders {
		st, rep, err := r.public[r.api()].GetOrder(r.ctx, id)
		r.transport(err)
		r.answered("get", rep)
		if st.GetStatus() != contracts.OrderStatus_Confirmed && st.GetStatus() != contracts.OrderStatus_Failed {
			r.fig.wedged++
			continue
		}
		ev := r.evidence(id)
		if ev.ReserveCalls > 1 || ev.AuthorizeCalls > 1 || ev.ReleaseCalls > 1 {
			r.fig.repeated++
		}
		envs, err := r.events.Load(r.ctx, id)
		if err != nil {
			r.failf("load %s: %v", id, err)
		}
		fold, err := workflow.Replay(id, envs)
		if err != nil {
			r.failf("fold %s: %v", id, err)
		}
		if !proto.Equal(fold, st) {
			r.failf("%s: the read model holds %v, the stream folds to %v", id, st, fold)
		}
	}
	if r.fig.wedged > 0 || r.fig.repeated > 0 {
		r.failf("wedged %d, repeated effects %d", r.fig.wedged, r.fig.repeated)
	}
}

// evidence is the self-check hooks' view of an order.
func (r *run) evidence(id string) selfcheckapi.Evidence {
	var ev selfcheckapi.Evidence
	code, b := r.adminCall("GET", r.api(), selfcheckapi.EvidencePath(id), "")
	if code != http.StatusOK || json.Unmarshal(b, &ev) != nil {
		r.failf("evidence of %s: %d %s", id, code, b)
	}
	return ev
}

// adminCall sends one request to api's admin listener with the token.
func (r *run) adminCall(method, api, path, body string) (int, []byte) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(r.ctx, method, r.admin[api]+path, rd)
	if err != nil {
		r.failf("%v", err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := r.hc.Do(req)
	if err != nil {
		r.failf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		r.failf("%s %s: %v", method, path, err)
	}
	return res.StatusCode, b
}
