package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// waitAPI answers every request with status, the X-Wait header (if any)
// and body, and records the request URI.
func waitAPI(t *testing.T, status int, wait, body string) (*client.API, *[]string) {
	t.Helper()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		if status >= 400 {
			w.Header().Set("Content-Type", client.ContentTypeProblem)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if wait != "" {
			w.Header().Set(client.HeaderWait, wait)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return &client.API{BaseURL: srv.URL, HTTP: srv.Client()}, &got
}

func TestWaitTerminalIsOneBoundedWait(t *testing.T) {
	api, got := waitAPI(t, http.StatusOK, client.WaitReached, `{"state":{"orderId":"o/1","status":"Confirmed","updatedAtUnixMs":1}}`)
	st, reached, rep, err := api.WaitTerminal(context.Background(), "o/1", 2500*time.Millisecond)
	require.NoError(t, err)
	require.True(t, reached)
	require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
	require.Equal(t, client.WaitReached, rep.Header.Get(client.HeaderWait))
	require.Equal(t, []string{"GET /orders/o%2F1?waitFor=terminal&timeoutMs=2500"}, *got)
}

func TestWaitTerminalTimeoutIsTheCurrentState(t *testing.T) {
	api, _ := waitAPI(t, http.StatusOK, client.WaitTimeout, `{"state":{"orderId":"o","status":"InventoryReserved","updatedAtUnixMs":1}}`)
	st, reached, _, err := api.WaitTerminal(context.Background(), "o", time.Second)
	require.NoError(t, err)
	require.False(t, reached)
	require.Equal(t, contracts.OrderStatus_InventoryReserved, st.GetStatus())
}

func TestWaitTerminalErrorIsAnAnswer(t *testing.T) {
	api, _ := waitAPI(t, http.StatusNotFound, "", `{"type":"urn:shoppingmall:problem:NOT_FOUND","title":"Not found","status":404,"detail":"order not found","code":"NOT_FOUND"}`)
	st, reached, rep, err := api.WaitTerminal(context.Background(), "o", time.Second)
	require.NoError(t, err)
	require.Nil(t, st)
	require.False(t, reached)
	require.Equal(t, "NOT_FOUND", rep.Error.Code)
}

func TestWaitTerminalRepliesOutsideTheContract(t *testing.T) {
	for name, tc := range map[string]struct{ wait, status string }{
		"no X-Wait":                {"", "Confirmed"},
		"unknown X-Wait":           {"maybe", "Confirmed"},
		"reached but not terminal": {client.WaitReached, "Created"},
		"timeout but terminal":     {client.WaitTimeout, "Failed"},
	} {
		t.Run(name, func(t *testing.T) {
			api, _ := waitAPI(t, http.StatusOK, tc.wait, `{"state":{"orderId":"o","status":"`+tc.status+`","updatedAtUnixMs":1}}`)
			_, _, _, err := api.WaitTerminal(context.Background(), "o", time.Second)
			require.ErrorIs(t, err, client.ErrProtocol)
		})
	}
}
