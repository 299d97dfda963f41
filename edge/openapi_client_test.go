package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/edge/apiclient"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// The client oapi-codegen generates from openapi.yaml (edge/apiclient)
// and the hand-written runner/client agree: against the real router,
// each call sends the same contract message to the same method and path,
// and reads the same status, state, problem details and wait outcome.

// The generated client is the document's: every public operation is one
// of its calls, and its models have the document's fields. Changing
// openapi.yaml without `go generate ./edge/apiclient/` fails here.
func TestGeneratedClientIsTheDocuments(t *testing.T) {
	doc := loadOpenAPI(t)
	calls := reflect.TypeFor[apiclient.ClientInterface]()
	var want []string
	for _, pi := range doc.Paths.Map() {
		if listenerOf(pi) != listenerPublic {
			continue
		}
		for _, op := range pi.Operations() {
			name := strings.ToUpper(op.OperationID[:1]) + op.OperationID[1:]
			want = append(want, name)
			_, ok := calls.MethodByName(name)
			require.True(t, ok, "the generated client has no %s: run go generate ./edge/apiclient/", name)
		}
	}
	var got []string
	for i := range calls.NumMethod() {
		if m := calls.Method(i).Name; !strings.HasSuffix(m, "WithBody") {
			got = append(got, m)
		}
	}
	require.ElementsMatch(t, want, got, "the generated client's calls are the public operations: run go generate ./edge/apiclient/")

	for name, v := range map[string]any{
		"OrderState": apiclient.OrderState{}, "StartOrderReq": apiclient.StartOrderReq{}, "StartOrderRes": apiclient.StartOrderRes{},
		"GetOrderStateRes": apiclient.GetOrderStateRes{}, "ContinueOrderWorkflowReq": apiclient.ContinueOrderWorkflowReq{},
		"ContinueOrderWorkflowRes": apiclient.ContinueOrderWorkflowRes{}, "RebuildOrderProjectionReq": apiclient.RebuildOrderProjectionReq{},
		"RebuildOrderProjectionRes": apiclient.RebuildOrderProjectionRes{}, "Problem": apiclient.Problem{}, "Health": apiclient.Health{},
		"Ready": apiclient.Ready{},
	} {
		s := doc.Components.Schemas[name].Value
		var names, required []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			n, opts, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			names = append(names, n)
			if opts != "omitempty" {
				required = append(required, n)
			}
		}
		require.ElementsMatch(t, keys(s.Properties), names, "apiclient.%s is not the document's: run go generate ./edge/apiclient/", name)
		require.ElementsMatch(t, s.Required, required, "apiclient.%s is not the document's: run go generate ./edge/apiclient/", name)
	}
}

// seen is one request the API received.
type seen struct {
	method, path, query, contentType string
	body                             []byte
}

// recorder serves h and keeps every request it saw.
type recorder struct {
	h    http.Handler
	mu   sync.Mutex
	reqs []seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), b})
	rec.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	rec.h.ServeHTTP(w, r)
}

func (rec *recorder) last() seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.reqs[len(rec.reqs)-1]
}

// asState reads a generated state as the contract message: what the
// generated client decoded is what the contract codec reads.
func asState(t *testing.T, s apiclient.OrderState) *contracts.OrderState {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	m := &contracts.OrderState{}
	require.NoError(t, contracts.UnmarshalJSON(b, m), "%s", b)
	return m
}

// sameRequest: both clients sent the same contract message (read with the
// contract codec, so an empty sourceCommandId and none are the same) to
// the same method, path and query.
func sameRequest[M proto.Message](t *testing.T, hand, gen seen, msg func() M) {
	t.Helper()
	require.Equal(t, hand.method+" "+hand.path, gen.method+" "+gen.path)
	hq, err := url.ParseQuery(hand.query)
	require.NoError(t, err)
	gq, err := url.ParseQuery(gen.query)
	require.NoError(t, err)
	require.Equal(t, hq, gq, "the same query")
	require.Equal(t, hand.contentType, gen.contentType)
	if len(hand.body) == 0 && len(gen.body) == 0 {
		return
	}
	h, g := msg(), msg()
	require.NoError(t, contracts.UnmarshalJSON(hand.body, h))
	require.NoError(t, contracts.UnmarshalJSON(gen.body, g))
	require.True(t, proto.Equal(h, g), "hand-written sent %s, generated %s", hand.body, gen.body)
}

func TestGeneratedClientAgreesWithTheRunnerClient(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Terminal = neverWakes{} })
	rec := &recorder{h: e.srv}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	hand := &client.API{BaseURL: srv.URL, HTTP: srv.Client()}
	gen, err := apiclient.NewClientWithResponses(srv.URL, apiclient.WithHTTPClient(srv.Client()))
	require.NoError(t, err)

	// Starts: each client starts one order and replays the other's.
	var ids []string
	for i, handFirst := range []bool{true, false} {
		key := fmt.Sprintf("key-%d", i)
		req := &contracts.StartOrderReq{CartId: cartOK, ShippingAddressId: "addr-1", PaymentMethodId: "pm-1", IdempotencyKey: key}
		greq := apiclient.StartOrderReq{CartId: cartOK, ShippingAddressId: "addr-1", PaymentMethodId: "pm-1", IdempotencyKey: &key}
		var (
			hres         *contracts.StartOrderRes
			hrep         client.Reply
			gres         *apiclient.StartOrderResponse
			hreq, genreq seen
		)
		callHand := func() {
			hres, hrep, err = hand.StartOrder(ctx, req)
			require.NoError(t, err)
			hreq = rec.last()
		}
		callGen := func() {
			gres, err = gen.StartOrderWithResponse(ctx, &apiclient.StartOrderParams{}, greq)
			require.NoError(t, err)
			genreq = rec.last()
		}
		if handFirst {
			callHand()
			callGen()
			require.Equal(t, []int{201, 200}, []int{hrep.Status, gres.StatusCode()})
			require.NotNil(t, gres.JSON200)
			require.Equal(t, hres.GetOrderId(), gres.JSON200.OrderId)
			require.True(t, proto.Equal(hres.GetState(), asState(t, gres.JSON200.State)))
		} else {
			callGen()
			callHand()
			require.Equal(t, []int{201, 200}, []int{gres.StatusCode(), hrep.Status})
			require.NotNil(t, gres.JSON201)
			require.Equal(t, hres.GetOrderId(), gres.JSON201.OrderId)
			require.True(t, proto.Equal(hres.GetState(), asState(t, gres.JSON201.State)))
		}
		sameRequest(t, hreq, genreq, func() *contracts.StartOrderReq { return &contracts.StartOrderReq{} })
		ids = append(ids, hres.GetOrderId())
	}
	id := ids[0]

	// Reads and waits.
	e.rm.put(&contracts.OrderState{OrderId: id, Status: contracts.OrderStatus_InventoryReserved, ReservationId: proto.String("rsv-" + id),
		Amount: proto.Int64(4870), Currency: proto.String("EUR"), UpdatedAtUnixMs: 30})
	e.rm.put(&contracts.OrderState{OrderId: ids[1], Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 40})
	for _, oid := range ids {
		hst, _, err := hand.GetOrder(ctx, oid)
		require.NoError(t, err)
		hreq := rec.last()
		gres, err := gen.GetOrderWithResponse(ctx, oid, &apiclient.GetOrderParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, gres.StatusCode())
		require.True(t, proto.Equal(hst, asState(t, gres.JSON200.State)))
		sameRequest(t, hreq, rec.last(), func() *contracts.GetOrderStateReq { return nil })

		hst, terminal, _, err := hand.WaitTerminal(ctx, oid, 0)
		require.NoError(t, err)
		hreq = rec.last()
		wait, zero := apiclient.Terminal, 0
		gres, err = gen.GetOrderWithResponse(ctx, oid, &apiclient.GetOrderParams{WaitFor: &wait, TimeoutMs: &zero})
		require.NoError(t, err)
		require.True(t, proto.Equal(hst, asState(t, gres.JSON200.State)))
		require.Equal(t, terminal, *gres.Headers200.XWait == client.WaitReached, "both read the wait's outcome alike")
		sameRequest(t, hreq, rec.last(), func() *contracts.GetOrderStateReq { return nil })
	}

	// Commands.
	hst, _, err := hand.Continue(ctx, id)
	require.NoError(t, err)
	hreq := rec.last()
	cres, err := gen.ContinueOrderWithResponse(ctx, id, &apiclient.ContinueOrderParams{}, apiclient.ContinueOrderWorkflowReq{OrderId: &id})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cres.StatusCode())
	require.True(t, proto.Equal(hst, asState(t, cres.JSON200.State)))
	sameRequest(t, hreq, rec.last(), func() *contracts.ContinueOrderWorkflowReq { return &contracts.ContinueOrderWorkflowReq{} })

	hst, _, err = hand.Rebuild(ctx, id)
	require.NoError(t, err)
	hreq = rec.last()
	rres, err := gen.RebuildProjectionWithResponse(ctx, id, &apiclient.RebuildProjectionParams{}, apiclient.RebuildOrderProjectionReq{OrderId: &id})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, rres.StatusCode())
	require.True(t, proto.Equal(hst, asState(t, rres.JSON200.State)))
	sameRequest(t, hreq, rec.last(), func() *contracts.RebuildOrderProjectionReq { return &contracts.RebuildOrderProjectionReq{} })

	// Errors: the same problem details, read by both.
	type envelope struct{ contentType, typ, title, detail, code, field, reason, retryAfter string }
	handErr := func(rep client.Reply) envelope {
		require.NotNil(t, rep.Error, rep.String())
		require.Equal(t, rep.Status, rep.Error.Status)
		return envelope{rep.Header.Get("Content-Type"), rep.Error.Type, rep.Error.Title, rep.Error.Detail, rep.Error.Code,
			rep.Error.Field, rep.Error.Reason, rep.Header.Get("Retry-After")}
	}
	genErr := func(r *http.Response, body []byte) envelope {
		// Each status has its own generated type; the generic Problem
		// reads every one of them.
		var b apiclient.Problem
		require.NoError(t, json.Unmarshal(body, &b), "%s", body)
		require.Equal(t, r.StatusCode, b.Status)
		out := envelope{contentType: r.Header.Get("Content-Type"), typ: b.Type, title: b.Title, detail: b.Detail,
			code: string(b.Code), retryAfter: r.Header.Get("Retry-After")}
		if b.Field != nil {
			out.field = *b.Field
		}
		if b.Reason != nil {
			out.reason = string(*b.Reason)
		}
		return out
	}

	_, hrep, err := hand.GetOrder(ctx, "ord-unknown")
	require.NoError(t, err)
	gres, err := gen.GetOrderWithResponse(ctx, "ord-unknown", &apiclient.GetOrderParams{})
	require.NoError(t, err)
	require.NotNil(t, gres.ApplicationproblemJSON404)
	require.Equal(t, handErr(hrep), genErr(gres.HTTPResponse, gres.Body))
	require.Equal(t, CodeNotFound, string(gres.ApplicationproblemJSON404.Code))

	reused := &contracts.StartOrderReq{CartId: cartOther, ShippingAddressId: "addr-1", PaymentMethodId: "pm-1", IdempotencyKey: "key-0"}
	_, hrep, err = hand.StartOrder(ctx, reused)
	require.NoError(t, err)
	sres, err := gen.StartOrderWithResponse(ctx, &apiclient.StartOrderParams{}, apiclient.StartOrderReq{CartId: cartOther,
		ShippingAddressId: "addr-1", PaymentMethodId: "pm-1", IdempotencyKey: &reused.IdempotencyKey})
	require.NoError(t, err)
	require.NotNil(t, sres.ApplicationproblemJSON422)
	require.Equal(t, handErr(hrep), genErr(sres.HTTPResponse, sres.Body))

	unknownCart := &contracts.StartOrderReq{CartId: "cart-none", ShippingAddressId: "addr-1", PaymentMethodId: "pm-1", IdempotencyKey: "key-9"}
	_, hrep, err = hand.StartOrder(ctx, unknownCart)
	require.NoError(t, err)
	sres, err = gen.StartOrderWithResponse(ctx, &apiclient.StartOrderParams{}, apiclient.StartOrderReq{CartId: "cart-none",
		ShippingAddressId: "addr-1", PaymentMethodId: "pm-1", IdempotencyKey: &unknownCart.IdempotencyKey})
	require.NoError(t, err)
	require.NotNil(t, sres.ApplicationproblemJSON400)
	require.Equal(t, handErr(hrep), genErr(sres.HTTPResponse, sres.Body))
	require.Equal(t, "cartId", *sres.ApplicationproblemJSON400.Field)

	for _, fail := range []error{
		fmt.Errorf("%w: gone", errkind.New(errkind.OwnerGone, "owner")),
		context.DeadlineExceeded,
		fmt.Errorf("%w: refused", errkind.New(errkind.Conflict, "conflict")),
	} {
		e.orders.err = fail
		_, hrep, err := hand.Continue(ctx, id)
		require.NoError(t, err)
		cres, err := gen.ContinueOrderWithResponse(ctx, id, &apiclient.ContinueOrderParams{}, apiclient.ContinueOrderWorkflowReq{})
		require.NoError(t, err)
		require.Equal(t, hrep.Status, cres.StatusCode())
		require.Equal(t, handErr(hrep), genErr(cres.HTTPResponse, cres.Body))
		typed := map[int]bool{503: cres.ApplicationproblemJSON503 != nil, 504: cres.ApplicationproblemJSON504 != nil, 409: cres.ApplicationproblemJSON409 != nil}
		require.True(t, typed[cres.StatusCode()], "the generated client reads a %d into its own type", cres.StatusCode())
	}
	e.orders.err = nil

}
