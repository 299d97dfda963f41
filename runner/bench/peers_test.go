package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func peersRow(system string, tput, cpu, soP99, e2eP99 float64) peerRow {
	r := peerRow{Label: system, System: system, ThroughputPerSec: tput, CPUMsPerOrder: cpu}
	r.Orders.Terminal = 100
	r.OpenLoopStartOrderMs = &hdrPct{P99: soP99, N: 50}
	r.OpenLoopStartToTermMs = &hdrPct{P99: e2eP99, N: 50}
	return r
}

func goalsByName(res peersResult) map[string]peerGoal {
	out := map[string]peerGoal{}
	for _, g := range res.Goals {
		out[g.Goal] = g
	}
	return out
}

// Each row of ours gets its ratios over Restate's and the goals
// with the figure and the verdict, met or not.
func TestPeersGoalsCompareEachOfOursWithRestate(t *testing.T) {
	o, err := parseOptions([]string{"-peers"})
	require.NoError(t, err)
	res := buildPeers(o, []peerRow{
		peersRow("fast", 900, 2, 10, 40),
		peersRow("slow", 200, 4, 30, 90),
		peersRow("restate", 250, 8, 20, 80),
	})
	require.Len(t, res.Ratios, 2)
	require.InDelta(t, 3.6, res.Ratios[0].Throughput, 1e-9)
	require.InDelta(t, 0.25, res.Ratios[0].CPUPerOrder, 1e-9)
	require.InDelta(t, 0.5, *res.Ratios[0].OpenStartOrderP99, 1e-9)

	g := goalsByName(res)
	require.Len(t, g, 6)
	require.Equal(t, "met", g["fast: closed-loop throughput >= 3x Restate's"].Verdict)
	require.Equal(t, "met", g["fast: open-loop start->terminal p99 <= Restate's"].Verdict)
	require.Equal(t, "not met", g["slow: closed-loop throughput >= 3x Restate's"].Verdict)
	require.InDelta(t, 0.8, g["slow: closed-loop throughput >= 3x Restate's"].Figure, 1e-9)
	require.Equal(t, "not met", g["slow: open-loop StartOrder p99 <= Restate's"].Verdict)
	require.Equal(t, "not met", g["slow: open-loop start->terminal p99 <= Restate's"].Verdict)
}

// A side without an open loop has no p99 to compare: "no data", never met.
func TestPeersGoalWithoutOpenLoopIsNoData(t *testing.T) {
	o, err := parseOptions([]string{"-peers"})
	require.NoError(t, err)
	ours := peersRow("ours", 900, 2, 10, 40)
	ours.OpenLoopStartOrderMs = nil
	res := buildPeers(o, []peerRow{ours, peersRow("restate", 250, 8, 20, 80)})
	g := goalsByName(res)["ours: open-loop StartOrder p99 <= Restate's"]
	require.Equal(t, "no data", g.Verdict)
	require.False(t, g.Met)
}

// A row passes only when every order ended as its path must and, where
// checked, every effect happened once.
func TestPeerRowOK(t *testing.T) {
	r := peersRow("x", 1, 1, 1, 1)
	require.True(t, r.ok())
	r.OpenLoopUnexpected = 1
	require.False(t, r.ok())
	r = peersRow("x", 1, 1, 1, 1)
	r.Effects = &effectsCheck{Orders: 10, BadCount: 1}
	require.False(t, r.ok())
	r.Effects.BadCount = 0
	require.True(t, r.ok())
	r.Orders.Terminal = 0
	require.False(t, r.ok(), "a row without a terminal order proves nothing")
}

func TestPeerFlags(t *testing.T) {
	o, err := parseOptions([]string{"-target", "restate", "-restate-server", "/x/restate-server"})
	require.NoError(t, err)
	require.True(t, o.peer.active())
	require.Equal(t, "/x/restate-server", o.peer.restateServer)
	o, err = parseOptions(nil)
	require.NoError(t, err)
	require.False(t, o.peer.active(), "a plain run is `make bench`")
	_, err = parseOptions([]string{"-target", "temporal"})
	require.Error(t, err)
	_, err = parseOptions([]string{"-redis-durability", "sometimes"})
	require.Error(t, err)

	persist, fsync := redisDurability(durabilityAlways)
	require.True(t, persist)
	require.Equal(t, "always", fsync)
	persist, _ = redisDurability(durabilityNone)
	require.False(t, persist)
}

// restate-server runs at its release's durability defaults: the bench
// writes no storage, WAL or fsync setting of its own.
func TestRestateConfigLeavesDurabilityAtDefaults(t *testing.T) {
	c := restateConfig("/tmp/x", 1, 2, 3)
	require.Contains(t, c, `base-dir = "/tmp/x"`)
	require.Contains(t, c, "127.0.0.1:1")
	for _, k := range []string{"fsync", "wal", "rocksdb", "bifrost", "replication", "[worker"} {
		require.NotContains(t, c, k)
	}
}

// The client speaks Restate's ingress protocol: send with the
// idempotency key to the object keyed by the order id, then attach to the
// invocation; latencies from the send; an attach that fails is an error.
func TestRestateClientSendsThenAttaches(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	fail := false
	ing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" key="+r.Header.Get("idempotency-key"))
		f := fail
		mu.Unlock()
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/Place/send"):
			var req restatePlaceReq
			if json.Unmarshal(body, &req) != nil || req.IdempotencyKey != r.Header.Get("idempotency-key") {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"invocationId":"inv_1","status":"Accepted"}`)
		case r.URL.Path == "/restate/invocation/inv_1/attach":
			if f {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"message":"boom"}`)
				return
			}
			time.Sleep(5 * time.Millisecond)
			_, _ = io.WriteString(w, `{"orderId":"x","status":"Confirmed"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer ing.Close()

	gen := newLoad(loadConfig{APIs: []string{ing.URL}, Concurrency: 1, PollTimeout: 5 * time.Second, RunID: "t",
		IDs: seedIDs{CartOK: "c", MethodOK: "m"}, InventoryPct: 5, PaymentPct: 5})
	rc := &restateClient{ingress: ing.URL, client: gen.client}
	r := rc.one(context.Background(), gen, 1, time.Now(), time.Time{})
	require.Empty(t, r.Err)
	require.Equal(t, "Confirmed", r.Status)
	require.Equal(t, pathSuccess, r.Path)
	require.GreaterOrEqual(t, r.E2E, 5*time.Millisecond)
	require.LessOrEqual(t, r.StartLat, r.E2E)
	id := restateOrderID("bench-t-1")
	require.Equal(t, id, r.OrderID)
	require.Equal(t, []string{
		"POST /Order/" + id + "/Place/send key=bench-t-1",
		"GET /restate/invocation/inv_1/attach key=",
	}, seen)

	mu.Lock()
	fail = true
	mu.Unlock()
	r = rc.one(context.Background(), gen, 2, time.Now(), time.Time{})
	require.Contains(t, r.Err, "status 500")
	require.False(t, r.terminal())
}

func TestRestateOrderIDIsDeterministicPerKey(t *testing.T) {
	require.Equal(t, restateOrderID("k"), restateOrderID("k"))
	require.NotEqual(t, restateOrderID("k"), restateOrderID("k2"))
	require.True(t, strings.HasPrefix(restateOrderID("k"), "ord-"))
}

// Each row carries the machine's steal during its closed and open loop,
// from its report, and the table prints it beside the CPU, "n/a" where it
// was not read.
func TestPeerRowsCarryTheSteal(t *testing.T) {
	r := &report{Steal: stealBetween(machineCPU{Total: 100}, machineCPU{Total: 200, Steal: 25})}
	r.OpenLoop = &openLoopStats{Steal: stealBetween(machineCPU{Total: 100}, machineCPU{Total: 300, Steal: 10})}
	row := rowFromReport("ours", "shoppingmall", "d", r)
	require.InDelta(t, 25.0, *row.StealPct, 1e-9)
	require.InDelta(t, 5.0, *row.OpenLoopStealPct, 1e-9)
	bare := rowFromReport("restate", "restate", "d", &report{})
	require.Nil(t, bare.StealPct)
	require.Nil(t, bare.OpenLoopStealPct)

	o, err := parseOptions([]string{"-peers"})
	require.NoError(t, err)
	var out strings.Builder
	printPeers(&out, buildPeers(o, []peerRow{row, bare}))
	require.Contains(t, out.String(), "25.0 / 5.0")
	require.Contains(t, out.String(), "n/a / n/a")
}
