package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Small in-memory fakes of edge's consumer interfaces. They exist only for
// the pure edge tests; store behaviour is tested against a real Redis in
// the store packages and end to end in edgetest.

type fakeIdempotency struct {
	mu    sync.Mutex
	m     map[string]commerce.Mapping
	err   error
	calls int
}

func (f *fakeIdempotency) Reserve(_ context.Context, key string, c commerce.Mapping) (commerce.Mapping, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return commerce.Mapping{}, false, f.err
	}
	if m, ok := f.m[key]; ok {
		return m, false, nil
	}
	c.Status = commerce.MappingPending
	f.m[key] = c
	return c, true, nil
}

func (f *fakeIdempotency) Forget(_ context.Context, key string, m commerce.Mapping) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.m[key]; !ok || cur != m || cur.Status != commerce.MappingPending {
		return false, nil
	}
	delete(f.m, key)
	return true, nil
}

func (f *fakeIdempotency) set(key string, m commerce.Mapping) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[key] = m
}

func (f *fakeIdempotency) get(key string) (commerce.Mapping, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.m[key]
	return m, ok
}

type fakeCarts struct {
	carts map[string]commerce.Cart
	err   error
}

func (f *fakeCarts) GetCart(_ context.Context, id string) (commerce.Cart, error) {
	if f.err != nil {
		return commerce.Cart{}, f.err
	}
	c, ok := f.carts[id]
	if !ok {
		return commerce.Cart{}, fmt.Errorf("%w: cart %s", commerce.ErrNotFound, id)
	}
	return c, nil
}

type fakeReadModel struct {
	mu  sync.Mutex
	m   map[string]*contracts.OrderState
	err error
}

func (f *fakeReadModel) Get(_ context.Context, id string) (*contracts.OrderState, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, 0, f.err
	}
	st, ok := f.m[id]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", readmodel.ErrNotFound, id)
	}
	return st, 1, nil
}

func (f *fakeReadModel) put(st *contracts.OrderState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[st.OrderId] = st
}

// fakeOrders records every grain call. start decides each start's answer;
// by default the first start of an order records it.
type fakeOrders struct {
	mu        sync.Mutex
	starts    []*contracts.StartOrderWorkflowReq
	continues []*contracts.ContinueOrderWorkflowReq
	rebuilds  []*contracts.RebuildOrderProjectionReq
	relocates []*contracts.RelocateOrderReq
	closes    []*contracts.CloseOrderReq
	resumes   []*contracts.ResumeOrderReq
	started   map[string]bool
	// minted tells, per start, whether its context claimed the OrderId
	// minted by the request.
	minted []bool
	err    error
	// check, if set, is called with every start before it is recorded.
	check func(*contracts.StartOrderWorkflowReq)
	// startCtx is, per start, its context's error and whether it has a
	// deadline.
	startCtx []ctxSeen
}

type ctxSeen struct {
	err      error
	deadline bool
}

func created(id string) *contracts.OrderState {
	return &contracts.OrderState{OrderId: id, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 1}
}

func (f *fakeOrders) StartOrderWorkflow(ctx context.Context, req *contracts.StartOrderWorkflowReq) (*contracts.StartOrderWorkflowRes, bool, error) {
	if f.check != nil {
		f.check(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, req)
	f.minted = append(f.minted, placement.IsMinted(ctx, grain.KindName, req.OrderId))
	_, dl := ctx.Deadline()
	f.startCtx = append(f.startCtx, ctxSeen{err: ctx.Err(), deadline: dl})
	if f.err != nil {
		return nil, false, f.err
	}
	recorded := !f.started[req.OrderId]
	f.started[req.OrderId] = true
	return &contracts.StartOrderWorkflowRes{State: created(req.OrderId)}, recorded, nil
}

func (f *fakeOrders) ContinueOrderWorkflow(_ context.Context, req *contracts.ContinueOrderWorkflowReq) (*contracts.ContinueOrderWorkflowRes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.continues = append(f.continues, req)
	if f.err != nil {
		return nil, f.err
	}
	return &contracts.ContinueOrderWorkflowRes{State: created(req.OrderId)}, nil
}

func (f *fakeOrders) RebuildOrderProjection(_ context.Context, req *contracts.RebuildOrderProjectionReq) (*contracts.RebuildOrderProjectionRes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rebuilds = append(f.rebuilds, req)
	if f.err != nil {
		return nil, f.err
	}
	return &contracts.RebuildOrderProjectionRes{State: created(req.OrderId)}, nil
}

func (f *fakeOrders) RelocateOrder(_ context.Context, req *contracts.RelocateOrderReq) (*contracts.RelocateOrderRes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.relocates = append(f.relocates, req)
	if f.err != nil {
		return nil, f.err
	}
	return &contracts.RelocateOrderRes{OrderId: req.OrderId, OperationId: "op-1", SourceNode: "workflow-a",
		TargetNode: "workflow-b", Generation: 1}, nil
}

func (f *fakeOrders) CloseOrder(_ context.Context, req *contracts.CloseOrderReq) (*contracts.CloseOrderRes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes = append(f.closes, req)
	if f.err != nil {
		return nil, f.err
	}
	return &contracts.CloseOrderRes{OrderId: req.OrderId, Generation: 1}, nil
}

func (f *fakeOrders) ResumeOrder(_ context.Context, req *contracts.ResumeOrderReq) (*contracts.ResumeOrderRes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumes = append(f.resumes, req)
	return &contracts.ResumeOrderRes{State: created(req.OrderId)}, f.err
}

// calls is the number of grain calls of any kind.
func (f *fakeOrders) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts) + len(f.continues) + len(f.rebuilds) + len(f.relocates) + len(f.closes) + len(f.resumes)
}

type fakeTopology struct{ n atomic.Int64 }

func (f *fakeTopology) WorkflowMembers() int { return int(f.n.Load()) }

const (
	cartOK    = "cart-1"
	cartOther = "cart-2"
)

type env struct {
	t        testing.TB
	srv      *Server
	idem     *fakeIdempotency
	carts    *fakeCarts
	rm       *fakeReadModel
	orders   *fakeOrders
	topo     *fakeTopology
	evidence *workflowtest.Evidence
	logs     *workflowtest.Evidence
	// cartReserve is wired by withCartReserve.
	cartReserve *fakeCartReserver
}

// fakeCartReserver is CartReserver over the env's fake carts and
// mappings: the cart read, then the reservation only if there is a cart.
type fakeCartReserver struct {
	carts      *fakeCarts
	idem       *fakeIdempotency
	unreserves int
}

func (f *fakeCartReserver) ReserveForCart(ctx context.Context, cartID, key string, cand commerce.Mapping) (commerce.CartReservation, error) {
	cart, err := f.carts.GetCart(ctx, cartID)
	if err != nil {
		return commerce.CartReservation{}, err
	}
	m, created, err := f.idem.Reserve(ctx, key, cand)
	if err != nil {
		return commerce.CartReservation{}, err
	}
	return commerce.CartReservation{Cart: cart, Mapping: m, Created: created}, nil
}

func (f *fakeCartReserver) Unreserve(_ context.Context, _, key string, res commerce.CartReservation) (bool, error) {
	f.unreserves++
	f.idem.mu.Lock()
	defer f.idem.mu.Unlock()
	if m, ok := f.idem.m[key]; ok && m == res.Mapping && m.Status == commerce.MappingPending {
		delete(f.idem.m, key)
		return false, nil
	}
	return true, nil
}

type envOpt func(*Config)

// withCartReserve wires the one-step cart read and key reservation
// (env.cartReserve) over the env's fakes.
func withCartReserve() envOpt {
	return func(c *Config) { c.CartReserve = cartReserveMarker{} }
}

// cartReserveMarker asks newEnv for its fakeCartReserver.
type cartReserveMarker struct{ CartReserver }

// testAdminToken is the admin bearer token of the test servers.
const testAdminToken = "admin-token-for-tests"

// testOrderIDSecret is the fake cluster's OrderId secret.
const testOrderIDSecret = "order-id-secret-for-tests"

func withAdmin() envOpt {
	return func(c *Config) { c.Admin, c.AdminToken = true, testAdminToken }
}

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	e := &env{
		t:    t,
		idem: &fakeIdempotency{m: map[string]commerce.Mapping{}},
		carts: &fakeCarts{carts: map[string]commerce.Cart{
			cartOK: {CartID: cartOK, Lines: []*contracts.OrderLine{{Sku: "sku-a", Quantity: 2}, {Sku: "sku-b", Quantity: 1}},
				Amount: 4870, Currency: "EUR"},
			cartOther: {CartID: cartOther, Lines: []*contracts.OrderLine{{Sku: "sku-c", Quantity: 1}}, Amount: 100, Currency: "EUR"},
		}},
		rm:       &fakeReadModel{m: map[string]*contracts.OrderState{}},
		orders:   &fakeOrders{started: map[string]bool{}},
		topo:     &fakeTopology{},
		evidence: &workflowtest.Evidence{},
		logs:     &workflowtest.Evidence{},
	}
	var seq atomic.Int64
	cfg := Config{
		NodeID: "api-t", Idempotency: e.idem, Carts: e.carts, ReadModel: e.rm, Orders: e.orders,
		Topology: e.topo, Operator: e.orders, Evidence: e.evidence, OrderIDSecret: []byte(testOrderIDSecret),
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		NewID:  func() string { return fmt.Sprintf("id-%d", seq.Add(1)) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	if _, ok := cfg.CartReserve.(cartReserveMarker); ok {
		e.cartReserve = &fakeCartReserver{carts: e.carts, idem: e.idem}
		cfg.CartReserve = e.cartReserve
	}
	srv, err := New(cfg)
	require.NoError(t, err)
	e.srv = srv
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("server log:\n" + e.logs.String())
		}
	})
	return e
}

func (e *env) do(method, path, body string) *httptest.ResponseRecorder {
	e.t.Helper()
	return serve(e.srv, method, path, body)
}

// admin sends a request to the admin handler with the right token.
func (e *env) admin(method, path, body string) *httptest.ResponseRecorder {
	e.t.Helper()
	return serveAs(e.srv.AdminHandler(), method, path, body, "Bearer "+testAdminToken)
}

// doWith sends a request to the public handler with header's fields.
func (e *env) doWith(method, path, body string, header http.Header) *httptest.ResponseRecorder {
	e.t.Helper()
	return serveWith(e.srv, method, path, body, header)
}

// serveWith sends a request to h with header's fields added, every value
// of each, so that a field can be sent twice.
func serveWith(h http.Handler, method, path, body string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, vs := range header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func serve(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	return serveAs(h, method, path, body, "")
}

func serveAs(h http.Handler, method, path, body, authorization string) *httptest.ResponseRecorder {
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
	}
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// startBodyNoKey is a start's body without idempotencyKey, for a key
// sent in the Idempotency-Key header.
func startBodyNoKey(cart, addr, method string) string {
	b, err := json.Marshal(map[string]string{"cartId": cart, "shippingAddressId": addr, "paymentMethodId": method})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func startBody(cart, addr, method, key string) string {
	q := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	return fmt.Sprintf(`{"cartId":%s,"shippingAddressId":%s,"paymentMethodId":%s,"idempotencyKey":%s}`, q(cart), q(addr), q(method), q(key))
}

// decodeError reads an error reply, checks that it is the code's
// problem details reply of its status, and returns its public error
// (detail as Message).
func decodeError(t *testing.T, w *httptest.ResponseRecorder) apiError {
	t.Helper()
	var p problem
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), "error body %q", w.Body.String())
	require.NotEmpty(t, p.Code)
	require.Equal(t, ContentTypeProblem, w.Header().Get("Content-Type"))
	require.Equal(t, w.Code, p.Status, "status member is the reply's status: %s", w.Body.String())
	k, ok := problemKinds[p.Code]
	require.True(t, ok, "code %s has a problem type", p.Code)
	require.Equal(t, k.Type, p.Type, w.Body.String())
	require.Equal(t, k.Title, p.Title, w.Body.String())
	require.NotEmpty(t, p.Detail, w.Body.String())
	return apiError{Code: p.Code, Message: p.Detail, Field: p.Field, Reason: p.Reason}
}

func decodeMessage[T any, P interface {
	*T
	proto.Message
}](t *testing.T, w *httptest.ResponseRecorder) P {
	t.Helper()
	m := P(new(T))
	require.NoError(t, contracts.UnmarshalJSON(w.Body.Bytes(), m), "body %q", w.Body.String())
	return m
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
