package edgetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/edgenode"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// requestTimeout is each API's request bound.
const requestTimeout = 10 * time.Second

// quietFramework hides protoactor's connection errors at member shutdown.
const quietFramework = slog.LevelError + 4

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type apiNode struct {
	name     string
	api      *edgenode.API
	url      string
	adminURL string // the admin listener: /admin/ and /self-check/
	metrics  *telemetry.Registry
}

// metric is the current value of the API's metric name over the series
// matching labels (a histogram's sample count).
func (a *apiNode) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := telemetry.Sum(a.metrics.Gatherer(), name, labels)
	require.NoError(t, err)
	return v
}

// adminToken is the APIs' admin bearer token.
const adminToken = "edgetest-admin-token"

// orderIDSecret is the APIs' OrderId secret, the same in both.
const orderIDSecret = "edgetest-order-id-secret"

type harness struct {
	t         *testing.T
	stores    *node.Stores
	agent     *test.InMemAgent
	evidence  map[string]*workflowtest.Evidence
	workflows map[string]*node.Workflow
	apis      []*apiNode
	http      *http.Client
	redisURL  string // the stores' redis-server, for tests that inspect its keys
}

// newHarness starts redis, seeds the demo catalogue, two workflow members
// (fixtures on) and two API members serving HTTP on 127.0.0.1:0 with the
// self-check hooks and admin on, and waits until both APIs are ready.
func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores, err := node.OpenStores(ctx, node.RedisURLs{Default: srv.URL()}, node.StoreOptions{Fixtures: true})
	require.NoError(t, err)
	t.Cleanup(stores.Close)
	require.NoError(t, stores.Commerce.ApplySeed(ctx, commerce.DemoSeed()))
	h := &harness{
		t: t, stores: stores, agent: test.NewInMemAgent(), redisURL: srv.URL(),
		evidence:  map[string]*workflowtest.Evidence{},
		workflows: map[string]*node.Workflow{},
		http:      &http.Client{Timeout: 2 * requestTimeout},
	}
	for _, name := range []string{"workflow-a", "workflow-b"} {
		h.startWorkflow(ctx, name)
	}
	for _, name := range []string{"api-a", "api-b"} {
		h.startAPI(ctx, name)
	}
	for _, a := range h.apis {
		require.Eventually(t, func() bool { return h.status("GET", a, "/readyz", "") == http.StatusOK }, 10*time.Second, 10*time.Millisecond,
			"%s ready", a.name)
		require.Eventually(t, func() bool { return len(a.api.Member.Lookup.Eligible(grain.KindName)) == 2 }, 10*time.Second, 10*time.Millisecond,
			"%s sees both workflow members", a.name)
	}
	return h
}

func (h *harness) logger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{h.t}, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)
}

func (h *harness) ev(name string) *workflowtest.Evidence {
	b, ok := h.evidence[name]
	if !ok {
		b = &workflowtest.Evidence{}
		h.evidence[name] = b
	}
	return b
}

func (h *harness) startWorkflow(ctx context.Context, name string) {
	h.startWorkflowWith(ctx, name, func(*node.WorkflowConfig) {})
}

// startWorkflowWith is startWorkflow with edit's changes to the member's
// Config.
func (h *harness) startWorkflowWith(ctx context.Context, name string, edit func(*node.WorkflowConfig)) {
	cfg := node.WorkflowConfig{
		Cluster: cluster.Config{
			NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, Logger: h.logger(name), FrameworkLogLevel: quietFramework,
		},
		Stores:   h.stores,
		Fixtures: true,
		Evidence: io.MultiWriter(h.ev(name), tlogWriter{h.t}),
		Logger:   h.logger(name),
	}
	edit(&cfg)
	w, err := node.StartWorkflow(ctx, cfg)
	require.NoError(h.t, err)
	h.t.Cleanup(w.Member.Crash)
	h.workflows[name] = w
}

func (h *harness) startAPI(ctx context.Context, name string) {
	reg := telemetry.NewRegistry()
	a, err := edgenode.Start(ctx, edgenode.Config{
		Cluster: cluster.Config{
			NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, FrameworkLogLevel: quietFramework,
		},
		Stores:         h.stores,
		RequestTimeout: requestTimeout,
		SelfCheck:      true,
		Admin:          true,
		AdminToken:     adminToken,
		OrderIDSecret:  []byte(orderIDSecret),
		Evidence:       io.MultiWriter(h.ev(name), tlogWriter{h.t}),
		Logger:         h.logger(name),
		Metrics:        reg,
	})
	require.NoError(h.t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(h.t, err)
	served := make(chan error, 2)
	go func() { served <- a.Server.Serve(ln) }()
	go func() { served <- a.Server.ServeAdmin(adm) }()
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Server.Shutdown(ctx)
		require.ErrorIs(h.t, <-served, http.ErrServerClosed)
		require.ErrorIs(h.t, <-served, http.ErrServerClosed)
		a.Routes.Close()
		a.Member.Crash()
	})
	h.apis = append(h.apis, &apiNode{name: name, api: a, url: "http://" + ln.Addr().String(), adminURL: "http://" + adm.Addr().String(), metrics: reg})
}

// do sends one request and returns status and body.
func (h *harness) do(method string, a *apiNode, path, body string) (int, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	base := a.url
	admin := strings.HasPrefix(path, "/admin/") || strings.HasPrefix(path, "/self-check/")
	if admin {
		// The admin surface has its own listener and token.
		base = a.adminURL
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(h.t, err)
	if admin {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	res, err := h.http.Do(req)
	require.NoError(h.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(h.t, err)
	return res.StatusCode, b
}

func (h *harness) status(method string, a *apiNode, path, body string) int {
	s, _ := h.do(method, a, path, body)
	return s
}

var keySeq atomic.Int64

func newKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), keySeq.Add(1), time.Now().UnixNano())
}

func startBody(cart, method, key string) string {
	b, err := json.Marshal(map[string]string{
		"cartId": cart, "shippingAddressId": "addr-1", "paymentMethodId": method, "idempotencyKey": key,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// startOrder POSTs /orders and decodes the reply; it requires status.
func (h *harness) startOrder(a *apiNode, body string, status int) *contracts.StartOrderRes {
	h.t.Helper()
	code, b := h.do("POST", a, "/orders", body)
	require.Equal(h.t, status, code, string(b))
	res := &contracts.StartOrderRes{}
	require.NoError(h.t, contracts.UnmarshalJSON(b, res))
	return res
}

// getState reads GET /orders/{id}; ok is false on 404.
func (h *harness) getState(a *apiNode, id string) (*contracts.OrderState, bool) {
	h.t.Helper()
	code, b := h.do("GET", a, "/orders/"+id, "")
	if code == http.StatusNotFound {
		requireCode(h.t, b, edge.CodeNotFound)
		return nil, false
	}
	require.Equal(h.t, http.StatusOK, code, string(b))
	res := &contracts.GetOrderStateRes{}
	require.NoError(h.t, contracts.UnmarshalJSON(b, res))
	return res.GetState(), true
}

// waitStatus polls GET /orders/{id} (bounded) until the status is reached.
func (h *harness) waitStatus(a *apiNode, id string, status contracts.OrderStatus) *contracts.OrderState {
	h.t.Helper()
	var last *contracts.OrderState
	require.Eventually(h.t, func() bool {
		st, ok := h.getState(a, id)
		last = st
		return ok && st.GetStatus() == status
	}, 15*time.Second, 10*time.Millisecond, "order %s to reach %s via %s (last %v)", id, status, a.name, &last)
	return last
}

type evidence struct {
	OrderID string `json:"orderId"`
	Events  []struct {
		EventID         string `json:"eventId"`
		EventType       string `json:"eventType"`
		Version         int64  `json:"version"`
		SourceCommandID string `json:"sourceCommandId"`
		CreatedAtUnixMs int64  `json:"createdAtUnixMs"`
	} `json:"events"`
	Generation     int64  `json:"generation"`
	OwnerNode      string `json:"ownerNode"`
	OwnerMember    string `json:"ownerMember"`
	Authority      string `json:"authority"`
	ReservationID  string `json:"reservationId"`
	PaymentID      string `json:"paymentId"`
	ReserveCalls   int64  `json:"reserveCalls"`
	ReleaseCalls   int64  `json:"releaseCalls"`
	AuthorizeCalls int64  `json:"authorizeCalls"`
	Relocations    []struct {
		ID         string `json:"id"`
		Source     string `json:"source"`
		Target     string `json:"target"`
		Generation int64  `json:"generation"`
		State      string `json:"state"`
	} `json:"relocations"`
}

func (e *evidence) types() []string {
	out := make([]string, len(e.Events))
	for i, ev := range e.Events {
		out[i] = ev.EventType
	}
	return out
}

// evidenceOf calls the self-check evidence hook.
func (h *harness) evidenceOf(a *apiNode, id string) *evidence {
	h.t.Helper()
	code, b := h.do("GET", a, "/self-check/orders/"+id+"/evidence", "")
	require.Equal(h.t, http.StatusOK, code, string(b))
	var ev evidence
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(h.t, dec.Decode(&ev))
	return &ev
}

// requireCode checks an error body's code.
func requireCode(t *testing.T, body []byte, code string) {
	t.Helper()
	var e struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Code   string `json:"code"`
		Field  string `json:"field"`
	}
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.Equal(t, code, e.Code, string(body))
	require.Equal(t, edge.ProblemType(code), e.Type, string(body))
}

func sameState(t *testing.T, want, got *contracts.OrderState) {
	t.Helper()
	require.True(t, proto.Equal(want, got), "want %v\ngot  %v", want, got)
}

var (
	success         = []string{"OrderStartedEvent", "InventoryReservedEvent", "PaymentAuthorizedEvent", "OrderConfirmedEvent"}
	inventoryFailed = []string{"OrderStartedEvent", "InventoryReservationFailedEvent", "OrderFailedEvent"}
	paymentFailed   = []string{"OrderStartedEvent", "InventoryReservedEvent", "PaymentFailedEvent", "InventoryReleasedEvent", "OrderFailedEvent"}
)

// del deletes keys from the stores' redis-server, as a failover that lost
// their newest writes would.
func (h *harness) del(keys ...string) {
	h.t.Helper()
	h.onRedis(func(ctx context.Context, rdb *redis.Client) { require.NoError(h.t, rdb.Del(ctx, keys...).Err()) })
}

// onRedis runs f with a client of the stores' redis-server of its own.
func (h *harness) onRedis(f func(context.Context, *redis.Client)) {
	h.t.Helper()
	opt, err := redis.ParseURL(h.redisURL)
	require.NoError(h.t, err)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f(ctx, rdb)
}

// keysNaming lists the stores' keys whose name holds s.
func (h *harness) keysNaming(s string) []string {
	h.t.Helper()
	var keys []string
	h.onRedis(func(ctx context.Context, rdb *redis.Client) {
		var err error
		keys, err = rdb.Keys(ctx, "*"+s+"*").Result()
		require.NoError(h.t, err)
	})
	return keys
}
