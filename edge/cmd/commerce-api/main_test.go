package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/edge"
)

// TestMain gives every parse the OrderId secret a real API needs.
func TestMain(m *testing.M) {
	if err := os.Setenv("SHOPPINGMALL_ORDER_ID_SECRET", "main-test-order-id-secret"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

func TestAnAPINeedsTheOrderIDSecret(t *testing.T) {
	t.Setenv("SHOPPINGMALL_ORDER_ID_SECRET", "")
	_, err := parse(nil)
	require.ErrorContains(t, err, "OrderId secret")
	_, err = parse([]string{"-order-id-secret", "too-short"})
	require.ErrorContains(t, err, "at least 16 bytes")
	o, err := parse([]string{"-order-id-secret", "sixteen-bytes-ok"})
	require.NoError(t, err)
	require.Equal(t, "sixteen-bytes-ok", o.orderIDSecret)
}

func TestAdminNeedsAToken(t *testing.T) {
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "")
	_, err := parse([]string{"-admin"})
	require.ErrorContains(t, err, "admin token")
	_, err = parse([]string{"-self-check"})
	require.ErrorContains(t, err, "admin token")
	o, err := parse(nil)
	require.NoError(t, err)
	require.False(t, o.adminListener(), "no admin listener by default")
	require.Equal(t, "127.0.0.1:9081", o.adminHTTP, "loopback by default")

	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "from-env")
	o, err = parse([]string{"-admin"})
	require.NoError(t, err)
	require.Equal(t, "from-env", o.adminToken)
	require.True(t, o.adminListener())
}

func TestAdminCLISendsTheBearerToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"asOfUnixMs":120000,"olderThan":"1m0s","orders":[{"orderId":"ord-1","status":"InventoryReserved","updatedAtUnixMs":0,"owner":{"state":"gone","node":"workflow-a"},"action":"takeover","resume":{"done":[],"skipped":"takeover unavailable"}}]}`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "tok")
	require.Equal(t, 0, admin([]string{"stuck", "-api", srv.URL}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "ord-1")
	require.Contains(t, out.String(), "gone (workflow-a)")
	require.Contains(t, out.String(), "2m0s")
	out.Reset()
	require.Equal(t, 1, admin([]string{"stuck", "-api", srv.URL, "-resume", "-takeover"}, &out, &errOut), "an order not resumed")
	require.Contains(t, out.String(), "takeover unavailable")
	require.Equal(t, 1, admin([]string{"close", "-api", srv.URL, "-order", "o", "-token", "wrong"}, &out, &errOut))
	require.Equal(t, 2, admin([]string{"stuck", "-api", srv.URL, "-takeover"}, &out, &errOut), "-takeover needs -resume")
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "")
	require.Equal(t, 2, admin([]string{"stuck", "-api", srv.URL}, &out, &errOut), "no token")
	require.Equal(t, []string{
		"GET /admin/orders/stuck Bearer tok",
		"POST /admin/orders/stuck/resume Bearer tok",
		"POST /admin/orders/o/close Bearer wrong",
	}, got)
}

func TestTakeoverAfterIsOffByDefault(t *testing.T) {
	o, err := parse(nil)
	require.NoError(t, err)
	require.Zero(t, o.takeoverAfter, "the default keeps Unavailable")
	o, err = parse([]string{"-takeover-after", "2m"})
	require.NoError(t, err)
	require.Equal(t, "2m0s", o.takeoverAfter.String())
}

func TestAdminTakeoverCLI(t *testing.T) {
	var got []string
	reply := `{"dryRun":false,"force":false,"member":"workflow-a","orders":[{"orderId":"ord-1","operationId":"op.ord-1","member":"m1","node":"workflow-a","oldGeneration":2,"newGeneration":3,"outcome":"taken-over"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(reply))
	}))
	defer srv.Close()
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "tok")
	t.Setenv("USER", "ops")
	var out, errOut bytes.Buffer
	require.Equal(t, 0, admin([]string{"takeover", "-api", srv.URL, "-member", "workflow-a", "-dry-run", "-force", "-scan", "-operation", "op"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "ord-1")
	require.Contains(t, out.String(), "op.ord-1")
	require.Contains(t, out.String(), "1 orders taken over, 0 failed")
	out.Reset()
	require.Equal(t, 0, admin([]string{"takeover", "-api", srv.URL, "-order", "ord-1", "-json"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), `"newGeneration":3`)
	require.Equal(t, []string{
		"POST /admin/members/workflow-a/takeover?caller=cli+ops&dryRun=true&force=true&operationId=op&scan=true Bearer tok",
		"POST /admin/orders/ord-1/takeover?caller=cli+ops Bearer tok",
	}, got)

	reply = `{"dryRun":false,"force":false,"orders":[],"failed":[{"orderId":"ord-2","error":{"code":"UNAVAILABLE","reason":"STORE_UNAVAILABLE","message":"x"}}]}`
	require.Equal(t, 1, admin([]string{"takeover", "-api", srv.URL, "-member", "workflow-a"}, &out, &errOut), "an order not taken over")
	require.Contains(t, out.String(), "failed: UNAVAILABLE STORE_UNAVAILABLE")
	for _, bad := range [][]string{
		{"takeover", "-api", srv.URL},
		{"takeover", "-api", srv.URL, "-order", "a", "-member", "b"},
		{"takeover", "-api", srv.URL, "-order", "a", "-scan"},
	} {
		require.Equal(t, 2, admin(bad, &out, &errOut), "%v", bad)
	}
}

func TestAdmissionFlags(t *testing.T) {
	o, err := parse(nil)
	require.NoError(t, err)
	require.Equal(t, edge.DefaultAdmission, o.admission, "the edge's defaults when no flag is given")
	t.Setenv("SHOPPINGMALL_ADMIT_WAITS", "7")
	o, err = parse([]string{"-admit-starts", "3", "-admit-commands", "-1", "-admit-reads", "9"})
	require.NoError(t, err)
	require.Equal(t, edge.Admission{Starts: 3, Commands: -1, Reads: 9, Waits: 7}, o.admission)
}
