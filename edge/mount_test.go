package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
)

// echoMount is a mounted surface that answers with what the router's
// helpers made of the request.
type echoMount struct{}

func (echoMount) Mount(r AdminRouter) {
	r.Handle("GET", "/mounted/orders/{orderId}/echo", func(w http.ResponseWriter, req *http.Request) {
		id, err := r.OrderID(req)
		if err != nil {
			r.Fail(w, req, err)
			return
		}
		r.Evidence("mounted-evidence order=" + id)
		r.JSON(w, http.StatusOK, map[string]string{"orderId": id})
	})
	r.Handle("POST", "/mounted/body", func(w http.ResponseWriter, req *http.Request) {
		var b struct {
			Key string `json:"key"`
		}
		if !r.DecodeJSON(w, req, &b) {
			return
		}
		if err := r.CheckID("key", b.Key); err != nil {
			r.Fail(w, req, err)
			return
		}
		ctx, cancel := r.Context(req)
		defer cancel()
		_, hasDeadline := ctx.Deadline()
		r.JSON(w, http.StatusOK, map[string]any{"key": b.Key, "bounded": hasDeadline})
	})
	r.Handle("POST", "/mounted/start", func(w http.ResponseWriter, req *http.Request) {
		if sr := r.DecodeStartOrder(w, req); sr != nil {
			r.JSON(w, http.StatusOK, map[string]string{"key": sr.IdempotencyKey, "orderId": r.OrderIDFor(sr.IdempotencyKey)})
		}
	})
	r.Handle("GET", "/mounted/missing", func(w http.ResponseWriter, req *http.Request) {
		r.Fail(w, req, fmt.Errorf("%w: nothing here", ErrNotFound))
	})
}

// A mounted surface is served on the admin listener only, behind the
// token, and answers in the edge's shapes through its router.
func TestMountedRoutesUseTheEdgeShapes(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.AdminToken = testAdminToken
		c.Mounts = []Mount{echoMount{}}
	})

	w := e.admin("GET", "/mounted/orders/ord-7/echo", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"orderId":"ord-7"}`, w.Body.String())
	require.Equal(t, 1, e.evidence.Count("mounted-evidence order=ord-7"))
	require.Equal(t, http.StatusNotFound, e.do("GET", "/mounted/orders/ord-7/echo", "").Code, "never on the public handler")
	require.Equal(t, http.StatusUnauthorized, serveAs(e.srv.AdminHandler(), "GET", "/mounted/orders/ord-7/echo", "", "").Code,
		"behind the admin token")

	w = e.admin("GET", "/mounted/orders/ord%7B1%7D/echo", "")
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Equal(t, "orderId", decodeError(t, w).Field, "the path id is checked as every route checks it")

	w = e.admin("POST", "/mounted/body", `{"key":"k-1"}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"key":"k-1","bounded":true}`, w.Body.String())
	w = e.admin("POST", "/mounted/body", `{"key":"k-1","extra":1}`)
	require.Equal(t, http.StatusBadRequest, w.Code, "unknown fields are refused")
	require.Equal(t, CodeInvalidArgument, decodeError(t, w).Code)
	w = e.admin("POST", "/mounted/body", `{"key":""}`)
	require.Equal(t, "key", decodeError(t, w).Field)

	w = e.admin("POST", "/mounted/start", startBody(cartOK, "addr-1", "pm-1", "key-1"))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var got map[string]string
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	require.Equal(t, map[string]string{"key": "key-1", "orderId": order.OrderIDFor([]byte(testOrderIDSecret), "key-1")}, got, "an OrderId made as POST /orders makes one")
	w = serveWith(e.srv.AdminHandler(), "POST", "/mounted/start", startBodyNoKey(cartOK, "addr-1", "pm-1"), http.Header{
		"Authorization": {"Bearer " + testAdminToken}, HeaderIdempotencyKey: {"key-1"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	got = nil
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	require.Equal(t, map[string]string{"key": "key-1", "orderId": order.OrderIDFor([]byte(testOrderIDSecret), "key-1")}, got,
		"the key may come in the Idempotency-Key header, as on POST /orders")
	w = e.admin("POST", "/mounted/start", `{"cartId":"c"}`)
	require.Equal(t, http.StatusBadRequest, w.Code)

	w = e.admin("GET", "/mounted/missing", "")
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Equal(t, CodeNotFound, decodeError(t, w).Code)
	require.Zero(t, e.orders.calls())
}
