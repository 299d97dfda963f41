package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// recorded is one request a fake API received.
type recorded struct {
	method, path, body string
}

func fakeAPI(t *testing.T, status int, body string) (*client.API, *[]recorded) {
	t.Helper()
	var got []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, recorded{r.Method, r.URL.EscapedPath(), string(b)})
		if status >= 400 {
			w.Header().Set("Content-Type", client.ContentTypeProblem)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return &client.API{BaseURL: srv.URL, HTTP: srv.Client()}, &got
}

func TestStartOrderUsesTheContractCodec(t *testing.T) {
	api, got := fakeAPI(t, http.StatusCreated,
		`{"orderId":"ord-1","state":{"orderId":"ord-1","status":"Created","amount":4870,"currency":"EUR","updatedAtUnixMs":1}}`)
	res, rep, err := api.StartOrder(context.Background(), &contracts.StartOrderReq{
		CartId: "c", ShippingAddressId: "a", PaymentMethodId: "m", IdempotencyKey: "k",
	})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, rep.Status)
	assert.Equal(t, "ord-1", res.GetOrderId())
	assert.Equal(t, contracts.OrderStatus_Created, res.GetState().GetStatus())
	assert.Equal(t, int64(4870), res.GetState().GetAmount())
	require.Len(t, *got, 1)
	assert.Equal(t, recorded{"POST", "/orders", `{"cartId":"c","shippingAddressId":"a","paymentMethodId":"m","idempotencyKey":"k"}`}, (*got)[0])
}

func TestContinueAndRebuildSendTheOrderWithAnEmptySourceCommand(t *testing.T) {
	api, got := fakeAPI(t, http.StatusOK, `{"state":{"orderId":"o/1","status":"Confirmed","updatedAtUnixMs":1}}`)
	st, _, err := api.Continue(context.Background(), "o/1")
	require.NoError(t, err)
	assert.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
	_, _, err = api.Rebuild(context.Background(), "o/1")
	require.NoError(t, err)
	require.Len(t, *got, 2)
	assert.Equal(t, recorded{"POST", "/orders/o%2F1/continue", `{"orderId":"o/1","sourceCommandId":""}`}, (*got)[0])
	assert.Equal(t, recorded{"POST", "/orders/o%2F1/rebuild-projection", `{"orderId":"o/1","sourceCommandId":""}`}, (*got)[1])
}

func TestErrorEnvelopeIsDecoded(t *testing.T) {
	api, _ := fakeAPI(t, http.StatusServiceUnavailable, `{"type":"urn:shoppingmall:problem:UNAVAILABLE","title":"Unavailable","status":503,"detail":"owner gone","code":"UNAVAILABLE","reason":"OWNER_GONE"}`)
	st, rep, err := api.Continue(context.Background(), "ord-1")
	require.NoError(t, err, "an error status is an answer, not a transport failure")
	assert.Nil(t, st)
	assert.False(t, rep.OK())
	assert.Equal(t, http.StatusServiceUnavailable, rep.Status)
	require.NotNil(t, rep.Error)
	assert.Equal(t, "UNAVAILABLE", rep.Error.Code)
	assert.Equal(t, "OWNER_GONE", rep.Error.Reason)
	assert.Equal(t, client.ProblemTypePrefix+"UNAVAILABLE", rep.Error.Type)
	assert.Equal(t, 503, rep.Error.Status)
	assert.Equal(t, "owner gone", rep.Error.Detail)
	assert.Contains(t, rep.String(), "503 UNAVAILABLE (OWNER_GONE): owner gone")
}

func TestBodiesOutsideTheContractAreProtocolErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		body   string
	}{
		"unknown field":           {200, `{"state":{"orderId":"o","status":"Confirmed","updatedAtUnixMs":1,"ownerNode":"workflow-a"}}`},
		"status missing":          {200, `{"state":{"orderId":"o","updatedAtUnixMs":1}}`},
		"error without code":      {404, `{"type":"urn:shoppingmall:problem:NOT_FOUND","title":"Not found","status":404,"detail":"x"}`},
		"error without type":      {404, `{"title":"Not found","status":404,"detail":"x","code":"NOT_FOUND"}`},
		"error of another status": {404, `{"type":"urn:shoppingmall:problem:NOT_FOUND","title":"Not found","status":400,"detail":"x","code":"NOT_FOUND"}`},
		"old error envelope":      {404, `{"error":{"code":"NOT_FOUND","message":"x"}}`},
		"error not json":          {500, `<html>`},
		"trailing after state":    {200, `{"state":{"orderId":"o","status":"Confirmed","updatedAtUnixMs":1}} {}`},
	} {
		t.Run(name, func(t *testing.T) {
			api, _ := fakeAPI(t, tc.status, tc.body)
			_, _, err := api.GetOrder(context.Background(), "o")
			require.ErrorIs(t, err, client.ErrProtocol)
		})
	}
}

func TestScenarioStopsAtTheFirstFailedAssertion(t *testing.T) {
	// Both "APIs" answer a new key with 200 (a replay) instead of 201.
	api, got := fakeAPI(t, http.StatusOK,
		`{"orderId":"ord-1","state":{"orderId":"ord-1","status":"Created","updatedAtUnixMs":1}}`)
	fx, err := client.DecodeFixtures(example(t))
	require.NoError(t, err)
	fx.APIs = []string{api.BaseURL, api.BaseURL}
	fx.ResultsPath = ""
	var out bytes.Buffer
	_, err = client.NewScenario(fx, nil, &out).Run(context.Background())
	require.ErrorIs(t, err, client.ErrAssertion)
	var ae *client.AssertionError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "9.1-1/2 start and confirm", ae.Step)
	assert.Contains(t, ae.Detail, "want 201")
	assert.Contains(t, ae.Last, "HTTP 200", "the failure names the last reply seen")
	assert.Len(t, *got, 1, "nothing runs after a failed assertion")
	assert.NotContains(t, out.String(), "shoppingmall=completed")
	assert.False(t, strings.Contains(out.String(), "ok "), "no step passed")
}
