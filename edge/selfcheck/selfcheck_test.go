package selfcheck_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck/selfcheckapi"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

const token = "test-admin-token"

// fakes stands in for every store and the grain client the hooks reach,
// and records what they were asked.
type fakes struct {
	mu       sync.Mutex
	mappings map[string]commerce.Mapping
	gates    map[string]fixture.GateMode
	skips    []string
	resumed  []string
	deleted  []string
	events   map[string][]eventstore.Envelope
	records  map[string]location.Record
	reserves int
}

func (f *fakes) Reserve(_ context.Context, key string, c commerce.Mapping) (commerce.Mapping, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.mappings[key]; ok {
		return m, false, nil
	}
	f.mappings[key] = c
	return c, true, nil
}

func (f *fakes) Forget(_ context.Context, key string, m commerce.Mapping) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mappings[key] != m {
		return false, nil
	}
	delete(f.mappings, key)
	return true, nil
}

func (f *fakes) ResumeOrder(_ context.Context, req *contracts.ResumeOrderReq) (*contracts.ResumeOrderRes, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed = append(f.resumed, req.OrderId)
	return &contracts.ResumeOrderRes{State: &contracts.OrderState{OrderId: req.OrderId, Status: contracts.OrderStatus_PaymentAuthorized}}, nil
}

func (f *fakes) ArmGate(_ context.Context, key string, m fixture.GateMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gates[key] = m
	return nil
}

func (f *fakes) ReleaseGate(_ context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.gates, key)
	return nil
}

func (f *fakes) ArmSkipTerminalProjection(_ context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skips = append(f.skips, key)
	return nil
}

func (f *fakes) Load(_ context.Context, id string) ([]eventstore.Envelope, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.events[id], nil
}

func (f *fakes) Get(_ context.Context, _, id string) (location.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.records[id], nil
}

func (f *fakes) MemberNames(context.Context) (map[string]string, error) {
	return map[string]string{"m-a": "workflow-a"}, nil
}

func (f *fakes) Operations(_ context.Context, id string) ([]relocation.Operation, error) {
	return []relocation.Operation{{ID: "op-1", OrderID: id, Source: "workflow-b", Target: "workflow-a", Generation: 1, State: relocation.OpCommitted}}, nil
}

func (f *fakes) LoadFirst(_ context.Context, id string) (*contracts.StartOrderWorkflowReq, error) {
	return &contracts.StartOrderWorkflowReq{OrderId: id, Lines: []*contracts.OrderLine{{Sku: "sku-a", Quantity: 1}},
		PaymentMethodId: "pm-1", Amount: 100, Currency: "EUR"}, nil
}

func (f *fakes) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	return nil
}

type inventory struct{ f *fakes }

func (i inventory) Reserve(context.Context, *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error) {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	i.f.reserves++
	return &contracts.ReserveInventoryRes{Accepted: true}, nil
}
func (inventory) Stock(context.Context, string) (int64, error)        { return 7, nil }
func (inventory) ReserveCalls(context.Context, string) (int64, error) { return 1, nil }
func (inventory) ReleaseCalls(context.Context, string) (int64, error) { return 0, nil }

type payment struct{}

func (payment) Authorize(context.Context, *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error) {
	return &contracts.AuthorizePaymentRes{Accepted: true}, nil
}
func (payment) AuthorizeCalls(context.Context, string) (int64, error) { return 1, nil }
func (payment) Captured(context.Context, string) (int64, error)       { return 100, nil }

// nop satisfies the edge's own dependencies, which no hook touches.
type nop struct{}

func (nop) GetCart(context.Context, string) (commerce.Cart, error) {
	return commerce.Cart{}, commerce.ErrNotFound
}
func (nop) Get(context.Context, string) (*contracts.OrderState, int64, error) {
	return nil, 0, commerce.ErrNotFound
}
func (nop) StartOrderWorkflow(context.Context, *contracts.StartOrderWorkflowReq) (*contracts.StartOrderWorkflowRes, bool, error) {
	return nil, false, nil
}
func (nop) ContinueOrderWorkflow(context.Context, *contracts.ContinueOrderWorkflowReq) (*contracts.ContinueOrderWorkflowRes, error) {
	return nil, nil
}
func (nop) RebuildOrderProjection(context.Context, *contracts.RebuildOrderProjectionReq) (*contracts.RebuildOrderProjectionRes, error) {
	return nil, nil
}
func (nop) WorkflowMembers() int { return 1 }

type env struct {
	f        *fakes
	admin    http.Handler
	public   http.Handler
	evidence *workflowtest.Evidence
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := &fakes{mappings: map[string]commerce.Mapping{}, gates: map[string]fixture.GateMode{},
		events: map[string][]eventstore.Envelope{}, records: map[string]location.Record{}}
	hooks, err := selfcheck.New(selfcheck.Config{Idempotency: f, Orders: f, Fixtures: f, Events: f, Authority: f,
		Relocations: f, Envelopes: f, Projections: f, Inventory: inventory{f}, Payment: payment{}})
	require.NoError(t, err)
	ev := &workflowtest.Evidence{}
	srv, err := edge.New(edge.Config{NodeID: "api-t", Idempotency: f, Carts: nop{}, ReadModel: nop{}, Orders: nop{},
		Topology: nop{}, AdminToken: token, OrderIDSecret: []byte("selfcheck-test-order-id-secret"), Mounts: []edge.Mount{hooks}, Evidence: ev,
		Logger: slog.New(slog.DiscardHandler), NewID: func() string { return "new" }})
	require.NoError(t, err)
	return &env{f: f, admin: srv.AdminHandler(), public: srv, evidence: ev}
}

func (e *env) call(h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func (e *env) do(method, path, body string) *httptest.ResponseRecorder {
	return e.call(e.admin, method, path, body)
}

func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// errorReply is the edge's problem details reply.
type errorReply struct {
	Type  string `json:"type"`
	Code  string `json:"code"`
	Field string `json:"field"`
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) errorReply {
	t.Helper()
	var e errorReply
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), w.Body.String())
	require.Equal(t, edge.ContentTypeProblem, w.Header().Get("Content-Type"))
	require.Equal(t, edge.ProblemType(e.Code), e.Type, w.Body.String())
	return e
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	_, err := selfcheck.New(selfcheck.Config{})
	require.ErrorIs(t, err, selfcheck.ErrConfig)
	for _, f := range []string{"Idempotency", "Orders", "Fixtures", "Events", "Authority", "Relocations", "Envelopes", "Projections", "Inventory", "Payment"} {
		require.Contains(t, err.Error(), f)
	}
}

// The hooks are on the admin listener only, behind the token.
func TestHooksAreMountedOnTheAdminListenerOnly(t *testing.T) {
	e := newEnv(t)
	body := jsonBody(t, selfcheckapi.GateRequest{IdempotencyKey: "k-1", Mode: selfcheckapi.GateStop})
	require.Equal(t, http.StatusNotFound, e.call(e.public, "POST", selfcheckapi.GatesPath, body).Code)
	req := httptest.NewRequest("POST", selfcheckapi.GatesPath, strings.NewReader(body))
	w := httptest.NewRecorder()
	e.admin.ServeHTTP(w, req)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Empty(t, e.f.gates)
}

func TestGatesArmAndReleaseResumesTheOrder(t *testing.T) {
	e := newEnv(t)
	for mode, want := range map[string]fixture.GateMode{selfcheckapi.GateStop: fixture.GateStop, selfcheckapi.GateHold: fixture.GateHold} {
		w := e.do("POST", selfcheckapi.GatesPath, jsonBody(t, selfcheckapi.GateRequest{IdempotencyKey: "k-" + mode, Mode: mode}))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Equal(t, want, e.f.gates["k-"+mode])
	}
	w := e.do("POST", selfcheckapi.GatesPath, jsonBody(t, selfcheckapi.GateRequest{IdempotencyKey: "k-x", Mode: "open"}))
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Equal(t, "mode", decodeError(t, w).Field)
	w = e.do("POST", selfcheckapi.GatesPath, `{"idempotencyKey":"k-x","mode":"stop","extra":true}`)
	require.Equal(t, http.StatusBadRequest, w.Code, "the hooks' bodies are strict")

	w = e.do("POST", selfcheckapi.GatesReleasePath, jsonBody(t, selfcheckapi.ReleaseRequest{IdempotencyKey: "k-hold", OrderID: "ord-1"}))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.NotContains(t, e.f.gates, "k-hold")
	require.Equal(t, []string{"ord-1"}, e.f.resumed)
	var rel selfcheckapi.ReleaseReply
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rel))
	st := &contracts.OrderState{}
	require.NoError(t, contracts.UnmarshalJSON(rel.State, st))
	require.Equal(t, contracts.OrderStatus_PaymentAuthorized, st.GetStatus())

	w = e.do("POST", selfcheckapi.SkipTerminalProjectionPath, jsonBody(t, selfcheckapi.SkipTerminalProjectionRequest{IdempotencyKey: "k-s"}))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, []string{"k-s"}, e.f.skips)
}

func TestPendingMappingReservesTheKeysOrderID(t *testing.T) {
	e := newEnv(t)
	req := selfcheckapi.PendingMappingRequest{IdempotencyKey: "k-p", CartID: "c-1", ShippingAddressID: "a-1", PaymentMethodID: "pm-1"}
	w := e.do("POST", selfcheckapi.PendingMappingPath, jsonBody(t, req))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rep selfcheckapi.PendingMappingReply
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rep))
	require.Equal(t, order.OrderIDFor([]byte("selfcheck-test-order-id-secret"), "k-p"), rep.OrderID, "the OrderId POST /orders derives")
	require.Equal(t, commerce.MappingPending, e.f.mappings["k-p"].Status)

	req.CartID = "c-2"
	w = e.do("POST", selfcheckapi.PendingMappingPath, jsonBody(t, req))
	require.Equal(t, http.StatusUnprocessableEntity, w.Code, "the key stands for another request")
}

func TestEvidenceReadsTheStores(t *testing.T) {
	e := newEnv(t)
	w := e.do("GET", selfcheckapi.EvidencePath("ord-none"), "")
	require.Equal(t, http.StatusNotFound, w.Code, "no stream")
	require.Zero(t, e.evidence.Count("shoppingmall-evidence order=ord-none events=0"))

	e.f.events["ord-1"] = []eventstore.Envelope{
		{EventID: "e1", OrderID: "ord-1", EventType: order.TypeOrderStarted, Version: 1, SourceCommandID: "s1", CreatedAtUnixMs: 10},
		{EventID: "e2", OrderID: "ord-1", EventType: order.TypeInventoryReserved, Version: 2, SourceCommandID: "s2", CreatedAtUnixMs: 20},
	}
	e.f.records["ord-1"] = location.Record{Status: location.Ready, Owner: "m-a", Generation: 1}
	w = e.do("GET", selfcheckapi.EvidencePath("ord-1"), "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var ev selfcheckapi.Evidence
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &ev))
	require.Equal(t, selfcheckapi.Evidence{OrderID: "ord-1",
		Events: []selfcheckapi.EvidenceEvent{
			{EventID: "e1", EventType: order.TypeOrderStarted, Version: 1, SourceCommandID: "s1", CreatedAtUnixMs: 10},
			{EventID: "e2", EventType: order.TypeInventoryReserved, Version: 2, SourceCommandID: "s2", CreatedAtUnixMs: 20},
		},
		Generation: 1, OwnerNode: "workflow-a", OwnerMember: "m-a", Authority: "Ready",
		ReservationID: order.ReservationID("ord-1"), PaymentID: order.PaymentID("ord-1"),
		ReserveCalls: 1, AuthorizeCalls: 1,
		Relocations: []selfcheckapi.RelocationView{{ID: "op-1", Source: "workflow-b", Target: "workflow-a", Generation: 1, State: string(relocation.OpCommitted)}},
	}, ev)
	require.Equal(t, 1, e.evidence.Count("shoppingmall-evidence order=ord-1 events=2"))

	w = e.do("DELETE", selfcheckapi.ProjectionPath("ord-1"), "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, []string{"ord-1"}, e.f.deleted)
}

func TestRepeatEffectsComparesWithTheRecordedOutcomes(t *testing.T) {
	e := newEnv(t)
	e.f.events["ord-1"] = []eventstore.Envelope{{EventID: "e1", OrderID: "ord-1", EventType: order.TypeOrderStarted, Version: 1}}
	w := e.do("POST", selfcheckapi.RepeatEffectsPath("ord-1"), "")
	require.Equal(t, http.StatusConflict, w.Code, "no reservation outcome to repeat yet")
	require.Zero(t, e.f.reserves)

	e.f.events["ord-1"] = append(e.f.events["ord-1"],
		eventstore.Envelope{EventID: "e2", OrderID: "ord-1", EventType: order.TypeInventoryReserved, Version: 2},
		eventstore.Envelope{EventID: "e3", OrderID: "ord-1", EventType: order.TypePaymentAuthorized, Version: 3})
	w = e.do("POST", selfcheckapi.RepeatEffectsPath("ord-1"), "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rep selfcheckapi.RepeatEffects
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rep))
	require.True(t, rep.SameResults)
	require.True(t, rep.NothingMoved)
	require.NotNil(t, rep.Payment)
	require.Equal(t, map[string]int64{"sku-a": 7}, rep.Reservation.StockAfter)
	require.Equal(t, 1, e.f.reserves)
}

// A failure event with a field a newer build added is read, not called
// corrupt: the self-check decodes events as tolerantly as the workflow.
func TestRepeatEffectsReadsAnEventWithAFieldItDoesNotKnow(t *testing.T) {
	e := newEnv(t)
	e.f.events["ord-1"] = []eventstore.Envelope{
		{EventID: "e1", OrderID: "ord-1", EventType: order.TypeOrderStarted, Version: 1},
		{EventID: "e2", OrderID: "ord-1", EventType: order.TypeInventoryReservationFailed, Version: 2, Schema: 1,
			Data: []byte(`{"eventId":"e2","orderId":"ord-1","reason":"OUT_OF_STOCK","shortBy":{"sku-a":3}}`)},
	}
	w := e.do("POST", selfcheckapi.RepeatEffectsPath("ord-1"), "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rep selfcheckapi.RepeatEffects
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rep))
	require.Equal(t, "OUT_OF_STOCK", rep.Reservation.First.Reason)
}
