package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/cluster/takeover"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// openapi.yaml is held to the code four ways here: it is a valid OpenAPI
// 3.0 document; its paths are exactly the two listeners' gin route tables;
// the contract's golden JSON, the proto messages and the Go reply types
// have the shapes its schemas say; and real replies of the router over
// the package's fakes validate against it, requests included. A route
// added without documentation, a documented route that is gone, a field
// added, dropped or retyped in a reply, and an error status no route
// documents all fail.

const (
	listenerPublic = "public"
	listenerAdmin  = "admin"
)

// leftOut is a route family the document leaves out on purpose.
type leftOut struct{ prefix, why string }

// undocumented is what the document leaves out on purpose, by path
// prefix per listener. Each entry must still match a route, so that a
// stale one fails too.
var undocumented = map[string][]leftOut{
	listenerAdmin: {
		// The Go runtime's profiles (net/http/pprof behind the admin
		// token): their formats are pprof's, and their paths follow the
		// Go release, not this API.
		{"/debug/pprof/", "the Go runtime's profiles"},
		// The runner's test machinery, mounted only in a process started
		// with -self-check; its bodies are edge/selfcheck/selfcheckapi's,
		// and no client of the API may call it.
		{"/self-check/", "the runner's hooks"},
	},
}

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context), "openapi.yaml is not a valid OpenAPI document")
	return doc
}

func listenerOf(pi *openapi3.PathItem) string {
	s, _ := pi.Extensions["x-listener"].(string)
	return s
}

// openAPIPath writes a gin route as an OpenAPI path: :name and *name
// become {name}.
func openAPIPath(ginPath string) string {
	segs := strings.Split(ginPath, "/")
	for i, s := range segs {
		if s != "" && (s[0] == ':' || s[0] == '*') {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// fakeLedger is a stock ledger with one SKU.
type fakeLedger struct{}

func (fakeLedger) StockReport(_ context.Context, sku string, limit int) (commerce.StockReport, error) {
	if sku != "sku-a" {
		return commerce.StockReport{}, fmt.Errorf("%w: %s", commerce.ErrNotFound, sku)
	}
	return commerce.StockReport{SKU: sku, Available: 7, Movements: []commerce.Movement{
		{ID: "2-0", Kind: commerce.MovementReserve, Delta: -2, Available: 7, ReservationID: "rsv-ord-1", OrderID: "ord-1", At: time.UnixMilli(5000)},
		{ID: "1-0", Kind: "seed", Delta: 9, Available: 9, At: time.UnixMilli(4000)},
	}[:min(limit, 2)]}, nil
}

// fakeSchema is a SchemaControl of two live workflow members, one of
// which reads schema 2: a raise to 2 passes, to 3 is refused, to 9 meets
// a store that does not answer.
type fakeSchema struct{}

func (fakeSchema) SchemaStatus(context.Context) (compat.Report, error) {
	lvl := location.SchemaLevel{Level: 2, RaisedBy: "alice", RaisedAtUnixMs: 1000, From: 1}
	return compat.Report{Level: lvl, History: []location.SchemaLevel{lvl}, Readable: 2, Members: []compat.Member{
		{ID: "m-a", Node: "workflow-a", Schema: 3, Advertised: true, Workflow: true},
		{ID: "m-b", Node: "workflow-b", Schema: 2, Advertised: true, Workflow: true},
		{ID: "m-api", Node: "api-a"},
	}}, nil
}

func (fakeSchema) RaiseSchema(_ context.Context, to int, by string) (location.SchemaLevel, bool, error) {
	switch {
	case to == 9:
		return location.SchemaLevel{}, false, fmt.Errorf("%w: down", location.ErrStoreUnavailable)
	case to > 2:
		return location.SchemaLevel{}, false, &compat.BehindError{Schema: to, Behind: []compat.Member{{ID: "m-b", Node: "workflow-b", Schema: 2, Advertised: true, Workflow: true}}}
	}
	return location.SchemaLevel{Level: to, RaisedBy: by, RaisedAtUnixMs: 1000, From: 1}, true, nil
}

// neverWakes is a TerminalWatcher whose waits end by their timeout only.
type neverWakes struct{}

func (neverWakes) Watch(string) (<-chan struct{}, func()) { return nil, func() {} }

// openAPIEnv is an admin server with every route the document describes:
// the stuck report (stuckEnv's four orders), takeover, the timeline, the
// bounded wait and the stock report; and routes shaped like the runner's
// hooks, under their prefix (edge/selfcheck imports edge, so the real
// hooks cannot be mounted from here).
func openAPIEnv(t *testing.T) (*env, *fakeTakeover, *fakeTimelineStores) {
	tk := &fakeTakeover{}
	id := "ord-1"
	declined := "card declined"
	tl := &fakeTimelineStores{
		events: map[string][]eventstore.Envelope{id: {
			{EventID: order.EventID(id, 1), OrderID: id, EventType: order.TypeOrderStarted, Version: 1, SourceCommandID: "start-1",
				CreatedAtUnixMs: 1000, FenceGeneration: 1, FenceEpoch: 1},
			{EventID: order.EventID(id, 2), OrderID: id, EventType: order.TypePaymentFailed, Version: 2, SourceCommandID: "continue-1",
				CreatedAtUnixMs: 1100, FenceGeneration: 2, FenceEpoch: 1},
		}},
		history: map[string][]location.OwnershipEvent{
			id:         {{Kind: location.OwnershipActivated, Member: "m-a", Generation: 1, AtUnixMs: 999}, {Kind: location.OwnershipTakenOver, Member: "m-a", Generation: 2, AtUnixMs: 1050}},
			"ord-gone": {{Kind: location.OwnershipActivated, Member: "m-a", Generation: 1, AtUnixMs: 5}},
		},
		records: map[string]location.Record{id: {Status: location.Ready, Owner: "m-b", Generation: 2}},
		names:   map[string]string{"m-a": "workflow-a", "m-b": "workflow-b"},
		ops: map[string][]relocation.Operation{id: {{ID: "tk-1", OrderID: id, Kind: relocation.KindTakeover, Source: "workflow-a",
			Generation: 1, NewGeneration: 2, Member: "m-a", Caller: "ops", State: relocation.OpCommitted, StartedAtUnixMs: 1050, UpdatedAtUnixMs: 1051}}},
		rsv: map[string]commerce.ReservationRecord{},
		pay: map[string]commerce.AuthorizationRecord{order.PaymentID(id): {PaymentID: order.PaymentID(id),
			Result: &contracts.AuthorizePaymentRes{Reason: &declined}, Calls: 1}},
	}
	e, _ := stuckEnv(t, func(c *Config) {
		c.Takeover = tk
		c.Timeline = &Timeline{Events: tl, Ownership: tl, Operations: tl, Inventory: tl, Payment: tl,
			Now: func() time.Time { return time.UnixMilli(5000) }}
		c.Terminal = neverWakes{}
		c.Mounts = append(c.Mounts, StockAdmin{Ledger: fakeLedger{}}, SchemaAdmin{Control: fakeSchema{}}, hookRoutes{})
	})
	return e, tk, tl
}

func TestOpenAPIDocumentsEveryRouteOfBothListeners(t *testing.T) {
	doc := loadOpenAPI(t)
	e, _, _ := openAPIEnv(t)

	documented := map[string]map[string]bool{listenerPublic: {}, listenerAdmin: {}}
	for path, pi := range doc.Paths.Map() {
		l := listenerOf(pi)
		require.Contains(t, documented, l, "%s: x-listener must be public or admin", path)
		for method, op := range pi.Operations() {
			documented[l][method+" "+path] = true
			require.Equal(t, []string{l}, op.Tags, "%s %s: tagged with its listener", method, path)
			// The admin listener authenticates every request; the public
			// one none.
			admin := op.Security != nil && len(*op.Security) == 1 && (*op.Security)[0]["adminBearer"] != nil
			require.Equal(t, l == listenerAdmin, admin, "%s %s: security follows the listener", method, path)
		}
	}

	routes := map[string]gin.RoutesInfo{listenerPublic: e.srv.engine.Routes(), listenerAdmin: e.srv.admin.Routes()}
	for _, l := range []string{listenerPublic, listenerAdmin} {
		served := map[string]bool{}
		left := map[string]int{}
		for _, rt := range routes[l] {
			if i := slices.IndexFunc(undocumented[l], func(u leftOut) bool { return strings.HasPrefix(rt.Path, u.prefix) }); i >= 0 {
				left[undocumented[l][i].prefix]++
				continue
			}
			served[rt.Method+" "+openAPIPath(rt.Path)] = true
		}
		require.Equal(t, sortedKeys(documented[l]), sortedKeys(served),
			"the %s listener's routes and the document's %s paths differ: document a new route in openapi.yaml, or list it in undocumented with the reason", l, l)
		t.Logf("%s listener: %d routes, all in the document", l, len(served))
		for _, u := range undocumented[l] {
			require.NotZero(t, left[u.prefix], "undocumented %s matches no %s route any more", u.prefix, l)
			t.Logf("%s listener: %d routes under %s left out: %s", l, left[u.prefix], u.prefix, u.why)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// goldenDir is the contract's hand-written JSON, one file per message
// (actors/contracts/golden_test.go).
const goldenDir = "../actors/contracts/testdata"

func TestOpenAPISchemasAcceptTheContractsGoldenJSON(t *testing.T) {
	doc := loadOpenAPI(t)
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	require.NoError(t, err)
	checked := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		ref := doc.Components.Schemas[name]
		if ref == nil {
			continue // a message the HTTP API does not carry
		}
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var v any
		require.NoError(t, json.Unmarshal(raw, &v), name)
		require.NoError(t, ref.Value.VisitJSON(v), "golden %s.json does not validate against the document's %s", name, name)
		checked[name] = true
	}
	require.Equal(t, []string{
		"ContinueOrderWorkflowReq", "ContinueOrderWorkflowRes", "GetOrderStateRes", "OrderState",
		"RebuildOrderProjectionReq", "RebuildOrderProjectionRes", "StartOrderReq", "StartOrderRes",
	}, sortedKeys(checked), "every public body has its golden file checked")

	// The schemas bite: the drifts a reply could make are refused.
	state := func(edit func(map[string]any)) map[string]any {
		s := map[string]any{"orderId": "o", "status": "Created", "updatedAtUnixMs": 1.0}
		edit(s)
		return s
	}
	schema := doc.Components.Schemas["OrderState"].Value
	for name, bad := range map[string]map[string]any{
		"an unknown field":      state(func(s map[string]any) { s["ownerNode"] = "workflow-a" }),
		"status missing":        state(func(s map[string]any) { delete(s, "status") }),
		"an unnamed status":     state(func(s map[string]any) { s["status"] = "ORDER_STATUS_UNSPECIFIED" }),
		"int64 as a string":     state(func(s map[string]any) { s["updatedAtUnixMs"] = "1" }),
		"an optional as null":   state(func(s map[string]any) { s["amount"] = nil }),
		"a fractional integer":  state(func(s map[string]any) { s["amount"] = 1.5 }),
		"updatedAtUnixMs gone":  state(func(s map[string]any) { delete(s, "updatedAtUnixMs") }),
		"orderId as a number":   state(func(s map[string]any) { s["orderId"] = 1.0 }),
		"currency as an object": state(func(s map[string]any) { s["currency"] = map[string]any{} }),
	} {
		require.Error(t, schema.VisitJSON(bad), name)
	}
}

// The contract schemas are the proto messages as actors/contracts writes
// them: the same fields, integers as integers, enums by name, and in a
// reply every field the codec always writes required (a non-optional
// scalar or enum, and the nested messages the edge always sets).
func TestOpenAPIContractSchemasMatchTheProtoMessages(t *testing.T) {
	doc := loadOpenAPI(t)
	var checked []string
	for name, ref := range doc.Components.Schemas {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("shoppingmall.contracts.v1." + name))
		if err != nil {
			continue
		}
		md, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			if ed, ok := d.(protoreflect.EnumDescriptor); ok {
				require.ElementsMatch(t, enumNames(ed), ref.Value.Enum, "schema %s", name)
				checked = append(checked, name)
			}
			continue
		}
		checked = append(checked, name)
		s := ref.Value
		require.NotNil(t, s.AdditionalProperties.Has, name)
		require.False(t, *s.AdditionalProperties.Has, "%s: the codec refuses and never writes unknown fields", name)
		var fields, always []string
		fds := md.Fields()
		for i := range fds.Len() {
			fd := fds.Get(i)
			fields = append(fields, string(fd.Name()))
			if !fd.HasPresence() || fd.Kind() == protoreflect.MessageKind {
				always = append(always, string(fd.Name()))
			}
			prop := s.Properties[string(fd.Name())]
			require.NotNil(t, prop, "%s.%s is not in the document", name, fd.Name())
			requireFieldSchema(t, name+"."+string(fd.Name()), fd, prop)
		}
		require.ElementsMatch(t, fields, keys(s.Properties), "%s: the properties are the message's fields", name)
		if !strings.HasSuffix(name, "Req") {
			require.ElementsMatch(t, always, s.Required, "%s: a reply requires what the codec always writes", name)
		} else {
			require.Subset(t, fields, s.Required, name)
		}
	}
	sort.Strings(checked)
	require.Equal(t, []string{
		"CloseOrderReq", "CloseOrderRes", "ContinueOrderWorkflowReq", "ContinueOrderWorkflowRes", "GetOrderStateRes",
		"OrderState", "OrderStatus", "RebuildOrderProjectionReq", "RebuildOrderProjectionRes", "RelocateOrderReq",
		"RelocateOrderRes", "StartOrderReq", "StartOrderRes",
	}, checked)
}

func enumNames(ed protoreflect.EnumDescriptor) []any {
	var out []any
	for i := range ed.Values().Len() {
		if v := ed.Values().Get(i); v.Number() != 0 {
			out = append(out, string(v.Name()))
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func requireFieldSchema(t *testing.T, at string, fd protoreflect.FieldDescriptor, ref *openapi3.SchemaRef) {
	t.Helper()
	s := ref.Value
	if fd.IsList() {
		require.True(t, s.Type.Is("array"), "%s is an array", at)
		ref, s = s.Items, s.Items.Value
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		require.True(t, s.Type.Is("string"), "%s is a string", at)
	case protoreflect.BoolKind:
		require.True(t, s.Type.Is("boolean"), "%s is a boolean", at)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		require.True(t, s.Type.Is("integer"), "%s is an integer", at)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		require.True(t, s.Type.Is("integer") && s.Format == "int64", "%s is an int64 JSON number", at)
	case protoreflect.EnumKind:
		require.Equal(t, "#/components/schemas/"+string(fd.Enum().Name()), ref.Ref, "%s is its enum", at)
	case protoreflect.MessageKind:
		require.Equal(t, "#/components/schemas/"+string(fd.Message().Name()), ref.Ref, "%s is its message", at)
	default:
		t.Fatalf("%s: the contract uses no %s field; say here how the document writes it", at, fd.Kind())
	}
}

// The edge's own replies are Go structs written by encoding/json: their
// schemas have the structs' JSON names, and require exactly the fields
// without omitempty.
func TestOpenAPIReplySchemasMatchTheGoTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Error":              apiError{},
		"Problem":            problem{},
		"StuckReport":        StuckReport{},
		"StuckEntry":         StuckEntry{},
		"StuckOwner":         StuckOwner{},
		"ResumeOutcome":      ResumeOutcome{},
		"TakeoverOptions":    takeoverBody{},
		"TakeoverReply":      TakeoverReply{},
		"TakenOverOrder":     TakenOverOrder{},
		"TakeoverFailure":    TakeoverFailure{},
		"TimelineReply":      TimelineReply{},
		"TimelineAuthority":  TimelineAuthority{},
		"TimelineEntry":      TimelineEntry{},
		"StockReply":         StockReply{},
		"StockMovement":      StockMovement{},
		"SchemaLevel":        location.SchemaLevel{},
		"SchemaMember":       compat.Member{},
		"SchemaReport":       compat.Report{},
		"SchemaRaiseRequest": SchemaRaiseRequest{},
		"SchemaRaiseReply":   SchemaRaiseReply{},
	} {
		ref := doc.Components.Schemas[name]
		require.NotNil(t, ref, name)
		var names, required []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			tag, ok := f.Tag.Lookup("json")
			if !f.IsExported() || !ok || tag == "-" {
				continue
			}
			n, opts, _ := strings.Cut(tag, ",")
			names = append(names, n)
			if !slices.Contains(strings.Split(opts, ","), "omitempty") {
				required = append(required, n)
			}
		}
		s := ref.Value
		require.ElementsMatch(t, names, keys(s.Properties), "%s: the properties are %s's JSON fields", name, rt.Name())
		require.ElementsMatch(t, required, s.Required, "%s: required are %s's fields without omitempty", name, rt.Name())
		require.False(t, *s.AdditionalProperties.Has, name)
	}
}

// errorResponses is the one response component each error status uses,
// on every operation that has it.
var errorResponses = map[int]string{
	400: "BadRequest", 401: "Unauthenticated", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
	413: "PayloadTooLarge", 422: "KeyReused", 500: "Internal", 503: "Unavailable", 504: "Timeout",
}

// Every error httpError can answer, for every kind of error, is
// documented, with its body, reason and Retry-After as the document
// says.
func TestOpenAPIDocumentsEveryErrorReply(t *testing.T) {
	doc := loadOpenAPI(t)
	for path, pi := range doc.Paths.Map() {
		for method, op := range pi.Operations() {
			for code, rr := range op.Responses.Map() {
				var status int
				_, err := fmt.Sscan(code, &status)
				require.NoError(t, err, "%s %s: response %q", method, path, code)
				if status < 400 {
					continue
				}
				require.Contains(t, errorResponses, status, "%s %s %d", method, path, status)
				require.Equal(t, "#/components/responses/"+errorResponses[status], rr.Ref, "%s %s %d", method, path, status)
			}
			require.Equal(t, listenerOf(pi) == listenerAdmin, op.Responses.Status(401) != nil, "%s %s: 401 exactly on the admin listener", method, path)
			require.Equal(t, listenerOf(pi) == listenerPublic, op.Responses.Status(405) != nil, "%s %s: 405 on the public listener", method, path)
			require.NotNil(t, op.Responses.Status(500), "%s %s: every route may fail", method, path)
		}
	}

	e := newEnv(t, withAdmin())
	c := newConformance(t, doc, e)
	errs := []error{nil, ErrUnauthenticated, ErrPayloadTooLarge, invalidField("cartId", "no such cart"), errNoRoute, errUnknownSKU,
		ErrNotFound, ErrFailedPrecondition, ErrIdempotencyKeyReused, ErrOverloaded, ErrInvalidArgument,
		context.DeadlineExceeded, context.Canceled, errors.New("anything else")}
	for _, k := range errkind.All() {
		errs = append(errs, fmt.Errorf("wrapped: %w", errkind.New(k, "a "+k.String())))
	}
	for _, err := range errs {
		status, body := httpError(err)
		// POST /orders documents every status but 401, which only the
		// admin listener answers.
		req := httptest.NewRequest(http.MethodPost, "/orders", nil)
		if status == http.StatusUnauthorized {
			req = httptest.NewRequest(http.MethodPost, "/admin/orders/ord-1/close", nil)
		}
		w := httptest.NewRecorder()
		// The middleware's headers: every reply has a request id, a 401
		// its challenge.
		w.Header().Set(HeaderRequestID, "req-1")
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shoppingmall-admin"`)
		}
		e.srv.writeError(w, status, body)
		c.validateResponse(req, w, "error %v", err)
	}
}

// conformance drives requests through the real router and validates each
// request and reply against the document with openapi3filter.
type conformance struct {
	t      *testing.T
	doc    *openapi3.T
	e      *env
	router routers.Router
	opts   *openapi3filter.Options
	// ok holds every operation that answered a validated 2xx.
	ok map[string]bool
}

func newConformance(t *testing.T, doc *openapi3.T, e *env) *conformance {
	t.Helper()
	// Route on the path alone: the server URL is an example, and the two
	// listeners have different addresses.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &conformance{t: t, doc: doc, e: e, router: router, ok: map[string]bool{},
		opts: &openapi3filter.Options{
			// A status the operation does not document is a failure, not
			// a pass.
			IncludeResponseStatus: true,
			MultiError:            true,
			AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
				if in.SecuritySchemeName != "adminBearer" {
					return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
				}
				if in.RequestValidationInput.Request.Header.Get("Authorization") != "Bearer "+testAdminToken {
					return errors.New("no admin bearer token")
				}
				return nil
			},
		}}
}

// apiRequest is one request of a conformance run.
type apiRequest struct {
	listener       string
	method, target string
	body           string
	header         []string // name, value, ...
}

func pub(method, target, body string, header ...string) apiRequest {
	return apiRequest{listenerPublic, method, target, body, header}
}

// adm is an admin request with the token.
func adm(method, target, body string, header ...string) apiRequest {
	return apiRequest{listenerAdmin, method, target, body, append([]string{"Authorization", "Bearer " + testAdminToken}, header...)}
}

func (r apiRequest) build() *http.Request {
	var b io.Reader
	if r.body != "" {
		b = strings.NewReader(r.body)
	}
	req := httptest.NewRequest(r.method, r.target, b)
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(r.header); i += 2 {
		req.Header.Set(r.header[i], r.header[i+1])
	}
	return req
}

// valid sends r, which the document must accept, and checks its reply.
func (c *conformance) valid(r apiRequest, want int) *httptest.ResponseRecorder {
	c.t.Helper()
	w, err := c.send(r, want)
	require.NoError(c.t, err, "%s %s: the document refuses a request the server takes as meant", r.method, r.target)
	return w
}

// refused sends r, which the document must refuse as the server does.
func (c *conformance) refused(r apiRequest, want int) *httptest.ResponseRecorder {
	c.t.Helper()
	w, err := c.send(r, want)
	require.Error(c.t, err, "%s %s: the document accepts a request the server refuses", r.method, r.target)
	return w
}

func (c *conformance) send(r apiRequest, want int) (*httptest.ResponseRecorder, error) {
	c.t.Helper()
	h := http.Handler(c.e.srv)
	if r.listener == listenerAdmin {
		h = c.e.srv.AdminHandler()
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.build())
	require.Equal(c.t, want, w.Code, "%s %s: %s", r.method, r.target, w.Body.String())

	req := r.build()
	in := c.validateResponse(req, w, "%s %s", r.method, r.target)
	require.Equal(c.t, r.listener, listenerOf(in.Route.PathItem), "%s %s is documented on its listener", r.method, r.target)
	if w.Code/100 == 2 {
		c.ok[in.Route.Method+" "+in.Route.Path] = true
	}
	return w, openapi3filter.ValidateRequest(context.Background(), in)
}

// validateResponse checks w as the reply to req; it returns the request's
// validation input, its body still unread.
func (c *conformance) validateResponse(req *http.Request, w *httptest.ResponseRecorder, msg string, args ...any) *openapi3filter.RequestValidationInput {
	c.t.Helper()
	at := fmt.Sprintf(msg, args...)
	route, params, err := c.router.FindRoute(req)
	require.NoError(c.t, err, at)
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: c.opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: w.Code, Header: w.Header(),
		Body: io.NopCloser(bytes.NewReader(w.Body.Bytes())), Options: c.opts}
	require.NoError(c.t, openapi3filter.ValidateResponse(context.Background(), out),
		"%s: reply %d %s does not match the document", at, w.Code, w.Body.String())
	return in
}

func TestOpenAPIRealRepliesMatchTheDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	e, tk, tl := openAPIEnv(t)
	c := newConformance(t, doc, e)
	storeDown := fmt.Errorf("%w: down", errkind.New(errkind.StoreUnavailable, "store"))

	// --- the public listener ---
	c.valid(pub("GET", "/healthz", ""), 200)
	w := c.valid(pub("GET", "/readyz", "", HeaderRequestID, "probe-1"), 503)
	require.Equal(t, "probe-1", w.Header().Get(HeaderRequestID))
	require.Equal(t, ReasonStarting, decodeError(t, w).Reason)
	e.srv.listening.Store(true)
	c.valid(pub("GET", "/readyz", ""), 503) // no workflow member yet
	e.topo.n.Store(2)
	c.valid(pub("GET", "/readyz", ""), 200)

	start := startBody(cartOK, "addr-1", "pm-1", "key-1")
	w = c.valid(pub("POST", "/orders", start), 201)
	id := decodeMessage[contracts.StartOrderRes](t, w).GetOrderId()
	c.valid(pub("POST", "/orders", start), 200)
	c.valid(pub("POST", "/orders", startBody(cartOther, "addr-1", "pm-1", "key-1")), 422)
	c.valid(pub("POST", "/orders", startBody("cart-none", "addr-1", "pm-1", "key-2")), 400)
	// Without a key in the body the key may come in the Idempotency-Key
	// header, which the document cannot tie to the body: it accepts the
	// request, and the server's 400 is a documented reply.
	c.valid(pub("POST", "/orders", `{"cartId":"c","shippingAddressId":"a","paymentMethodId":"m"}`), 400)
	c.valid(pub("POST", "/orders", `{"cartId":"`+cartOK+`","shippingAddressId":"addr-1","paymentMethodId":"pm-1"}`, "Idempotency-Key", "key-h"), 201)
	c.refused(pub("POST", "/orders", `{"cartId":"c","shippingAddressId":"a","paymentMethodId":"m","idempotencyKey":"k","x":1}`), 400)
	c.refused(pub("POST", "/orders", startBody("a{b", "addr-1", "pm-1", "key-3")), 400)
	c.refused(pub("POST", "/orders", startBody(strings.Repeat("c", MaxBody), "addr-1", "pm-1", "key-4")), 413)

	e.rm.put(&contracts.OrderState{OrderId: id, Status: contracts.OrderStatus_Created, Amount: proto.Int64(4870), Currency: proto.String("EUR"), UpdatedAtUnixMs: 10})
	e.rm.put(&contracts.OrderState{OrderId: "ord-done", Status: contracts.OrderStatus_Failed, Reason: proto.String("card declined"), UpdatedAtUnixMs: 20})
	c.valid(pub("GET", "/orders/"+id, ""), 200)
	c.valid(pub("GET", "/orders/ord-unknown", ""), 404)
	w = c.valid(pub("GET", "/orders/"+id+"?waitFor=terminal&timeoutMs=0", ""), 200)
	require.Equal(t, WaitTimeout, w.Header().Get(HeaderWait))
	w = c.valid(pub("GET", "/orders/ord-done?waitFor=terminal&timeoutMs=1000", ""), 200)
	require.Equal(t, WaitReached, w.Header().Get(HeaderWait))
	c.refused(pub("GET", "/orders/"+id+"?timeoutMs=5&waitFor=now", ""), 400)
	c.refused(pub("GET", "/orders/"+id+"?waitFor=terminal&timeoutMs=30001", ""), 400)

	c.valid(pub("POST", "/orders/"+id+"/continue", ""), 200)
	c.valid(pub("POST", "/orders/"+id+"/continue", `{"sourceCommandId":"c-1"}`), 200)
	c.valid(pub("POST", "/orders/"+id+"/rebuild-projection", `{}`), 200)
	c.valid(pub("POST", "/orders/"+id+"/continue", `{"orderId":"ord-other"}`), 400)
	c.refused(pub("POST", "/orders/"+id+"/rebuild-projection", `{"force":true}`), 400)
	for _, fail := range []struct {
		err    error
		status int
		reason string
	}{
		{storeDown, 503, ReasonStoreUnavailable},
		{fmt.Errorf("%w: gone", errkind.New(errkind.OwnerGone, "owner")), 503, ReasonOwnerGone},
		{ErrOverloaded, 503, ReasonOverloaded},
		{context.DeadlineExceeded, 504, ReasonDeadlineExceeded},
		{fmt.Errorf("%w: refused", errkind.New(errkind.Conflict, "conflict")), 409, ""},
		{fmt.Errorf("%w: never started", errkind.New(errkind.NotFound, "order")), 404, ""},
	} {
		e.orders.err = fail.err
		w = c.valid(pub("POST", "/orders/"+id+"/continue", ""), fail.status)
		require.Equal(t, fail.reason, decodeError(t, w).Reason)
		require.Equal(t, fail.reason != "", w.Header().Get("Retry-After") != "", "Retry-After exactly on 503 and 504")
	}
	e.orders.err = nil

	// --- the admin listener ---
	w = c.refused(apiRequest{listenerAdmin, "POST", "/admin/orders/ord-1/close", "", nil}, 401)
	require.Contains(t, w.Header().Get("WWW-Authenticate"), "Bearer")
	c.refused(apiRequest{listenerAdmin, "GET", "/admin/orders/stuck", "", []string{"Authorization", "Bearer wrong"}}, 401)

	c.valid(adm("POST", "/admin/orders/ord-1/relocate", `{"targetNode":"workflow-b"}`), 200)
	c.valid(adm("POST", "/admin/orders/ord-1/close", ""), 200)
	c.valid(adm("POST", "/admin/orders/ord-1/close", `{"orderId":"ord-2"}`), 400)

	c.valid(adm("GET", "/admin/orders/stuck?olderThan=90s&limit=10", ""), 200)
	c.refused(adm("GET", "/admin/orders/stuck?limit=0", ""), 400)
	w = c.valid(adm("POST", "/admin/orders/stuck/resume?takeover=true", ""), 200)
	require.Contains(t, w.Body.String(), `"done":["takeover","continue"]`, "the resume took an order over")
	c.valid(adm("POST", "/admin/read-model/active-index/rebuild", ""), 200)

	c.valid(adm("POST", "/admin/orders/ord-1/takeover", ""), 200)
	c.valid(adm("POST", "/admin/orders/ord-1/takeover?dryRun=true&force=true&operationId=op-9&caller=alice", `{"operationId":"op-9"}`), 200)
	c.refused(adm("POST", "/admin/orders/ord-1/takeover?force=maybe", ""), 400)
	tk.results = []takeover.Result{{OrderID: "ord-7", OperationID: "op-1.ord-7", Member: "m-b", Node: "workflow-b",
		OldGeneration: 3, NewGeneration: 4, Outcome: takeover.TakenOver}}
	tk.errs = map[string]error{"ord-8": fmt.Errorf("%w: busy", errkind.New(errkind.Conflict, "conflict")), "ord-9": storeDown}
	w = c.valid(adm("POST", "/admin/members/workflow-b/takeover?operationId=op-1&scan=true", ""), 200)
	require.Contains(t, w.Body.String(), `"failed":[`)
	tk.err = fmt.Errorf("%w: live", errkind.New(errkind.FailedPrecondition, "live"))
	c.valid(adm("POST", "/admin/members/m-b/takeover", ""), 409)
	tk.err = nil

	e.rm.put(&contracts.OrderState{OrderId: "ord-1", Status: contracts.OrderStatus_Failed, Reason: proto.String("card declined"), UpdatedAtUnixMs: 1100})
	w = c.valid(adm("GET", "/admin/orders/ord-1/timeline", ""), 200)
	for _, kind := range []string{EntryEvent, EntryOwnership, EntryOperation, EntryEffect} {
		require.Contains(t, w.Body.String(), `"kind":"`+kind+`"`, "the timeline shows every kind of entry")
	}
	w = c.valid(adm("GET", "/admin/orders/ord-gone/timeline", ""), 200)
	require.Contains(t, w.Body.String(), `"state":null`)
	c.valid(adm("GET", "/admin/orders/ord-unknown/timeline", ""), 404)
	tl.err = storeDown
	c.valid(adm("GET", "/admin/orders/ord-1/timeline", ""), 503)
	tl.err = nil

	c.valid(adm("GET", "/admin/stock/sku-a?limit=1", ""), 200)
	c.valid(adm("GET", "/admin/stock/sku-a", ""), 200)
	c.valid(adm("GET", "/admin/stock/sku-none", ""), 404)
	c.refused(adm("GET", "/admin/stock/sku-a?limit=201", ""), 400)

	c.valid(adm("GET", "/admin/schema", ""), 200)
	c.valid(adm("POST", "/admin/schema/raise", `{"to":2,"by":"alice"}`), 200)
	c.valid(adm("POST", "/admin/schema/raise", `{"to":3}`), 409)
	c.valid(adm("POST", "/admin/schema/raise", `{"to":9}`), 503)
	c.refused(adm("POST", "/admin/schema/raise", `{"to":0}`), 400)

	var all []string
	for path, pi := range doc.Paths.Map() {
		for method := range pi.Operations() {
			all = append(all, method+" "+path)
		}
	}
	sort.Strings(all)
	require.Equal(t, all, sortedKeys(c.ok), "every documented operation answered a validated 2xx here")
}
