package edgetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// newerBuild is a build of a test-only schema 2: it reads 1 and 2 and,
// at level 2, stamps 2.
var newerBuild = workflow.Codec{Schema: 2}

// A rolling upgrade and a rollback of the event schema, over HTTP, with
// real members in one process: a member of a test-only newer schema joins
// and writes the old schema while the level stays; the raise is refused
// while an old member runs and accepted once none does; orders written
// after it hold schema 2 and open only on a member that reads it, even
// with an old member back; after a rollback an order that no live member
// reads answers 503 VERSION_UNSUPPORTED, the stuck report names it, and
// it continues when a member of the newer build joins, its effects not
// repeated. No answer is a 500.
func TestARollingUpgradeOfTheEventSchema(t *testing.T) {
	h := newHarness(t)
	apiA, apiB := h.apis[0], h.apis[1]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newer := func(name string) *node.Workflow {
		h.startWorkflowWith(ctx, name, func(c *node.WorkflowConfig) {
			c.Codec, c.IdleTimeout, c.SchemaEvery = &newerBuild, 300*time.Millisecond, 50*time.Millisecond
		})
		w := h.workflows[name]
		go w.RunSchemaGate(ctx) // as the order-workflow main does
		<-w.Member.Lookup.NamePublished()
		return w
	}
	seen := func(n int) {
		t.Helper()
		for _, a := range h.apis {
			require.Eventually(t, func() bool { return len(a.api.Member.Lookup.Eligible(grain.KindName)) == n }, 10*time.Second, 10*time.Millisecond)
		}
	}
	report := func() compat.Report {
		t.Helper()
		code, b := h.do("GET", apiA, "/admin/schema", "")
		require.Equal(t, http.StatusOK, code, string(b))
		var r compat.Report
		require.NoError(t, json.Unmarshal(b, &r))
		return r
	}
	schemas := func(id string) []int {
		t.Helper()
		envs, err := h.stores.Events.Load(ctx, id)
		require.NoError(t, err)
		out := make([]int, len(envs))
		for i, e := range envs {
			out[i] = e.Schema
		}
		return out
	}
	owner := func(id string) location.Record {
		t.Helper()
		rec, err := h.stores.Location.Get(ctx, grain.KindName, id)
		require.NoError(t, err)
		return rec
	}
	highest := func(id string) int {
		t.Helper()
		n, err := h.stores.Events.(eventstore.SchemaReader).HighestSchema(ctx, id)
		require.NoError(t, err)
		return n
	}

	// Expand: the newer build joins and writes what the old ones read.
	wn := newer("workflow-new")
	seen(3)
	// Placement asks a member whose advertisement it has not read yet
	// only after the others: wait until the APIs have read it.
	for _, a := range h.apis {
		require.Eventually(t, func() bool { _, ms, _ := a.api.Member.Lookup.SchemaView(); return ms[wn.Member.ID()] == 2 },
			10*time.Second, 10*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		r := report()
		return r.Level.Level == 1 && r.Readable == 1 && len(r.Members) >= 5
	}, 10*time.Second, 20*time.Millisecond)
	for _, m := range report().Members {
		if m.Node == "workflow-new" {
			require.Equal(t, 2, m.Schema)
			require.True(t, m.Workflow)
		}
	}
	var early []string
	for range 3 {
		res := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
		h.waitStatus(apiB, res.OrderId, contracts.OrderStatus_Confirmed)
		early = append(early, res.OrderId)
	}
	onNew := 0
	for _, id := range early {
		require.Equal(t, []int{1, 1, 1, 1}, schemas(id), "the level keeps every build at schema 1")
		if owner(id).Owner == wn.Member.ID() {
			onNew++
		}
	}
	require.NotZero(t, onNew, "the newer build took orders before the raise")

	code, b := h.do("POST", apiA, "/admin/schema/raise", `{"to":2,"by":"edgetest"}`)
	require.Equal(t, http.StatusConflict, code, "the level stays while an old member runs: %s", b)
	requireCode(t, b, edge.CodeFailedPrecondition)
	require.Contains(t, string(b), "workflow-a reads up to 1")

	// The old build leaves; the level rises.
	h.workflows["workflow-a"].Member.Crash()
	h.workflows["workflow-b"].Member.Crash()
	seen(1)
	code, b = h.do("POST", apiB, "/admin/schema/raise", `{"to":2,"by":"edgetest"}`)
	require.Equal(t, http.StatusOK, code, string(b))
	var raised edge.SchemaRaiseReply
	require.NoError(t, json.Unmarshal(b, &raised))
	require.True(t, raised.Raised)
	require.Equal(t, "edgetest", raised.Level.RaisedBy)
	require.Eventually(t, func() bool { return wn.Schema.Writes() == 2 }, 10*time.Second, 10*time.Millisecond)

	// Orders written after the raise hold schema 2: one parked at
	// InventoryReserved by the runner's gate, the others to the end.
	parkedKey := newKey(t)
	code, b = h.do("POST", apiA, "/self-check/gates", fmt.Sprintf(`{"idempotencyKey":%q,"mode":"stop"}`, parkedKey))
	require.Equal(t, http.StatusOK, code, string(b))
	parked := h.startOrder(apiA, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, parkedKey), http.StatusCreated).OrderId
	h.waitStatus(apiA, parked, contracts.OrderStatus_InventoryReserved)
	var late []string
	for range 4 {
		res := h.startOrder(apiB, startBody(commerce.DemoCartOK, commerce.DemoMethodOK, newKey(t)), http.StatusCreated)
		h.waitStatus(apiA, res.OrderId, contracts.OrderStatus_Confirmed)
		late = append(late, res.OrderId)
	}
	require.Equal(t, []int{2, 2}, schemas(parked))
	for _, id := range late {
		require.Equal(t, []int{2, 2, 2, 2}, schemas(id))
		require.Equal(t, 2, highest(id))
	}

	// An old member comes back; orders of schema 2 open only on the newer
	// build once their grains passivated.
	h.startWorkflow(ctx, "workflow-c")
	seen(2)
	for _, id := range append([]string{parked}, late...) {
		require.Eventually(t, func() bool { return owner(id).Status == location.Missing }, 10*time.Second, 10*time.Millisecond, "%s passivates", id)
	}
	for _, id := range late {
		// A busy machine may answer an activation late (503 OVERLOADED):
		// a client retries that, and so does this one.
		require.Eventually(t, func() bool {
			code, b := h.do("POST", apiA, "/orders/"+id+"/continue", "{}")
			require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, code, string(b))
			if code != http.StatusOK {
				require.Contains(t, string(b), `"reason":"`+edge.ReasonOverloaded+`"`)
			}
			return code == http.StatusOK
		}, 20*time.Second, 50*time.Millisecond)
		require.Equal(t, wn.Member.ID(), owner(id).Owner, "%s opens on the build that reads it", id)
	}

	// Rollback after the raise: the newer build leaves. The parked order
	// holds schema 2 and nobody owns it.
	require.Eventually(t, func() bool { return owner(parked).Status == location.Missing }, 10*time.Second, 10*time.Millisecond)
	wn.Member.Crash()
	seen(1)
	for _, a := range []*apiNode{apiA, apiB} {
		code, b := h.do("POST", a, "/orders/"+parked+"/continue", "{}")
		require.Equal(t, http.StatusServiceUnavailable, code, string(b))
		requireCode(t, b, edge.CodeUnavailable)
		require.Contains(t, string(b), `"reason":"`+edge.ReasonVersionUnsupported+`"`)
	}
	st, ok := h.getState(apiB, parked)
	require.True(t, ok, "reads answer from the read model meanwhile")
	require.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus())
	code, b = h.do("GET", apiA, "/admin/orders/stuck?olderThan=0s", "")
	require.Equal(t, http.StatusOK, code, string(b))
	var stuck edge.StuckReport
	require.NoError(t, json.Unmarshal(b, &stuck))
	found := false
	for _, e := range stuck.Orders {
		if e.OrderID == parked {
			found = true
			require.Equal(t, edge.ReasonVersionUnsupported, e.Reason)
			require.Equal(t, 2, e.Schema)
		} else {
			require.Empty(t, e.Reason, "%s", e.OrderID)
		}
	}
	require.True(t, found, "the stuck report names the order no live member reads: %s", b)

	// A member of the newer build joins and continues it; its
	// reservation is not repeated.
	again := newer("workflow-new-2")
	seen(2)
	resumed, late2 := 0, false
	require.Eventually(t, func() bool {
		// A continue that a busy machine answered OVERLOADED is logged and
		// left; the next pass takes it again. Should the activation have
		// landed after all, the order is owned now, and a client's
		// continue moves it.
		n, err := again.ResumeReadable(ctx)
		require.NoError(t, err)
		if resumed += n; resumed > 0 {
			return true
		}
		if owner(parked).Status == location.Ready {
			late2 = true
			code, _ := h.do("POST", apiA, "/orders/"+parked+"/continue", "{}")
			return code == http.StatusOK
		}
		return false
	}, 20*time.Second, 100*time.Millisecond)
	require.LessOrEqual(t, resumed, 1)
	t.Logf("the waiting order continued by the joining member: %v (by a late activation and a client's continue: %v)", resumed == 1, late2)
	h.waitStatus(apiA, parked, contracts.OrderStatus_Confirmed)
	ev := h.evidenceOf(apiA, parked)
	require.EqualValues(t, 1, ev.ReserveCalls)
	require.EqualValues(t, 1, ev.AuthorizeCalls)
	require.Equal(t, []int{2, 2, 2, 2}, schemas(parked))
}
