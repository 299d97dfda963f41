package edgenode

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// errorReply is the edge's problem details reply.
type errorReply struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

func get(t *testing.T, h http.Handler, path string) (int, errorReply, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	var rep errorReply
	_ = json.Unmarshal(w.Body.Bytes(), &rep)
	return w.Code, rep, w.Header()
}

// downStores points at a port nothing listens on.
func downStores(t *testing.T) *node.Stores {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	s, err := node.NewStores(node.RedisURLs{Default: "redis://" + addr + "/0"}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func TestStartingHandlerSaysWhyNotReady(t *testing.T) {
	h := StartingHandler(node.NewReadiness(downStores(t)))
	code, _, _ := get(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code, "alive while starting")

	code, rep, hdr := get(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, edge.CodeUnavailable, rep.Code)
	require.Equal(t, edge.ReasonStoreUnavailable, rep.Reason)
	require.Equal(t, "starting: the stores do not answer", rep.Detail, "no Redis address or error in a public reply")
	require.NotEmpty(t, hdr.Get("Retry-After"))
	require.Equal(t, edge.ContentTypeProblem, hdr.Get("Content-Type"))
	require.Equal(t, edge.ProblemType(edge.CodeUnavailable), rep.Type)
	require.Equal(t, http.StatusServiceUnavailable, rep.Status)

	code, rep, _ = get(t, h, "/orders/ord-1")
	require.Equal(t, http.StatusServiceUnavailable, code, "orders are not refused as unknown while starting")
	require.Equal(t, "starting", rep.Detail)
	require.Equal(t, edge.ReasonStarting, rep.Reason, "every 503 names its reason")
}

func TestStartingHandlerWaitsForTheMember(t *testing.T) {
	srv := redistest.Start(t)
	s, err := node.NewStores(node.RedisURLs{Default: srv.URL()}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	code, rep, _ := get(t, StartingHandler(node.NewReadiness(s)), "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "starting: the cluster member has not joined", rep.Detail)
	require.Equal(t, edge.ReasonStarting, rep.Reason)
}

// unusedOrders satisfies edge.Orders; readiness never calls it.
type unusedOrders struct{ edge.Orders }

// oneMember is a topology with a workflow member, whose stores are real.
type oneMember struct{ topology }

func (oneMember) WorkflowMembers() int { return 1 }

// The edge's /readyz follows its stores: 503 while Redis is gone, 200
// again once it is back, with the same process and clients.
func TestEdgeReadyzFollowsTheStores(t *testing.T) {
	dir, err := os.MkdirTemp("", "rdy")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	rcfg := redisserver.Config{Dir: dir, LogFile: filepath.Join(dir, "redis.log")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := redisserver.Start(ctx, rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Stop() })

	st, err := node.NewStores(node.RedisURLs{Default: rs.URL()}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	srv, err := edge.New(edge.Config{
		NodeID: "api-t", Idempotency: st.Commerce.Idempotency(), Carts: st.Commerce.Carts(),
		ReadModel: st.ReadModel, Orders: unusedOrders{}, Topology: oneMember{topology{stores: st}},
		Logger: slog.New(slog.DiscardHandler), OrderIDSecret: []byte("edgenode-test-order-id-secret"),
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	base := "http://" + ln.Addr().String()

	readyz := func() (int, errorReply) {
		res, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		defer res.Body.Close()
		var rep errorReply
		_ = json.NewDecoder(res.Body).Decode(&rep)
		return res.StatusCode, rep
	}
	waitStatus := func(want int) errorReply {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, rep := readyz()
			if code == want {
				return rep
			}
			require.True(t, time.Now().Before(deadline), "readyz stayed %d, want %d", code, want)
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitStatus(http.StatusOK)

	require.NoError(t, rs.Stop())
	rep := waitStatus(http.StatusServiceUnavailable)
	require.Equal(t, edge.CodeUnavailable, rep.Code)
	require.Equal(t, edge.ReasonStoreUnavailable, rep.Reason)
	require.Equal(t, "the stores do not answer", rep.Detail)

	rs, err = redisserver.Start(ctx, rcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Stop() })
	waitStatus(http.StatusOK)
	// The same clients work again: no reopening after the outage.
	_, _, err = st.ReadModel.Get(ctx, "ord-none")
	require.ErrorIs(t, err, readmodel.ErrNotFound)
}

// The API's stores hand the edge the event store's existence check, so
// that a command on an order without a stream costs no grain call.
func TestTheEdgeChecksStreamsInTheEventStore(t *testing.T) {
	srv := redistest.Start(t)
	s, err := node.NewStores(node.RedisURLs{Default: srv.URL()}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	sc := streams(s)
	require.NotNil(t, sc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := sc.Presence(ctx, "ord-never")
	require.NoError(t, err)
	require.Equal(t, eventstore.TierNone, p.Tier)
}
