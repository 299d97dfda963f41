package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

func TestNewRejectsIncompleteConfig(t *testing.T) {
	_, err := New(Config{})
	require.ErrorIs(t, err, ErrConfig)
	e := newEnv(t)
	cfg := e.srv.cfg
	cfg.Operator = nil
	cfg.Admin, cfg.AdminToken = true, "t"
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrConfig, "admin needs an Operator")
	cfg.Operator, cfg.AdminToken = e.orders, ""
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrConfig, "admin needs a token")
	cfg.Admin = false
	cfg.Mounts = []Mount{hookRoutes{}}
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrConfig, "a mount needs a token")
	cfg.AdminToken = "t"
	cfg.Mounts = []Mount{nil}
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrConfig, "a mount must be something")
	cfg.Operator = nil
	cfg.Mounts = []Mount{hookRoutes{}}
	_, err = New(cfg)
	require.NoError(t, err, "a mount alone needs no Operator")
}

func TestHealthzAndReadyz(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, http.StatusOK, e.do("GET", "/healthz", "").Code)
	e.topo.n.Store(2)
	w := e.do("GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code, "not ready before the listener is up")
	require.Equal(t, CodeUnavailable, decodeError(t, w).Code)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, e.srv.Shutdown(ctx))
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	url := "http://" + ln.Addr().String()
	get := func(p string) int {
		res, err := http.Get(url + p)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/readyz"))
	e.topo.n.Store(0)
	require.Equal(t, http.StatusServiceUnavailable, get("/readyz"), "no workflow member: not ready")
	e.topo.n.Store(1)
	require.Equal(t, http.StatusOK, get("/readyz"))

	line := "shoppingmall-ready kind=http node=api-t"
	require.Equal(t, 1, e.evidence.Count(line))
	require.Error(t, e.srv.Serve(ln), "a second Serve is refused")
	require.Equal(t, 1, e.evidence.Count(line), "the ready line is printed once")
}

// allowed is a reply's Allow header as a sorted list of methods.
func allowed(t *testing.T, w *httptest.ResponseRecorder) []string {
	t.Helper()
	vs := w.Header().Values("Allow")
	require.LessOrEqual(t, len(vs), 1, "one Allow field: %q", vs)
	var out []string
	for _, v := range vs {
		for m := range strings.SplitSeq(v, ",") {
			out = append(out, strings.TrimSpace(m))
		}
	}
	slices.Sort(out)
	return out
}

// A path of the public API asked with another method is 405 in the edge's
// error shape, with an Allow header listing the path's methods; an
// unknown path stays 404 without one.
func TestPublicWrongMethodIs405WithAllow(t *testing.T) {
	e := newEnv(t)
	e.rm.put(created("ord-1"))
	for _, tc := range []struct {
		method, path string
		allow        []string
	}{
		{"GET", "/orders", []string{"POST"}},
		{"PUT", "/orders", []string{"POST"}},
		{"BREW", "/orders", []string{"POST"}},
		{"DELETE", "/orders/ord-1", []string{"GET"}},
		{"POST", "/orders/ord-1", []string{"GET"}},
		{"PATCH", waitPath("ord-1", "10"), []string{"GET"}},
		{"GET", "/orders/ord-1/continue", []string{"POST"}},
		{"PUT", "/orders/ord-1/rebuild-projection", []string{"POST"}},
		{"POST", "/healthz", []string{"GET"}},
		{"HEAD", "/readyz", []string{"GET"}},
	} {
		w := e.do(tc.method, tc.path, startBody(cartOK, "a", "p", "k"))
		require.Equal(t, http.StatusMethodNotAllowed, w.Code, "%s %s: %s", tc.method, tc.path, w.Body.String())
		require.Equal(t, tc.allow, allowed(t, w), "%s %s", tc.method, tc.path)
		ae := decodeError(t, w)
		require.Equal(t, CodeMethodNotAllowed, ae.Code)
		require.Contains(t, ae.Message, "Allow")
		require.Empty(t, ae.Field)
		require.NotEmpty(t, w.Header().Get(HeaderRequestID))
	}
	for _, tc := range []struct{ method, path string }{
		{"GET", "/nope"},
		{"BREW", "/coffee"},
		{"POST", "/orders/"},
		{"GET", "/orders/ord-1/"},
		{"POST", "/orders/ord-1/nope"},
		{"GET", "/admin/orders/stuck"},
	} {
		w := e.do(tc.method, tc.path, "")
		require.Equal(t, http.StatusNotFound, w.Code, "%s %s: %s", tc.method, tc.path, w.Body.String())
		require.Empty(t, w.Header().Values("Allow"), "%s %s", tc.method, tc.path)
		require.Equal(t, CodeNotFound, decodeError(t, w).Code)
	}
	require.Zero(t, e.orders.calls(), "a wrong method reaches no handler")
	require.Zero(t, e.idem.calls)
}

func TestSelfCheckAndAdminAre404WhenDisabled(t *testing.T) {
	e := newEnv(t)
	routes := []struct{ method, path string }{
		{"POST", "/self-check/pending-mapping"},
		{"POST", "/self-check/gates"},
		{"POST", "/self-check/gates/release"},
		{"POST", "/self-check/skip-terminal-projection"},
		{"DELETE", "/self-check/orders/ord-1/projection"},
		{"GET", "/self-check/orders/ord-1/evidence"},
		{"POST", "/self-check/orders/ord-1/repeat-effects"},
		{"POST", "/admin/orders/ord-1/relocate"},
		{"POST", "/admin/orders/ord-1/close"},
	}
	for _, r := range routes {
		w := e.do(r.method, r.path, `{"idempotencyKey":"k","mode":"stop"}`)
		require.Equal(t, http.StatusNotFound, w.Code, r.path)
		require.Equal(t, CodeNotFound, decodeError(t, w).Code)
	}
	require.Zero(t, e.orders.calls())
	require.Zero(t, e.evidence.Count("shoppingmall-evidence order=ord-1 events=0"))
}

func TestAdminRoutes(t *testing.T) {
	e := newEnv(t, withAdmin())
	w := e.admin("POST", "/admin/orders/ord-1/relocate", `{"targetNode":"workflow-b"}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	res := decodeMessage[contracts.RelocateOrderRes](t, w)
	require.Equal(t, "ord-1", res.OrderId)
	require.Equal(t, "workflow-b", e.orders.relocates[0].TargetNode)
	require.Equal(t, "ord-1", e.orders.relocates[0].OrderId)

	require.Equal(t, http.StatusOK, e.admin("POST", "/admin/orders/ord-1/relocate", "").Code, "an empty body relocates anywhere")
	require.Equal(t, "", e.orders.relocates[1].TargetNode)

	w = e.admin("POST", "/admin/orders/ord-1/relocate", `{"orderId":"ord-2"}`)
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Equal(t, "orderId", decodeError(t, w).Field)
	w = e.admin("POST", "/admin/orders/ord-1/relocate", `{"targetNode":"work{flow}"}`)
	require.Equal(t, "targetNode", decodeError(t, w).Field)

	w = e.admin("POST", "/admin/orders/ord-1/close", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.EqualValues(t, 1, decodeMessage[contracts.CloseOrderRes](t, w).Generation)

	for err, status := range map[error]int{
		fmt.Errorf("%w: owner left", placement.ErrUnavailable):         http.StatusServiceUnavailable,
		fmt.Errorf("%w: no other member", grain.ErrFailedPrecondition): http.StatusConflict,
	} {
		e.orders.err = err
		w = e.admin("POST", "/admin/orders/ord-1/relocate", "")
		require.Equal(t, status, w.Code)
	}
}

// fakeNames publishes member names after a number of lookups, as a member
// that joins slightly before its name is readable would.
type fakeNames struct {
	mu      sync.Mutex
	names   map[string]string
	lookups int
	hideFor int
}

func (f *fakeNames) set(id, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names[id] = name
}

func (f *fakeNames) MemberNames(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.lookups <= f.hideFor {
		return nil, errors.New("not yet")
	}
	out := map[string]string{}
	for k, v := range f.names {
		out[k] = v
	}
	return out, nil
}

func TestRouteObserverPrintsOncePerWorkflowNode(t *testing.T) {
	names := &fakeNames{names: map[string]string{"m-a": "workflow-a", "m-b": "workflow-b", "m-a2": "workflow-a", "m-api": "api-b"}, hideFor: 3}
	ev := &workflowtest.Evidence{}
	o := NewRouteObserver(RouteObserverConfig{NodeID: "api-a", Names: names, Evidence: ev})
	t.Cleanup(o.Close)
	wf := []string{grain.KindName}
	o.MemberJoined("m-api", "127.0.0.1:1", nil)
	o.MemberJoined("m-a", "127.0.0.1:2", wf)
	o.MemberJoined("m-a", "127.0.0.1:2", wf)
	o.MemberJoined("m-b", "127.0.0.1:3", append([]string{"other"}, wf...))
	require.Eventually(t, func() bool { return len(o.Targets()) == 2 }, 5*time.Second, 5*time.Millisecond, "both routes announced")
	// workflow-a restarted: a new member id under the same name. Its
	// lookup resolves "workflow-a" again; Close waits for the announce
	// that follows, so a second ready line would be counted below.
	names.mu.Lock()
	before := names.lookups
	names.mu.Unlock()
	o.MemberJoined("m-a2", "127.0.0.1:2", wf)
	require.Eventually(t, func() bool {
		names.mu.Lock()
		defer names.mu.Unlock()
		return names.lookups > before
	}, 5*time.Second, 5*time.Millisecond, "the restarted member's name looked up")
	o.Close()
	require.Equal(t, []string{"workflow-a", "workflow-b"}, o.Targets())
	require.Equal(t, 1, ev.Count("shoppingmall-ready kind=object-route node=api-a target=workflow-a"))
	require.Equal(t, 1, ev.Count("shoppingmall-ready kind=object-route node=api-a target=workflow-b"))
	require.NotContains(t, ev.String(), "api-b", "members without the workflow kind are no route")
}

// A member whose name is published late (a store outage when it started)
// is still announced: the wait goes on while the member is live, past
// ResolveTimeout. It ends, unannounced, when the member leaves.
func TestRouteObserverWaitsForALateNameWhileTheMemberIsLive(t *testing.T) {
	names := &fakeNames{names: map[string]string{}}
	ev := &workflowtest.Evidence{}
	o := NewRouteObserver(RouteObserverConfig{NodeID: "api-a", Names: names, Evidence: ev,
		ResolveTimeout: 20 * time.Millisecond, Logger: discardLogger()})
	t.Cleanup(o.Close)
	o.MemberJoined("m-x", "127.0.0.1:2", []string{grain.KindName})
	o.MemberJoined("m-y", "127.0.0.1:3", []string{grain.KindName})
	o.MemberLeft("m-y", "127.0.0.1:3")
	require.Eventually(t, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return !o.pending["m-y"]
	}, 5*time.Second, 5*time.Millisecond, "the wait for a member that left ends")
	require.Eventually(t, func() bool {
		names.mu.Lock()
		defer names.mu.Unlock()
		return names.lookups >= 6
	}, 5*time.Second, 5*time.Millisecond, "still looking past ResolveTimeout")
	names.set("m-x", "workflow-x")
	require.Eventually(t, func() bool { return ev.Count("shoppingmall-ready kind=object-route node=api-a target=workflow-x") == 1 }, 10*time.Second, 5*time.Millisecond,
		"the late name is announced")
	require.NotContains(t, ev.String(), "m-y")
}

// A workflow member that leaves is reported once per leave, by node name;
// members without the kind are not routes and leave silently.
func TestRouteObserverReportsWorkflowMemberLeaving(t *testing.T) {
	names := &fakeNames{names: map[string]string{"m-a": "workflow-a", "m-api": "api-b"}}
	ev := &workflowtest.Evidence{}
	o := NewRouteObserver(RouteObserverConfig{NodeID: "api-a", Names: names, Evidence: ev})
	t.Cleanup(o.Close)
	o.MemberJoined("m-a", "127.0.0.1:2", []string{grain.KindName})
	o.MemberJoined("m-api", "127.0.0.1:1", nil)
	require.Eventually(t, func() bool { return len(o.Targets()) == 1 }, 5*time.Second, 5*time.Millisecond, "route announced")
	o.MemberLeft("m-api", "127.0.0.1:1")
	o.MemberLeft("m-a", "127.0.0.1:2")
	o.MemberLeft("m-a", "127.0.0.1:2")
	require.Eventually(t, func() bool {
		return ev.Count("shoppingmall-topology left node=api-a target=workflow-a") == 1
	}, 5*time.Second, 5*time.Millisecond, "leave reported")
	o.Close()
	require.Equal(t, 1, ev.Count("shoppingmall-topology left node=api-a target=workflow-a"), "one leave, one line")
	require.NotContains(t, ev.String(), "target=api-b")
}
