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

// TestAdminTimelineCLI feeds the CLI a reply made of the server's own
// types, so a renamed field shows up here as a missing column.
func TestAdminTimelineCLI(t *testing.T) {
	reply := edge.TimelineReply{
		OrderID: "ord-1", AsOfUnixMs: 5000, StateVersion: 4,
		State:     json.RawMessage(`{"orderId":"ord-1","status":"Confirmed"}`),
		Authority: edge.TimelineAuthority{Status: "Missing", Generation: 2},
		Entries: []edge.TimelineEntry{
			{AtUnixMs: 1000, Kind: edge.EntryOwnership, Change: "activation", Member: "m-a", Node: "workflow-a", Generation: 1},
			{AtUnixMs: 1001, Kind: edge.EntryEvent, Version: 1, EventType: "OrderStartedEvent", SourceCommandID: "start-x",
				FenceGeneration: 1, FenceEpoch: 1},
			{AtUnixMs: 1002, Kind: edge.EntryEffect, Effect: edge.EffectReservation, EffectID: "rsv-ord-1", Result: "accepted",
				Calls: 1, RecordedByVersion: 2},
			{AtUnixMs: 1003, Kind: edge.EntryOperation, OperationID: "tk-1", OperationKind: "takeover", OperationState: "committed",
				Source: "workflow-a", Member: "m-a", Generation: 1, NewGeneration: 2, Caller: "cli ops"},
			{AtUnixMs: 1004, Kind: edge.EntryEffect, Effect: edge.EffectAuthorization, EffectID: "pay-ord-1", Result: "declined",
				Reason: "card declined", Calls: 2, Unrecorded: true},
		},
	}
	body, err := json.Marshal(reply)
	require.NoError(t, err)
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		if r.URL.Path != "/admin/orders/ord-1/timeline" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"urn:shoppingmall:problem:NOT_FOUND","title":"Not found","status":404,"detail":"order not found","code":"NOT_FOUND"}`))
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	t.Setenv("SHOPPINGMALL_ADMIN_TOKEN", "tok")

	var out, errOut bytes.Buffer
	require.Equal(t, 0, admin([]string{"timeline", "-api", srv.URL, "-order", "ord-1"}, &out, &errOut), errOut.String())
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2+len(reply.Entries)+1, "summary, header, one line per entry, count")
	require.Equal(t, "order ord-1: Confirmed (projection at version 4); authority Missing at generation 2", lines[0])
	require.Regexp(t, `^TIME \(UTC\)\s+KIND\s+WHAT\s+GENERATION\s+DETAIL$`, lines[1])
	require.Regexp(t, `^1970-01-01 00:00:01\.000\s+ownership\s+activation\s+1\s+workflow-a \(m-a\)$`, lines[2])
	require.Regexp(t, `event\s+v1 OrderStartedEvent\s+fence 1\.1\s+command start-x$`, lines[3])
	require.Regexp(t, `effect\s+reservation rsv-ord-1\s+accepted, 1 calls, recorded by v2$`, lines[4])
	require.Regexp(t, `operation\s+takeover committed\s+1 -> 2\s+from workflow-a \(m-a\) op tk-1 by cli ops$`, lines[5])
	require.Regexp(t, `authorization pay-ord-1\s+declined \(card declined\), 2 calls, not recorded in the stream yet$`, lines[6])
	require.Equal(t, "5 entries", lines[7])

	out.Reset()
	require.Equal(t, 0, admin([]string{"timeline", "-api", srv.URL, "-order", "ord-1", "-json"}, &out, &errOut), errOut.String())
	require.JSONEq(t, string(body), out.String())

	out.Reset()
	require.Equal(t, 1, admin([]string{"timeline", "-api", srv.URL, "-order", "ord-2"}, &out, &errOut), "an unknown order")
	require.Contains(t, out.String(), "NOT_FOUND")
	require.Contains(t, errOut.String(), "404 Not Found: NOT_FOUND: order not found", "the problem details, read")
	require.Equal(t, 2, admin([]string{"timeline", "-api", srv.URL}, &out, &errOut), "-order is required")
	require.Equal(t, []string{
		"GET /admin/orders/ord-1/timeline Bearer tok",
		"GET /admin/orders/ord-1/timeline Bearer tok",
		"GET /admin/orders/ord-2/timeline Bearer tok",
	}, got)
}
