package admintest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

const (
	cartID    = "cart-admin"
	sku       = "sku-admin"
	methodOK  = "pm-admin-ok"
	addressID = "addr-admin"
)

// cartScarce asks for more of skuScarce than there is; methodDeclined
// declines every authorization: with cartID and methodOK, the three ends
// of an order.
const (
	cartScarce     = "cart-admin-scarce"
	skuScarce      = "sku-admin-scarce"
	methodDeclined = "pm-admin-declined"
)

func seed() commerce.Seed {
	return commerce.Seed{
		Carts: []commerce.Cart{
			{CartID: cartID, Lines: []*contracts.OrderLine{{Sku: sku, Quantity: 1}}, Amount: 1990, Currency: "EUR"},
			{CartID: cartScarce, Lines: []*contracts.OrderLine{{Sku: sku, Quantity: 1}, {Sku: skuScarce, Quantity: 5}}, Amount: 2990, Currency: "EUR"},
		},
		Stock:   map[string]int64{sku: 1_000_000, skuScarce: 1},
		Methods: []commerce.PaymentMethod{{MethodID: methodOK, Approve: true}, {MethodID: methodDeclined, Reason: "card declined"}},
	}
}

// env is one started cluster and what the tests reach it with.
type env struct {
	t      *testing.T
	c      *localcluster.Cluster
	apiBin string
	token  string
	admin  map[string]string // API node → admin base URL, from the state
	public map[string]*client.API
	hc     *http.Client
}

func start(t *testing.T) *env {
	t.Helper()
	return startWith(t, func(*localcluster.Config) {})
}

// startWith is start with edit's changes to the cluster's Config.
func startWith(t *testing.T, edit func(*localcluster.Config)) *env {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := localcluster.Config{
		RunDir: runDir, APIBin: apiBin, WorkflowBin: wfBin,
		Admin: true, SelfCheck: true, Fixtures: true,
		Env:       localcluster.ChildEnv(os.Environ()),
		StopGrace: 10 * time.Second,
		Logf:      t.Logf,
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
	}
	edit(&cfg)
	if cfg.Archive {
		// PostgreSQL runs as an unprivileged user, who must reach its
		// folder under the run folder: t.TempDir and the folder above it
		// are root's alone (mode 0700).
		for _, d := range []string{runDir, filepath.Dir(runDir)} {
			require.NoError(t, os.Chmod(d, 0o711))
		}
	}
	c, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
				t.Logf("---- %s, last lines:\n%s", n, localcluster.Tail(c.LogPath(n), 25))
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
	// Both read from where an operator reads them: the state (localcluster.json)
	// and the token file it names.
	st := c.State()
	fi, err := os.Stat(st.AdminTokenFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	token, err := localcluster.ReadAdminToken(filepath.Dir(st.AdminTokenFile))
	require.NoError(t, err)
	hc := &http.Client{Timeout: 30 * time.Second}
	e := &env{t: t, c: c, apiBin: apiBin, token: token, admin: map[string]string{}, public: map[string]*client.API{}, hc: hc}
	for _, api := range localcluster.APINodes {
		n, ok := st.Node(api)
		require.True(t, ok)
		require.True(t, strings.HasPrefix(n.AdminURL, "http://127.0.0.1:"), "admin on loopback: %q", n.AdminURL)
		e.admin[api] = n.AdminURL
		e.public[api] = &client.API{BaseURL: n.URL, HTTP: hc}
	}
	return e
}

type reply struct {
	status int
	body   []byte
}

func (r reply) code() string {
	b, err := client.DecodeError(r.body)
	if err != nil {
		return ""
	}
	return b.Code
}

// call sends one request; authorization "" sends no header.
func (e *env) call(method, url, authorization, body string) reply {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(e.t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := e.hc.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return reply{res.StatusCode, b}
}

func (e *env) bearer() string { return "Bearer " + e.token }

// cli runs `commerce-api admin ...` with the token from the environment,
// as an operator would, and returns its exit code and output.
func (e *env) cli(args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command(e.apiBin, append([]string{"admin"}, args...)...)
	cmd.Env = append(localcluster.ChildEnv(os.Environ()), localcluster.AdminTokenEnv+"="+e.token)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return code, out.String()
}

// The admin, self-check and pprof routes answer only on the admin
// listener and only with the token: without one 401, with a wrong one
// 401, on the public port 404 even with the token, with it 200.
func TestAdminSurfaceIsLocked(t *testing.T) {
	e := start(t)
	for _, api := range localcluster.APINodes {
		adm, pub := e.admin[api], e.public[api].BaseURL
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/admin/orders/stuck?olderThan=1m", ""},
			{"POST", "/self-check/gates", `{"idempotencyKey":"admintest-probe","mode":"stop"}`},
			{"GET", "/debug/pprof/cmdline", ""},
		} {
			got := e.call(r.method, adm+r.path, "", r.body)
			require.Equal(t, http.StatusUnauthorized, got.status, "%s %s without a token: %s", api, r.path, got.body)
			require.Equal(t, "UNAUTHENTICATED", got.code())
			got = e.call(r.method, adm+r.path, "Bearer wrong-"+e.token, r.body)
			require.Equal(t, http.StatusUnauthorized, got.status, "%s %s with a wrong token", api, r.path)
			got = e.call(r.method, pub+r.path, e.bearer(), r.body)
			require.Equal(t, http.StatusNotFound, got.status, "%s %s on the public port", api, r.path)
			require.Equal(t, "NOT_FOUND", got.code())
			got = e.call(r.method, adm+r.path, e.bearer(), r.body)
			require.Equal(t, http.StatusOK, got.status, "%s %s with the token: %s", api, r.path, got.body)
		}
		t.Logf("%s: admin %s locked (401 without or with a wrong token, 404 on public %s, 200 with the token)", api, adm, pub)
	}
	// The CLI without a token is a usage error; with a wrong one, refused.
	cmd := exec.Command(e.apiBin, "admin", "stuck", "-api", e.admin[localcluster.APIA])
	cmd.Env = localcluster.ChildEnv(os.Environ())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, 2, ee.ExitCode(), "%s", out)
	code, text := e.cli("stuck", "-api", e.admin[localcluster.APIA], "-token", "wrong")
	require.Equal(t, 1, code, text)
	require.Contains(t, text, "UNAUTHENTICATED")
}

type stuckReport struct {
	TakeoverAvailable bool `json:"takeoverAvailable"`
	Orders            []struct {
		OrderID string `json:"orderId"`
		Status  string `json:"status"`
		Owner   struct {
			State string `json:"state"`
			Node  string `json:"node"`
		} `json:"owner"`
		Action string `json:"action"`
	} `json:"orders"`
}

func (e *env) report(olderThan string) stuckReport {
	e.t.Helper()
	return e.reportVia(localcluster.APIB, olderThan)
}

// reportVia is the stuck report as one API sees it: each API learns a
// member is gone from its own view of the membership, a moment apart.
func (e *env) reportVia(api, olderThan string) stuckReport {
	e.t.Helper()
	got := e.call("GET", e.admin[api]+"/admin/orders/stuck?olderThan="+olderThan, e.bearer(), "")
	require.Equal(e.t, http.StatusOK, got.status, "%s", got.body)
	var r stuckReport
	require.NoError(e.t, json.Unmarshal(got.body, &r), "%s", got.body)
	return r
}

// held starts an order whose background continuation the GateStop
// fixture stops at InventoryReserved, and waits until it stands there.
func (e *env) held(key string) string {
	e.t.Helper()
	got := e.call("POST", e.admin[localcluster.APIA]+"/self-check/gates", e.bearer(),
		fmt.Sprintf(`{"idempotencyKey":%q,"mode":"stop"}`, key))
	require.Equal(e.t, http.StatusOK, got.status, "%s", got.body)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, rep, err := e.public[localcluster.APIB].StartOrder(ctx, &contracts.StartOrderReq{
		CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: key})
	require.NoError(e.t, err)
	require.True(e.t, rep.OK(), "%s", rep)
	id := res.GetOrderId()
	e.waitStatus(id, contracts.OrderStatus_InventoryReserved)
	return id
}

func (e *env) waitStatus(id string, want contracts.OrderStatus) {
	e.t.Helper()
	var last string
	require.Eventually(e.t, func() bool {
		st, rep, err := e.public[localcluster.APIA].GetOrder(context.Background(), id)
		if err != nil || st == nil {
			last = fmt.Sprint(rep, err)
			return false
		}
		last = st.GetStatus().String()
		return st.GetStatus() == want
	}, 20*time.Second, 50*time.Millisecond, "order %s to reach %s (last %s)", id, want, &last)
}

func (r stuckReport) find(id string) (int, bool) {
	for i, o := range r.Orders {
		if o.OrderID == id {
			return i, true
		}
	}
	return 0, false
}

// The report lists an order the GateStop fixture holds at
// InventoryReserved (owner live, action continue) and not a finished
// one; `admin stuck -resume` finishes it. An order whose owner was killed
// is listed with owner gone and action takeover, and is not continued
// without -takeover.
func TestStuckOrderReportAndResume(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done, rep, err := e.public[localcluster.APIA].StartOrder(ctx, &contracts.StartOrderReq{
		CartId: cartID, ShippingAddressId: addressID, PaymentMethodId: methodOK, IdempotencyKey: "admintest-done"})
	require.NoError(t, err)
	require.True(t, rep.OK(), "%s", rep)
	e.waitStatus(done.GetOrderId(), contracts.OrderStatus_Confirmed)

	id := e.held("admintest-held")
	began := time.Now()
	var r stuckReport
	require.Eventually(t, func() bool {
		r = e.report("1s")
		_, ok := r.find(id)
		return ok
	}, 20*time.Second, 100*time.Millisecond, "the held order is reported once unchanged for 1s")
	i, _ := r.find(id)
	require.Equal(t, "InventoryReserved", r.Orders[i].Status)
	require.Equal(t, "live", r.Orders[i].Owner.State)
	require.Contains(t, localcluster.WorkflowNodes, r.Orders[i].Owner.Node)
	require.Equal(t, "continue", r.Orders[i].Action)
	_, listed := r.find(done.GetOrderId())
	require.False(t, listed, "a terminal order is never reported")
	t.Logf("held order %s reported after %s: %+v", id, time.Since(began).Round(time.Millisecond), r.Orders[i])

	code, text := e.cli("stuck", "-api", e.admin[localcluster.APIA], "-older-than", "1s")
	require.Equal(t, 0, code, text)
	require.Contains(t, text, id)
	require.Contains(t, text, "live ("+r.Orders[i].Owner.Node+")")
	t.Logf("admin stuck:\n%s", text)

	code, text = e.cli("stuck", "-api", e.admin[localcluster.APIA], "-older-than", "1s", "-resume")
	require.Equal(t, 0, code, text)
	require.Contains(t, text, id)
	require.Contains(t, text, "continue -> ")
	t.Logf("admin stuck -resume:\n%s", text)
	e.waitStatus(id, contracts.OrderStatus_Confirmed)
	_, listed = e.report("0s").find(id)
	require.False(t, listed, "a finished order leaves the report")

	// A held order whose owner is killed: owner gone, action takeover.
	gone := e.held("admintest-gone")
	var owner string
	require.Eventually(t, func() bool {
		r = e.report("0s")
		i, ok := r.find(gone)
		if ok {
			owner = r.Orders[i].Owner.Node
		}
		return ok && owner != ""
	}, 20*time.Second, 100*time.Millisecond)
	require.NoError(t, e.c.Kill(owner))
	require.Eventually(t, func() bool {
		r = e.report("0s")
		i, ok := r.find(gone)
		if !ok || r.Orders[i].Owner.State != "gone" || r.Orders[i].Action != "takeover" {
			return false
		}
		// The CLI below asks api-a: wait until it too sees the owner gone.
		a := e.reportVia(localcluster.APIA, "0s")
		j, ok := a.find(gone)
		return ok && a.Orders[j].Owner.State == "gone"
	}, 20*time.Second, 100*time.Millisecond, "the killed owner's order is reported gone / takeover by both APIs")
	code, text = e.cli("stuck", "-api", e.admin[localcluster.APIA], "-older-than", "0s", "-resume")
	require.Equal(t, 1, code, "an order left as it was is no success: %s", text)
	require.Contains(t, text, "owner gone; takeover not requested")
	t.Logf("admin stuck -resume with the owner %s killed:\n%s", owner, text)

	code, text = e.cli("stuck", "-api", e.admin[localcluster.APIA], "-older-than", "0s", "-resume", "-takeover")
	t.Logf("admin stuck -resume -takeover (takeover available: %v):\n%s", r.TakeoverAvailable, text)
	if !r.TakeoverAvailable {
		require.Equal(t, 1, code, text)
		require.Contains(t, text, "takeover unavailable")
		return
	}
	require.Equal(t, 0, code, text)
	e.waitStatus(gone, contracts.OrderStatus_Confirmed)
}

func TestMain(m *testing.M) { proctest.Main(m) }
