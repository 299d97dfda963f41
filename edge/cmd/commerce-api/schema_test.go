package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/edge"
)

// TestAdminSchemaCLI feeds the CLI replies made of the server's own
// types, so a renamed field shows up here as a missing column.
func TestAdminSchemaCLI(t *testing.T) {
	lvl := location.SchemaLevel{Level: 2, RaisedBy: "alice", RaisedAtUnixMs: 1_765_000_000_000, From: 1}
	report := compat.Report{Level: lvl, History: []location.SchemaLevel{lvl}, Readable: 2, Members: []compat.Member{
		{ID: "m-a", Node: "workflow-a", Schema: 3, Advertised: true, Workflow: true},
		{ID: "m-b", Node: "workflow-b", Schema: 2, Workflow: true},
		{ID: "m-api", Node: "api-a"},
	}}
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+strings.TrimSpace(string(body)))
		switch r.URL.Path {
		case "/admin/schema":
			_ = json.NewEncoder(w).Encode(report)
		case "/admin/schema/raise":
			var req edge.SchemaRaiseRequest
			_ = json.Unmarshal(body, &req)
			if req.To > 2 {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"type":"urn:shoppingmall:problem:FAILED_PRECONDITION","title":"Failed precondition","status":409,"detail":"schema 3 is not read by every live workflow member (workflow-b reads up to 2)","code":"FAILED_PRECONDITION"}`))
				return
			}
			_ = json.NewEncoder(w).Encode(edge.SchemaRaiseReply{Level: location.SchemaLevel{Level: req.To, RaisedBy: req.By, RaisedAtUnixMs: 1_765_000_000_000, From: 1}, Raised: true})
		}
	}))
	defer srv.Close()
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "tok")
	t.Setenv("USER", "carol")

	var out, errOut bytes.Buffer
	require.Equal(t, 0, admin([]string{"schema", "-api", srv.URL}, &out, &errOut), errOut.String())
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, "compatibility level 2 (from 1, raised by alice at 2025-12-06 05:46:40 UTC)", lines[0])
	require.Equal(t, "every live workflow member reads up to schema 2", lines[1])
	require.Regexp(t, `^NODE\s+MEMBER\s+ROLE\s+READS UP TO$`, lines[2])
	require.Regexp(t, `^workflow-a\s+m-a\s+live workflow\s+3$`, lines[3])
	require.Regexp(t, `^workflow-b\s+m-b\s+live workflow\s+2 \(assumed: advertises nothing\)$`, lines[4])
	require.Regexp(t, `^api-a\s+m-api\s+hosts no orders\s+-$`, lines[5])
	require.Equal(t, "changes, newest first:", lines[6])

	out.Reset()
	require.Equal(t, 0, admin([]string{"schema", "-api", srv.URL, "-json"}, &out, &errOut), errOut.String())
	want, err := json.Marshal(report)
	require.NoError(t, err)
	require.JSONEq(t, string(want), out.String())

	out.Reset()
	require.Equal(t, 0, admin([]string{"schema", "raise", "-api", srv.URL, "-to", "2"}, &out, &errOut), errOut.String())
	require.Equal(t, "raised: compatibility level 2 (from 1, raised by carol at 2025-12-06 05:46:40 UTC)\n", out.String())

	out.Reset()
	require.Equal(t, 1, admin([]string{"schema", "raise", "-api", srv.URL, "-to", "3", "-by", "dave"}, &out, &errOut))
	require.Contains(t, out.String(), "workflow-b reads up to 2")
	require.Equal(t, 2, admin([]string{"schema", "raise", "-api", srv.URL}, &out, &errOut), "-to is required")

	require.Equal(t, []string{
		"GET /admin/schema ",
		"GET /admin/schema ",
		`POST /admin/schema/raise {"by":"carol","to":2}`,
		`POST /admin/schema/raise {"by":"dave","to":3}`,
	}, got)
}
