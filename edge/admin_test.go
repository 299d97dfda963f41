package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

func TestAdminSurfaceNeedsTheBearerToken(t *testing.T) {
	e := newEnv(t, withAdmin())
	h := e.srv.AdminHandler()
	require.NotNil(t, h)
	for _, c := range []struct{ name, auth string }{
		{"no header", ""},
		{"wrong token", "Bearer not-the-token"},
		{"token prefix", "Bearer " + testAdminToken[:5]},
		{"token with a suffix", "Bearer " + testAdminToken + "x"},
		{"other scheme", "Basic " + testAdminToken},
		{"bare token", testAdminToken},
	} {
		for _, p := range []string{"/admin/orders/ord-1/close", "/debug/pprof/cmdline", "/admin/no/such/route"} {
			w := serveAs(h, "POST", p, "", c.auth)
			require.Equal(t, http.StatusUnauthorized, w.Code, "%s %s", c.name, p)
			require.Equal(t, CodeUnauthenticated, decodeError(t, w).Code)
			require.Contains(t, w.Header().Get("WWW-Authenticate"), "Bearer")
		}
	}
	require.Zero(t, e.orders.calls(), "nothing reached an order")
	require.NotContains(t, e.logs.String(), "not-the-token", "what a caller sent is never logged")

	w := e.admin("POST", "/admin/orders/ord-1/close", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	w = e.admin("GET", "/debug/pprof/cmdline", "")
	require.Equal(t, http.StatusOK, w.Code)
	w = e.admin("GET", "/debug/pprof/", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), "goroutine")
	w = e.admin("GET", "/admin/no/such/route", "")
	require.Equal(t, http.StatusNotFound, w.Code, "with the token, unknown routes are 404")
}

// Without a valid token the admin listener answers every request the
// same 401, whether its route exists, exists for another method or does
// not exist; only with the token are they 2xx, 405 with Allow, and 404.
func TestAdminAnswers401BeforeRevealingRoutes(t *testing.T) {
	e, _ := stuckEnv(t, func(c *Config) { c.Mounts = append(c.Mounts, hookRoutes{}) })
	h := e.srv.AdminHandler()
	type req struct{ method, path string }
	wrongMethod := []struct {
		req
		allow []string
	}{
		{req{"GET", "/admin/orders/ord-1/close"}, []string{"POST"}},
		{req{"BREW", "/admin/orders/ord-1/relocate"}, []string{"POST"}},
		{req{"POST", "/admin/orders/stuck"}, []string{"GET"}},
		{req{"GET", "/admin/orders/stuck/resume"}, []string{"POST"}},
		{req{"PUT", "/self-check/gates"}, []string{"POST"}},
		{req{"DELETE", "/debug/pprof/heap"}, []string{"GET", "POST"}},
	}
	unknown := []req{{"GET", "/admin/no/such/route"}, {"POST", "/admin/orders/ord-1"}, {"BREW", "/nope"}, {"GET", "/orders/ord-1"}}
	known := []req{{"POST", "/admin/orders/ord-1/close"}, {"GET", "/admin/orders/stuck"}, {"GET", "/debug/pprof/cmdline"}}

	all := append([]req{}, known...)
	for _, wm := range wrongMethod {
		all = append(all, wm.req)
	}
	all = append(all, unknown...)
	headerNames := func(w *httptest.ResponseRecorder) []string {
		var out []string
		for k := range w.Header() {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	for _, auth := range []string{"", "Bearer not-the-token"} {
		first := serveAs(h, "GET", "/nope", "", auth)
		for _, r := range all {
			w := serveAs(h, r.method, r.path, "", auth)
			require.Equal(t, http.StatusUnauthorized, w.Code, "%s %s (auth %q): %s", r.method, r.path, auth, w.Body.String())
			require.Equal(t, CodeUnauthenticated, decodeError(t, w).Code)
			require.Empty(t, w.Header().Values("Allow"), "%s %s: a 401 names no method", r.method, r.path)
			require.Contains(t, w.Header().Get("WWW-Authenticate"), "Bearer")
			require.Equal(t, first.Body.String(), w.Body.String(), "%s %s: the same body for every route", r.method, r.path)
			require.Equal(t, headerNames(first), headerNames(w), "%s %s: the same header fields for every route", r.method, r.path)
		}
	}
	require.Zero(t, e.orders.calls())

	for _, wm := range wrongMethod {
		w := e.admin(wm.method, wm.path, "")
		require.Equal(t, http.StatusMethodNotAllowed, w.Code, "%s %s: %s", wm.method, wm.path, w.Body.String())
		require.Equal(t, wm.allow, allowed(t, w), "%s %s", wm.method, wm.path)
		require.Equal(t, CodeMethodNotAllowed, decodeError(t, w).Code)
	}
	for _, r := range unknown {
		w := e.admin(r.method, r.path, "")
		require.Equal(t, http.StatusNotFound, w.Code, "%s %s: %s", r.method, r.path, w.Body.String())
		require.Empty(t, w.Header().Values("Allow"))
		require.Equal(t, CodeNotFound, decodeError(t, w).Code)
	}
	require.Zero(t, e.orders.calls(), "a wrong method reaches no handler")
	for _, r := range known {
		w := e.admin(r.method, r.path, "")
		require.Equal(t, http.StatusOK, w.Code, "%s %s: %s", r.method, r.path, w.Body.String())
	}
}

// The public handler never has an admin, self-check or pprof route, even
// with every one of them enabled.
func TestAdminRoutesAreNeverOnThePublicHandler(t *testing.T) {
	e, _ := stuckEnv(t, func(c *Config) {
		c.Mounts = append(c.Mounts, hookRoutes{})
	})
	adminRoutes := e.srv.admin.Routes()
	require.NotEmpty(t, adminRoutes)
	seen := map[string]bool{}
	for _, rt := range adminRoutes {
		seen[rt.Path] = true
		path := strings.ReplaceAll(strings.ReplaceAll(rt.Path, ":orderId", "ord-1"), "*name", "cmdline")
		w := e.do(rt.Method, path, "{}")
		require.Equal(t, http.StatusNotFound, w.Code, "%s %s on the public handler", rt.Method, path)
		require.Equal(t, CodeNotFound, decodeError(t, w).Code)
	}
	for _, want := range []string{"/admin/orders/:orderId/close", "/admin/orders/stuck", "/self-check/gates", "/debug/pprof/*name"} {
		require.True(t, seen[want], "%s is on the admin handler", want)
	}
	for _, rt := range e.srv.engine.Routes() {
		for _, prefix := range []string{"/admin", "/self-check", "/debug"} {
			require.False(t, strings.HasPrefix(rt.Path, prefix), "public route %s", rt.Path)
		}
	}
	require.Zero(t, e.orders.calls())
}

// hookRoutes mounts routes shaped like the runner's hooks, for route
// tests that never call one.
type hookRoutes struct{}

func (hookRoutes) Mount(r AdminRouter) {
	nop := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	r.Handle("POST", "/self-check/gates", nop)
	r.Handle("GET", "/self-check/orders/{orderId}/evidence", nop)
}

func TestAdminListenerNeedsAToken(t *testing.T) {
	e := newEnv(t)
	require.Nil(t, e.srv.AdminHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.ErrorIs(t, e.srv.ServeAdmin(ln), ErrNoAdmin)
}

// Both listeners serve their own handler; Shutdown ends both.
func TestServeAndServeAdminOnTwoListeners(t *testing.T) {
	e := newEnv(t, withAdmin())
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 2)
	go func() { done <- e.srv.Serve(pub) }()
	go func() { done <- e.srv.ServeAdmin(adm) }()
	call := func(base, path, auth string) int {
		req, err := http.NewRequest("POST", "http://"+base+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	bearer := "Bearer " + testAdminToken
	require.Equal(t, http.StatusNotFound, call(pub.Addr().String(), "/admin/orders/ord-1/close", bearer), "not on the public port")
	require.Equal(t, http.StatusUnauthorized, call(adm.Addr().String(), "/admin/orders/ord-1/close", ""))
	require.Equal(t, http.StatusOK, call(adm.Addr().String(), "/admin/orders/ord-1/close", bearer))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, e.srv.Shutdown(ctx))
	require.ErrorIs(t, <-done, http.ErrServerClosed)
	require.ErrorIs(t, <-done, http.ErrServerClosed)
}

type fakeIndex struct {
	mu       sync.Mutex
	orders   []readmodel.StuckOrder
	gotAge   time.Duration
	gotNow   time.Time
	rebuilds int
}

func (f *fakeIndex) Stuck(_ context.Context, olderThan time.Duration, now time.Time, limit int) ([]readmodel.StuckOrder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotAge, f.gotNow = olderThan, now
	out := f.orders
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (f *fakeIndex) RebuildActiveIndex(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rebuilds++
	return len(f.orders), nil
}

type fakeAuthority struct {
	recs  map[string]location.Record
	names map[string]string
}

func (f *fakeAuthority) Get(_ context.Context, _, id string) (location.Record, error) {
	return f.recs[id], nil
}

func (f *fakeAuthority) MemberNames(context.Context) (map[string]string, error) { return f.names, nil }

type fakeMembers struct{ live, gone map[string]bool }

func (f fakeMembers) Live(id string) bool   { return f.live[id] }
func (f fakeMembers) IsGone(id string) bool { return f.gone[id] }

// stuckEnv has four stuck orders: one owned by a live member, one by a
// member no longer in the topology, one by a member still in this API's
// topology but recorded gone, and one owned by nobody.
func stuckEnv(t *testing.T, opts ...envOpt) (*env, *fakeIndex) {
	now := time.UnixMilli(1_700_000_600_000)
	st := func(id string, s contracts.OrderStatus) readmodel.StuckOrder {
		return readmodel.StuckOrder{OrderID: id, Version: 2, State: &contracts.OrderState{OrderId: id, Status: s, UpdatedAtUnixMs: now.Add(-5 * time.Minute).UnixMilli()}}
	}
	idx := &fakeIndex{orders: []readmodel.StuckOrder{
		st("ord-live", contracts.OrderStatus_InventoryReserved), st("ord-left", contracts.OrderStatus_Created),
		st("ord-recorded", contracts.OrderStatus_PaymentAuthorized), st("ord-none", contracts.OrderStatus_InventoryReserved),
	}}
	auth := &fakeAuthority{
		recs: map[string]location.Record{
			"ord-live":     {Status: location.Ready, Owner: "m-a", Generation: 1},
			"ord-left":     {Status: location.Ready, Owner: "m-b", Generation: 3},
			"ord-recorded": {Status: location.Ready, Owner: "m-c", Generation: 2},
			"ord-none":     {Generation: 1},
		},
		names: map[string]string{"m-a": "workflow-a", "m-b": "workflow-b", "m-c": "workflow-c"},
	}
	members := fakeMembers{live: map[string]bool{"m-a": true, "m-c": true}, gone: map[string]bool{"m-c": true}}
	e := newEnv(t, append([]envOpt{withAdmin(), func(c *Config) {
		c.Stuck = &Stuck{Index: idx, Authority: auth, Members: members, Now: func() time.Time { return now }}
	}}, opts...)...)
	return e, idx
}

func decodeReport(t *testing.T, body []byte) StuckReport {
	t.Helper()
	var r StuckReport
	require.NoError(t, json.Unmarshal(body, &r), string(body))
	return r
}

func byOrder(r StuckReport) map[string]StuckEntry {
	out := map[string]StuckEntry{}
	for _, e := range r.Orders {
		out[e.OrderID] = e
	}
	return out
}

func TestStuckReportClassifiesOwnersAndActions(t *testing.T) {
	e, idx := stuckEnv(t)
	w := e.admin("GET", "/admin/orders/stuck?olderThan=90s", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	rep := decodeReport(t, w.Body.Bytes())
	require.Equal(t, 90*time.Second, idx.gotAge)
	require.Equal(t, "1m30s", rep.OlderThan)
	require.False(t, rep.TakeoverAvailable)
	got := byOrder(rep)
	require.Len(t, got, 4)
	require.Equal(t, StuckOwner{State: OwnerLive, Member: "m-a", Node: "workflow-a"}, got["ord-live"].Owner)
	require.Equal(t, ActionContinue, got["ord-live"].Action)
	require.Equal(t, "InventoryReserved", got["ord-live"].Status)
	require.Equal(t, "Ready", got["ord-live"].Authority)
	require.Equal(t, StuckOwner{State: OwnerGone, Member: "m-b", Node: "workflow-b"}, got["ord-left"].Owner)
	require.Equal(t, ActionTakeover, got["ord-left"].Action)
	require.Equal(t, OwnerGone, got["ord-recorded"].Owner.State, "recorded gone counts even while still in the topology")
	require.Equal(t, ActionTakeover, got["ord-recorded"].Action)
	require.Equal(t, StuckOwner{State: OwnerNone}, got["ord-none"].Owner)
	require.Equal(t, "Missing", got["ord-none"].Authority)
	require.Equal(t, ActionContinue, got["ord-none"].Action)

	w = e.admin("GET", "/admin/orders/stuck", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, time.Minute, idx.gotAge, "default age")
	for _, bad := range []string{"olderThan=soon", "olderThan=-1m", "limit=0", "limit=x"} {
		w = e.admin("GET", "/admin/orders/stuck?"+bad, "")
		require.Equal(t, http.StatusBadRequest, w.Code, bad)
	}
	require.Zero(t, e.orders.calls(), "the report moves nothing")
	require.Equal(t, http.StatusNotFound, e.do("GET", "/admin/orders/stuck", "").Code, "not on the public handler")
}

func TestResumeContinuesLiveOwnersAndSkipsGoneOnesWithoutTakeover(t *testing.T) {
	e, _ := stuckEnv(t)
	w := e.admin("POST", "/admin/orders/stuck/resume?olderThan=1m", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	got := byOrder(decodeReport(t, w.Body.Bytes()))
	require.Equal(t, []string{ActionContinue}, got["ord-live"].Resume.Done)
	require.Equal(t, []string{ActionContinue}, got["ord-none"].Resume.Done)
	require.Equal(t, "owner gone; takeover not requested", got["ord-left"].Resume.Skipped)
	require.Empty(t, got["ord-left"].Resume.Done)
	continued := map[string]bool{}
	for _, c := range e.orders.continues {
		continued[c.OrderId] = true
		require.NotEmpty(t, c.SourceCommandId)
	}
	require.Equal(t, map[string]bool{"ord-live": true, "ord-none": true}, continued)

	w = e.admin("POST", "/admin/orders/stuck/resume?olderThan=1m&takeover=true", "")
	require.Equal(t, http.StatusOK, w.Code)
	got = byOrder(decodeReport(t, w.Body.Bytes()))
	require.Equal(t, "takeover unavailable", got["ord-left"].Resume.Skipped, "no takeover operation in this build")
	require.Equal(t, "takeover unavailable", got["ord-recorded"].Resume.Skipped)
}

// With a takeover operation on the admin router, resume with takeover
// calls it for each gone owner's order, then continues the order.
func TestResumeTakesOverThroughTheAdminRouteThenContinues(t *testing.T) {
	e, _ := stuckEnv(t)
	var mu sync.Mutex
	var takenOver []string
	e.srv.admin.POST(takeoverRoute, func(c *gin.Context) {
		require.Equal(t, "Bearer "+testAdminToken, c.GetHeader("Authorization"))
		mu.Lock()
		takenOver = append(takenOver, c.Param("orderId"))
		mu.Unlock()
		if c.Param("orderId") == "ord-recorded" {
			e.srv.fail(c.Writer, c.Request, fmt.Errorf("%w: refused in this test", ErrFailedPrecondition))
			return
		}
		c.JSON(http.StatusOK, gin.H{"orderId": c.Param("orderId")})
	})
	w := e.admin("POST", "/admin/orders/stuck/resume?takeover=true", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	rep := decodeReport(t, w.Body.Bytes())
	require.True(t, rep.TakeoverAvailable)
	got := byOrder(rep)
	require.Equal(t, []string{ActionTakeover, ActionContinue}, got["ord-left"].Resume.Done)
	require.Equal(t, "Created", got["ord-left"].Resume.Status)
	require.Equal(t, CodeFailedPrecondition, got["ord-recorded"].Resume.Error.Code)
	require.Empty(t, got["ord-recorded"].Resume.Done)
	require.ElementsMatch(t, []string{"ord-left", "ord-recorded"}, takenOver)
	continued := map[string]bool{}
	for _, c := range e.orders.continues {
		continued[c.OrderId] = true
	}
	require.Equal(t, map[string]bool{"ord-live": true, "ord-none": true, "ord-left": true}, continued,
		"a failed takeover is not followed by a continue")
}

// fakeVersions: the live workflow members read up to newest, at level;
// the orders hold the schemas given (1 otherwise).
type fakeVersions struct {
	newest, level int
	held          map[string]int
	reads         *atomic.Int64
}

func (v fakeVersions) Readable(context.Context) (int, int, error) { return v.newest, v.level, nil }

func (v fakeVersions) HighestSchema(_ context.Context, id string) (int, error) {
	v.reads.Add(1)
	if n, ok := v.held[id]; ok {
		return n, nil
	}
	return 1, nil
}

// After a rollback below the level, an order without a live owner that
// holds a schema no live workflow member reads is reported with the
// reason VERSION_UNSUPPORTED and its schema, and a resume does not
// continue it (it would answer the same); a live owner reads its order,
// and in a cluster that reads the level no order's schema is read.
func TestStuckReportNamesOrdersNoLiveMemberReads(t *testing.T) {
	var reads atomic.Int64
	v := fakeVersions{newest: 1, level: 2, held: map[string]int{"ord-none": 2, "ord-live": 2, "ord-left": 1}, reads: &reads}
	e, _ := stuckEnv(t, func(c *Config) { c.Stuck.Versions = v })
	w := e.admin("GET", "/admin/orders/stuck?olderThan=1m", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	got := byOrder(decodeReport(t, w.Body.Bytes()))
	require.Equal(t, ReasonVersionUnsupported, got["ord-none"].Reason)
	require.Equal(t, 2, got["ord-none"].Schema)
	require.Empty(t, got["ord-live"].Reason, "its live owner reads it")
	require.Empty(t, got["ord-left"].Reason, "schema 1 is read")

	w = e.admin("POST", "/admin/orders/stuck/resume?olderThan=1m", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	got = byOrder(decodeReport(t, w.Body.Bytes()))
	require.Equal(t, "no live workflow member reads its event schema 2", got["ord-none"].Resume.Skipped)
	for _, c := range e.orders.continues {
		require.NotEqual(t, "ord-none", c.OrderId, "not continued")
	}

	reads.Store(0)
	v.newest = 2
	e, _ = stuckEnv(t, func(c *Config) { c.Stuck.Versions = v })
	w = e.admin("GET", "/admin/orders/stuck?olderThan=1m", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Empty(t, byOrder(decodeReport(t, w.Body.Bytes()))["ord-none"].Reason)
	require.Zero(t, reads.Load(), "the members read the level: no order's schema is read")
}

func TestRebuildActiveIndexRoute(t *testing.T) {
	e, idx := stuckEnv(t)
	w := e.admin("POST", "/admin/read-model/active-index/rebuild", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"indexed":4}`, w.Body.String())
	require.Equal(t, 1, idx.rebuilds)
}
