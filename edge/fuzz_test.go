package edge

import (
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// acceptableID is an independent restatement of the id rules, so the fuzz
// target does not trust checkID to judge itself.
func acceptableID(s string) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > MaxIDLen || strings.TrimSpace(s) == "" {
		return false
	}
	for _, r := range s {
		if r == '{' || r == '}' || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// FuzzStartOrderDecode drives POST /orders' decode and validation with
// arbitrary bodies: it must never panic, and only a request whose every
// field is acceptable may reach the grain.
func FuzzStartOrderDecode(f *testing.F) {
	for _, s := range []string{
		startBody(cartOK, "addr-1", "pm-1", "key-1"),
		startBody(cartOK, "a", "p", "k") + "{}",
		`{"cartId":"cart-1","shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k","x":1}`,
		`{"cartId":"cart-1","cartId":"cart-1"}`,
		`{"cartId":null,"shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k"}`,
		`{"cartId":"cart-1","shippingAddressId":"\u0000","paymentMethodId":"p","idempotencyKey":"k"}`,
		`{"cartId":"cart-1","shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"{k}"}`,
		`{"cartId":"\ud800","shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k"}`,
		"\xff\xfe", `[]`, `null`, `""`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	e := newEnv(f)
	e.srv.log = discardLogger()
	e.orders.check = func(req *contracts.StartOrderWorkflowReq) {
		for _, v := range []string{req.CartId, req.ShippingAddressId, req.PaymentMethodId, req.IdempotencyKey} {
			if !acceptableID(v) {
				panic("invalid input reached the grain: " + v)
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeStartOrder(body, nil)
		if err == nil {
			for _, v := range []string{req.CartId, req.ShippingAddressId, req.PaymentMethodId, req.IdempotencyKey} {
				require.True(t, acceptableID(v), "decode accepted field %q of %q", v, body)
			}
		} else {
			status, _ := httpError(err)
			require.Equal(t, http.StatusBadRequest, status, "decode error %v", err)
		}
		before := e.orders.calls()
		w := serve(e.srv, "POST", "/orders", string(body))
		require.Less(t, w.Code, 500, "body %q: %s", body, w.Body.String())
		if err != nil {
			require.Equal(t, before, e.orders.calls(), "body %q failed validation but reached the grain", body)
		}
	})
}
