package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/edge"
)

// TestAdminStockCLI feeds the CLI a reply made of the server's own types,
// so a renamed field shows up here as a missing column.
func TestAdminStockCLI(t *testing.T) {
	reply := edge.StockReply{SKU: "sku-a", Available: 7, Movements: []edge.StockMovement{
		{ID: "2-0", Kind: "refuse", Available: 7, Requested: 9, ReservationID: "rsv-o2", OrderID: "o2", AtUnixMs: 2000},
		{ID: "1-0", Kind: "reserve", Delta: -3, Available: 7, ReservationID: "rsv-o1", OrderID: "o1", AtUnixMs: 1000},
		{ID: "0-1", Kind: "seed", Delta: 10, Available: 10, AtUnixMs: 500},
	}}
	body, err := json.Marshal(reply)
	require.NoError(t, err)
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		if r.URL.Path != "/admin/stock/sku-a" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"urn:shoppingmall:problem:NOT_FOUND","title":"Not found","status":404,"detail":"not found","code":"NOT_FOUND"}`))
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "tok")

	var out, errOut bytes.Buffer
	require.Equal(t, 0, admin([]string{"stock", "-api", srv.URL, "-sku", "sku-a", "-limit", "3"}, &out, &errOut), errOut.String())
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2+len(reply.Movements)+1)
	require.Equal(t, "sku sku-a: 7 available", lines[0])
	require.Regexp(t, `^TIME \(UTC\)\s+KIND\s+DELTA\s+AVAILABLE\s+RESERVATION\s+ORDER$`, lines[1])
	require.Regexp(t, `^1970-01-01 00:00:02\.000\s+refuse \(requested 9\)\s+\+0\s+7\s+rsv-o2\s+o2$`, lines[2])
	require.Regexp(t, `reserve\s+-3\s+7\s+rsv-o1\s+o1$`, lines[3])
	require.Regexp(t, `seed\s+\+10\s+10\s*$`, lines[4])
	require.Equal(t, "3 movements, newest first", lines[5])

	out.Reset()
	require.Equal(t, 0, admin([]string{"stock", "-api", srv.URL, "-sku", "sku-a", "-json"}, &out, &errOut), errOut.String())
	require.JSONEq(t, string(body), out.String())

	out.Reset()
	require.Equal(t, 1, admin([]string{"stock", "-api", srv.URL, "-sku", "sku-x"}, &out, &errOut), "an unknown SKU")
	require.Contains(t, out.String(), "NOT_FOUND")
	require.Equal(t, 2, admin([]string{"stock", "-api", srv.URL}, &out, &errOut), "-sku is required")
	require.Equal(t, []string{
		"GET /admin/stock/sku-a?limit=3 Bearer tok",
		"GET /admin/stock/sku-a Bearer tok",
		"GET /admin/stock/sku-x Bearer tok",
	}, got)
}
