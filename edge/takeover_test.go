package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/takeover"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// fakeTakeover records the requests it gets and answers from its fields.
type fakeTakeover struct {
	mu      sync.Mutex
	reqs    []takeover.Request
	err     error
	results []takeover.Result
	errs    map[string]error
}

func (f *fakeTakeover) Order(_ context.Context, req takeover.Request) (takeover.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return takeover.Result{}, f.err
	}
	out := takeover.TakenOver
	if req.DryRun {
		out = takeover.WouldTakeOver
	}
	return takeover.Result{OrderID: req.OrderID, OperationID: "op-" + req.OrderID, Member: "m1", Node: "workflow-a",
		OldGeneration: 3, NewGeneration: 4, Outcome: out, OwnerLive: req.Force}, nil
}

func (f *fakeTakeover) Member(_ context.Context, req takeover.Request) ([]takeover.Result, map[string]error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	return f.results, f.errs, f.err
}

func (f *fakeTakeover) last() takeover.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

func takeoverEnv(t *testing.T) (*env, *fakeTakeover) {
	tk := &fakeTakeover{}
	e := newEnv(t, withAdmin(), func(c *Config) { c.Takeover = tk })
	return e, tk
}

func decodeTakeover(t *testing.T, body []byte) TakeoverReply {
	t.Helper()
	var rep TakeoverReply
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep), "body %s", body)
	return rep
}

func TestTakeoverOrderRoute(t *testing.T) {
	e, tk := takeoverEnv(t)
	w := e.admin("POST", "/admin/orders/ord-1/takeover", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	rep := decodeTakeover(t, w.Body.Bytes())
	require.Equal(t, TakeoverReply{Orders: []TakenOverOrder{{OrderID: "ord-1", OperationID: "op-ord-1", Member: "m1", Node: "workflow-a",
		OldGeneration: 3, NewGeneration: 4, Outcome: "taken-over"}}}, rep)
	req := tk.last()
	require.Equal(t, "ord-1", req.OrderID)
	require.False(t, req.Force || req.DryRun)
	require.Contains(t, req.Caller, "admin-http api-t", "the caller is recorded")

	w = e.admin("POST", "/admin/orders/ord-1/takeover?dryRun=true&force=true&operationId=op-9&caller=alice", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	rep = decodeTakeover(t, w.Body.Bytes())
	require.True(t, rep.DryRun)
	require.True(t, rep.Force)
	require.Equal(t, "would-take-over", rep.Orders[0].Outcome)
	require.True(t, rep.Orders[0].OwnerLive)
	require.Equal(t, takeover.Request{OrderID: "ord-1", OperationID: "op-9", Caller: "alice", Force: true, DryRun: true}, tk.last())

	// The stuck-order resume sends "{}"; a body may say the same as the query.
	w = e.admin("POST", "/admin/orders/ord-1/takeover", "{}")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	w = e.admin("POST", "/admin/orders/ord-1/takeover", `{"operationId":"op-b","force":true}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "op-b", tk.last().OperationID)
	require.True(t, tk.last().Force)

	for _, c := range []struct{ path, body, field string }{
		{"/admin/orders/ord-1/takeover?force=maybe", "", "force"},
		{"/admin/orders/ord-1/takeover?operationId=a", `{"operationId":"b"}`, "operationId"},
		{"/admin/orders/ord-1/takeover?operationId=a%7Bb", "", "operationId"},
		{"/admin/orders/ord-1/takeover", `{"evict":true}`, "evict"},
		{"/admin/orders/ord-1/takeover", `{"force":true} x`, "body"},
	} {
		w = e.admin("POST", c.path, c.body)
		require.Equal(t, http.StatusBadRequest, w.Code, "%s %s", c.path, c.body)
		if c.field != "evict" {
			require.Equal(t, c.field, decodeError(t, w).Field, "%s %s", c.path, c.body)
		}
	}
}

func TestTakeoverErrorsGoThroughHTTPError(t *testing.T) {
	e, tk := takeoverEnv(t)
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", takeover.ErrOwnerLive), http.StatusConflict, CodeFailedPrecondition},
		{fmt.Errorf("x: %w", takeover.ErrNoOwner), http.StatusConflict, CodeFailedPrecondition},
		{fmt.Errorf("x: %w", takeover.ErrConflict), http.StatusConflict, CodeFailedPrecondition},
		{fmt.Errorf("x: %w", takeover.ErrNotFound), http.StatusNotFound, CodeNotFound},
		{fmt.Errorf("x: %w", takeover.ErrUnknownMember), http.StatusNotFound, CodeNotFound},
		{fmt.Errorf("x: %w", takeover.ErrInvalidArgument), http.StatusBadRequest, CodeInvalidArgument},
		{fmt.Errorf("raise the fence: %w: refused", eventstore.ErrUnavailable), http.StatusServiceUnavailable, CodeUnavailable},
		{fmt.Errorf("reset: %w", location.ErrStoreUnavailable), http.StatusServiceUnavailable, CodeUnavailable},
	} {
		tk.err = c.err
		w := e.admin("POST", "/admin/orders/ord-1/takeover", "")
		require.Equal(t, c.status, w.Code, "%v: %s", c.err, w.Body.String())
		require.Equal(t, c.code, decodeError(t, w).Code)
		w = e.admin("POST", "/admin/members/workflow-a/takeover", "")
		require.Equal(t, c.status, w.Code, "%v: %s", c.err, w.Body.String())
	}
}

func TestTakeoverMemberRoute(t *testing.T) {
	e, tk := takeoverEnv(t)
	tk.results = []takeover.Result{
		{OrderID: "o1", OperationID: "op.o1", Member: "m1", Node: "workflow-a", OldGeneration: 1, NewGeneration: 2, Outcome: takeover.TakenOver},
		{OrderID: "o2", OperationID: "op.o2", Member: "m0", Node: "workflow-a", OldGeneration: 5, NewGeneration: 6, Outcome: takeover.TakenOver},
	}
	tk.errs = map[string]error{"o3": fmt.Errorf("%w: down", location.ErrStoreUnavailable)}
	w := e.admin("POST", "/admin/members/workflow-a/takeover?scan=true&operationId=op", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	rep := decodeTakeover(t, w.Body.Bytes())
	require.Equal(t, "workflow-a", rep.Member)
	require.Len(t, rep.Orders, 2)
	require.Equal(t, TakenOverOrder{OrderID: "o2", OperationID: "op.o2", Member: "m0", Node: "workflow-a",
		OldGeneration: 5, NewGeneration: 6, Outcome: "taken-over"}, rep.Orders[1])
	require.Len(t, rep.Failed, 1)
	require.Equal(t, "o3", rep.Failed[0].OrderID)
	require.Equal(t, CodeUnavailable, rep.Failed[0].Error.Code)
	require.NotContains(t, w.Body.String(), "down", "a failure's detail stays in the log")
	req := tk.last()
	require.Equal(t, "workflow-a", req.Member)
	require.True(t, req.Scan)
	require.Equal(t, "op", req.OperationID)

	tk.results, tk.errs = nil, nil
	w = e.admin("POST", "/admin/members/workflow-z/takeover", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, `{"dryRun":false,"force":false,"member":"workflow-z","orders":[]}`, strings.TrimSpace(w.Body.String()))
}

// Without a Takeover, or without Admin, or on the public handler, the
// routes do not exist.
func TestTakeoverRoutesExistOnlyOnTheAdminHandler(t *testing.T) {
	e, tk := takeoverEnv(t)
	for _, p := range []string{"/admin/orders/ord-1/takeover", "/admin/members/workflow-a/takeover"} {
		require.Equal(t, http.StatusNotFound, e.do("POST", p, "").Code, "public handler: %s", p)
		require.Equal(t, http.StatusUnauthorized, serve(e.srv.AdminHandler(), "POST", p, "").Code, "no token: %s", p)
	}
	require.Empty(t, tk.reqs)
	plain := newEnv(t, withAdmin())
	require.Equal(t, http.StatusNotFound, plain.admin("POST", "/admin/orders/ord-1/takeover", "").Code)
	off := newEnv(t, func(c *Config) { c.Takeover = tk; c.AdminToken = testAdminToken })
	require.Equal(t, http.StatusNotFound, off.admin("POST", "/admin/orders/ord-1/takeover", "").Code)
}

type recordingPolicy struct {
	mu  sync.Mutex
	ids []string
}

func (p *recordingPolicy) OwnerGone(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, id)
}

// The policy hears of every command that found the owner gone; the
// command still ends Unavailable (OWNER_GONE).
func TestOrdersWithTakeoverPolicy(t *testing.T) {
	p := &recordingPolicy{}
	e := newEnv(t, func(c *Config) { c.Orders = OrdersWithTakeoverPolicy(c.Orders, p) })
	e.rm.put(created("ord-g"))
	e.orders.err = fmt.Errorf("%w: owner left", placement.ErrUnavailable)
	w := e.do("POST", "/orders/ord-g/continue", "{}")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, ReasonOwnerGone, decodeError(t, w).Reason, "the command that found the owner gone still fails")
	w = e.do("POST", "/orders/ord-g/rebuild-projection", "{}")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	e.orders.err = fmt.Errorf("%w: down", location.ErrStoreUnavailable)
	w = e.do("POST", "/orders/ord-x/continue", "{}")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	e.orders.err = nil
	res, _, err := e.srv.cfg.Orders.StartOrderWorkflow(context.Background(), &contracts.StartOrderWorkflowReq{OrderId: "ord-s"})
	require.NoError(t, err)
	require.NotNil(t, res)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Equal(t, []string{"ord-g", "ord-g"}, p.ids, "only owner-gone failures reach the policy")
}
