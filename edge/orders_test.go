package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

func TestStartOrderNewOrderIs201WithCartAndDeterministicCommand(t *testing.T) {
	e := newEnv(t)
	w := e.do("POST", "/orders", startBody(cartOK, "addr-1", "pm-1", "key-1"))
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	res := decodeMessage[contracts.StartOrderRes](t, w)
	require.Equal(t, order.OrderIDFor([]byte(testOrderIDSecret), "key-1"), res.OrderId, "derived from the key")
	require.Equal(t, contracts.OrderStatus_Created, res.GetState().GetStatus())

	require.Len(t, e.orders.starts, 1)
	got := e.orders.starts[0]
	cart := e.carts.carts[cartOK]
	require.Equal(t, res.OrderId, got.OrderId)
	require.Equal(t, order.StartSourceCommandID("key-1"), got.SourceCommandId)
	require.Equal(t, "key-1", got.IdempotencyKey)
	require.Equal(t, cartOK, got.CartId)
	require.Equal(t, "addr-1", got.ShippingAddressId)
	require.Equal(t, "pm-1", got.PaymentMethodId)
	require.Equal(t, cart.Amount, got.Amount)
	require.Equal(t, cart.Currency, got.Currency)
	require.Len(t, got.Lines, len(cart.Lines))
	for i := range cart.Lines {
		require.True(t, proto.Equal(cart.Lines[i], got.Lines[i]))
	}
	m, ok := e.idem.get("key-1")
	require.True(t, ok)
	require.Equal(t, res.OrderId, m.OrderID)
	require.Equal(t, commerce.Fingerprint(cartOK, "addr-1", "pm-1"), m.Fingerprint)
	require.Equal(t, []bool{true}, e.orders.minted, "the request that won the key minted the OrderId: its grain need not read")
}

// A client that hangs up does not cancel the start's writes: the key's
// reservation and the start run to their own deadline, so that the
// retry with the same key finds a known outcome.
func TestStartOrderWritesOutliveTheirClient(t *testing.T) {
	e := newEnv(t)
	ctx, hangUp := context.WithCancel(context.Background())
	hangUp()
	r := httptest.NewRequestWithContext(ctx, "POST", "/orders", strings.NewReader(startBody(cartOK, "addr-1", "pm-1", "key-gone")))
	w := httptest.NewRecorder()
	e.srv.ServeHTTP(w, r)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	require.Len(t, e.orders.startCtx, 1)
	require.NoError(t, e.orders.startCtx[0].err, "the client's cancellation reached the start")
	require.True(t, e.orders.startCtx[0].deadline, "the start has a deadline of its own")
	m, ok := e.idem.get("key-gone")
	require.True(t, ok, "the key was reserved")
	require.Equal(t, commerce.MappingPending, m.Status)
}

func TestStartOrderValidation(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	maxOK := strings.Repeat("é", MaxIDLen) // characters, not bytes, are bounded
	cases := []struct {
		name  string
		body  string
		field string
	}{
		{"empty body", ``, "body"},
		{"null", `null`, "body"},
		{"array", `[]`, "body"},
		{"not json", `cartId=1`, "body"},
		{"wrong type", `{"cartId":1,"shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k"}`, "body"},
		{"duplicate field", `{"cartId":"cart-1","cartId":"cart-1","shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k"}`, "body"},
		{"unknown field", `{"cartId":"cart-1","shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k","orderId":"x"}`, "orderId"},
		{"trailing object", startBody(cartOK, "a", "p", "k") + `{}`, "body"},
		{"trailing garbage", startBody(cartOK, "a", "p", "k") + `x`, "body"},
		{"cartId missing", `{"shippingAddressId":"a","paymentMethodId":"p","idempotencyKey":"k"}`, "cartId"},
		{"shippingAddressId missing", `{"cartId":"cart-1","paymentMethodId":"p","idempotencyKey":"k"}`, "shippingAddressId"},
		{"paymentMethodId missing", `{"cartId":"cart-1","shippingAddressId":"a","idempotencyKey":"k"}`, "paymentMethodId"},
		{"idempotencyKey missing", `{"cartId":"cart-1","shippingAddressId":"a","paymentMethodId":"p"}`, "idempotencyKey"},
		{"cartId too long", startBody(long, "a", "p", "k"), "cartId"},
		{"shippingAddressId too long", startBody(cartOK, long, "p", "k"), "shippingAddressId"},
		{"paymentMethodId too long", startBody(cartOK, "a", long, "k"), "paymentMethodId"},
		{"idempotencyKey too long", startBody(cartOK, "a", "p", long), "idempotencyKey"},
		{"cartId blank", startBody("  ", "a", "p", "k"), "cartId"},
		{"idempotencyKey blank", startBody(cartOK, "a", "p", " \u00a0"), "idempotencyKey"},
		{"cartId brace", startBody("cart{1}", "a", "p", "k"), "cartId"},
		{"shippingAddressId brace", startBody(cartOK, "a{", "p", "k"), "shippingAddressId"},
		{"paymentMethodId brace", startBody(cartOK, "a", "}p", "k"), "paymentMethodId"},
		{"idempotencyKey brace", startBody(cartOK, "a", "p", "{k}"), "idempotencyKey"},
		{"cartId control", startBody("cart\n1", "a", "p", "k"), "cartId"},
		{"shippingAddressId control", startBody(cartOK, "a\x00", "p", "k"), "shippingAddressId"},
		{"paymentMethodId control", startBody(cartOK, "a", "p\u0085", "k"), "paymentMethodId"},
		{"idempotencyKey control", startBody(cartOK, "a", "p", "k\x7f"), "idempotencyKey"},
		{"unknown cart", startBody("cart-none", "a", "p", "k"), "cartId"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.do("POST", "/orders", tc.body)
			require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
			ae := decodeError(t, w)
			require.Equal(t, CodeInvalidArgument, ae.Code)
			require.Equal(t, tc.field, ae.Field, ae.Message)
			require.Zero(t, e.orders.calls(), "invalid input must never reach the grain")
			require.Zero(t, e.idem.calls, "invalid input must never reserve a key")
		})
	}
	t.Run("bounds are inclusive", func(t *testing.T) {
		e := newEnv(t)
		e.carts.carts[maxOK] = commerce.Cart{CartID: maxOK, Lines: []*contracts.OrderLine{{Sku: "s", Quantity: 1}}, Amount: 1, Currency: "EUR"}
		w := e.do("POST", "/orders", startBody(maxOK, maxOK, maxOK, maxOK))
		require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	})
}

func TestStartOrderCartQuantityAndShape(t *testing.T) {
	line := func(sku string, q int32) *contracts.OrderLine { return &contracts.OrderLine{Sku: sku, Quantity: q} }
	many := make([]*contracts.OrderLine, MaxLines+1)
	for i := range many {
		many[i] = line(fmt.Sprintf("s%d", i), 1)
	}
	cases := []struct {
		name string
		cart commerce.Cart
		ok   bool
	}{
		{"quantity 1", commerce.Cart{Lines: []*contracts.OrderLine{line("s", 1)}, Currency: "EUR"}, true},
		{"quantity max", commerce.Cart{Lines: []*contracts.OrderLine{line("s", MaxQuantity)}, Currency: "EUR"}, true},
		{"quantity 0", commerce.Cart{Lines: []*contracts.OrderLine{line("s", 0)}, Currency: "EUR"}, false},
		{"quantity negative", commerce.Cart{Lines: []*contracts.OrderLine{line("s", -3)}, Currency: "EUR"}, false},
		{"quantity over max", commerce.Cart{Lines: []*contracts.OrderLine{line("s", MaxQuantity+1)}, Currency: "EUR"}, false},
		{"no lines", commerce.Cart{Currency: "EUR"}, false},
		{"too many lines", commerce.Cart{Lines: many, Currency: "EUR"}, false},
		{"empty sku", commerce.Cart{Lines: []*contracts.OrderLine{line("", 1)}, Currency: "EUR"}, false},
		{"negative amount", commerce.Cart{Lines: []*contracts.OrderLine{line("s", 1)}, Amount: -1, Currency: "EUR"}, false},
		{"bad currency", commerce.Cart{Lines: []*contracts.OrderLine{line("s", 1)}, Currency: "eur"}, false},
	}
	for _, oneStep := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/one step %v", tc.name, oneStep), func(t *testing.T) {
				var opts []envOpt
				if oneStep {
					opts = append(opts, withCartReserve())
				}
				e := newEnv(t, opts...)
				tc.cart.CartID = "cart-x"
				e.carts.carts["cart-x"] = tc.cart
				w := e.do("POST", "/orders", startBody("cart-x", "a", "p", "k"))
				if tc.ok {
					require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
					return
				}
				require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
				ae := decodeError(t, w)
				require.Equal(t, "cartId", ae.Field)
				require.Zero(t, e.orders.calls())
				_, mapped := e.idem.get("k")
				require.False(t, mapped, "a refused cart leaves its key free")
			})
		}
	}
}

// With the one-step cart read and reservation, an unknown cart reserves
// nothing and a refused one gives its fresh mapping back; a key reserved
// before stays.
func TestStartOrderOneStepCartAndKey(t *testing.T) {
	e := newEnv(t, withCartReserve())
	w := e.do("POST", "/orders", startBody("no-such-cart", "a", "p", "k1"))
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Equal(t, "cartId", decodeError(t, w).Field)
	_, mapped := e.idem.get("k1")
	require.False(t, mapped)

	w = e.do("POST", "/orders", startBody(cartOK, "a", "p", "k2"))
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	id := decodeMessage[contracts.StartOrderRes](t, w).OrderId
	require.Equal(t, []bool{true}, e.orders.minted)

	// The cart turns bad after the key was used: the replay is refused,
	// and the mapping it did not create stays.
	e.carts.carts[cartOK] = commerce.Cart{CartID: cartOK, Currency: "EUR"}
	w = e.do("POST", "/orders", startBody(cartOK, "a", "p", "k2"))
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	m, mapped := e.idem.get("k2")
	require.True(t, mapped)
	require.Equal(t, id, m.OrderID)
	require.Zero(t, e.cartReserve.unreserves, "only a mapping the step created is given back")
}

func TestStartOrderBodyTooLarge(t *testing.T) {
	big := `{"cartId":"` + strings.Repeat("a", MaxBody) + `"}`
	t.Run("declared length", func(t *testing.T) {
		e := newEnv(t)
		w := e.do("POST", "/orders", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		require.Equal(t, CodePayloadTooLarge, decodeError(t, w).Code)
		require.Zero(t, e.orders.calls())
	})
	t.Run("streamed without length", func(t *testing.T) {
		e := newEnv(t)
		r := httptest.NewRequest("POST", "/orders", io.NopCloser(strings.NewReader(big)))
		r.ContentLength = -1
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, r)
		require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		require.Equal(t, CodePayloadTooLarge, decodeError(t, w).Code)
		require.Zero(t, e.orders.calls())
	})
	t.Run("exactly the limit is read", func(t *testing.T) {
		e := newEnv(t)
		body := startBody(cartOK, "a", "p", "k")
		body += strings.Repeat(" ", MaxBody-len(body))
		require.Len(t, body, MaxBody)
		w := e.do("POST", "/orders", body)
		require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	})
}

func TestStartOrderKeyReusedIs422(t *testing.T) {
	e := newEnv(t)
	w := e.do("POST", "/orders", startBody(cartOK, "addr-1", "pm-1", "key-r"))
	require.Equal(t, http.StatusCreated, w.Code)
	for name, body := range map[string]string{
		"different cart":    startBody(cartOther, "addr-1", "pm-1", "key-r"),
		"different address": startBody(cartOK, "addr-2", "pm-1", "key-r"),
		"different method":  startBody(cartOK, "addr-1", "pm-2", "key-r"),
	} {
		t.Run(name, func(t *testing.T) {
			w := e.do("POST", "/orders", body)
			require.Equal(t, http.StatusUnprocessableEntity, w.Code, w.Body.String())
			require.Equal(t, CodeIdempotencyKeyReused, decodeError(t, w).Code)
		})
	}
	require.Len(t, e.orders.starts, 1, "a reused key never reaches the grain")
}

func TestStartOrderReplayOfStartedKeyIs200FromReadModel(t *testing.T) {
	e := newEnv(t)
	e.idem.set("key-s", commerce.Mapping{OrderID: "ord-s", Status: commerce.MappingStarted,
		Fingerprint: commerce.Fingerprint(cartOK, "a", "p")})
	amount := int64(4870)
	e.rm.put(&contracts.OrderState{OrderId: "ord-s", Status: contracts.OrderStatus_Confirmed, Amount: &amount, UpdatedAtUnixMs: 9})
	w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "key-s"))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	res := decodeMessage[contracts.StartOrderRes](t, w)
	require.Equal(t, "ord-s", res.OrderId)
	require.Equal(t, contracts.OrderStatus_Confirmed, res.GetState().GetStatus(), "a replay answers the current read model")
	require.Zero(t, e.orders.calls(), "a started key with a projection needs no grain call")
}

// fakeBarrier answers the replication barrier with err, counting calls.
type fakeBarrier struct {
	err   error
	calls []string
}

func (b *fakeBarrier) Barrier(_ context.Context, orderID string) error {
	b.calls = append(b.calls, orderID)
	return b.err
}

// A replay from the started mapping writes nothing, so with replicated
// stores it passes the replication barrier before its 200: a shortfall
// answers 503 STORE_UNAVAILABLE, as the write in doubt behind it did.
func TestStartOrderReplayPassesTheReplicationBarrier(t *testing.T) {
	barrier := &fakeBarrier{err: fmt.Errorf("%w: write not confirmed by enough replicas", eventstore.ErrUnavailable)}
	e := newEnv(t, func(c *Config) { c.Barrier = barrier })
	e.idem.set("key-s", commerce.Mapping{OrderID: "ord-s", Status: commerce.MappingStarted,
		Fingerprint: commerce.Fingerprint(cartOK, "a", "p")})
	e.rm.put(&contracts.OrderState{OrderId: "ord-s", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 9})
	w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "key-s"))
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, ReasonStoreUnavailable, decodeError(t, w).Reason)
	require.Equal(t, []string{"ord-s"}, barrier.calls)

	barrier.err = nil
	w = e.do("POST", "/orders", startBody(cartOK, "a", "p", "key-s"))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Len(t, barrier.calls, 2)
	require.Zero(t, e.orders.calls(), "the replay still needs no grain call")
}

func TestStartOrderStartedKeyWithoutProjectionResumesThroughGrain(t *testing.T) {
	e := newEnv(t)
	e.idem.set("key-s", commerce.Mapping{OrderID: "ord-s", Status: commerce.MappingStarted,
		Fingerprint: commerce.Fingerprint(cartOK, "a", "p")})
	e.orders.started["ord-s"] = true
	w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "key-s"))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Len(t, e.orders.starts, 1)
	require.Equal(t, "ord-s", e.orders.starts[0].OrderId)
}

func TestStartOrderPendingKeyResumesSameOrder(t *testing.T) {
	e := newEnv(t)
	e.idem.set("key-p", commerce.Mapping{OrderID: "ord-p", Status: commerce.MappingPending,
		Fingerprint: commerce.Fingerprint(cartOK, "a", "p")})
	w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "key-p"))
	require.Equal(t, http.StatusCreated, w.Code, "the resumed start records the event: 201")
	require.Equal(t, "ord-p", decodeMessage[contracts.StartOrderRes](t, w).OrderId)

	// Still pending (say the mark failed): the grain finds the start recorded.
	w = e.do("POST", "/orders", startBody(cartOK, "a", "p", "key-p"))
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "ord-p", decodeMessage[contracts.StartOrderRes](t, w).OrderId)
	require.Len(t, e.orders.starts, 2)
	for _, s := range e.orders.starts {
		require.Equal(t, "ord-p", s.OrderId, "a pending key never gets a second OrderId")
	}
	require.Equal(t, []bool{false, false}, e.orders.minted, "a key reserved earlier: the OrderId may have state")
}

func TestStartOrderStoreFailuresMapped(t *testing.T) {
	e := newEnv(t)
	e.carts.err = fmt.Errorf("%w: dial tcp 10.1.2.3:6379: refused", commerce.ErrUnavailable)
	w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "k"))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.NotContains(t, w.Body.String(), "10.1.2.3")

	e = newEnv(t)
	e.idem.err = fmt.Errorf("%w: reserve: %w", commerce.ErrUnavailable, context.DeadlineExceeded)
	w = e.do("POST", "/orders", startBody(cartOK, "a", "p", "k"))
	require.Equal(t, http.StatusGatewayTimeout, w.Code)
	require.Zero(t, e.orders.calls())
}

func TestGetOrderReadsReadModelOnly(t *testing.T) {
	e := newEnv(t)
	e.rm.put(&contracts.OrderState{OrderId: "ord-1", Status: contracts.OrderStatus_InventoryReserved, UpdatedAtUnixMs: 5})
	w := e.do("GET", "/orders/ord-1", "")
	require.Equal(t, http.StatusOK, w.Code)
	res := decodeMessage[contracts.GetOrderStateRes](t, w)
	require.Equal(t, contracts.OrderStatus_InventoryReserved, res.GetState().GetStatus())

	w = e.do("GET", "/orders/ord-none", "")
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Equal(t, CodeNotFound, decodeError(t, w).Code)

	w = e.do("GET", "/orders/ord%7B1%7D", "")
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Equal(t, "orderId", decodeError(t, w).Field)

	require.Zero(t, e.orders.calls(), "GET never calls the grain")
}

func TestContinueAndRebuildFillFromPath(t *testing.T) {
	type call struct {
		orderID, source string
	}
	last := func(e *env, path string) call {
		e.orders.mu.Lock()
		defer e.orders.mu.Unlock()
		if strings.HasSuffix(path, "/continue") {
			c := e.orders.continues[len(e.orders.continues)-1]
			return call{c.OrderId, c.SourceCommandId}
		}
		c := e.orders.rebuilds[len(e.orders.rebuilds)-1]
		return call{c.OrderId, c.SourceCommandId}
	}
	for _, path := range []string{"/orders/ord-1/continue", "/orders/ord-1/rebuild-projection"} {
		t.Run(path, func(t *testing.T) {
			for _, body := range []string{"", "{}", " \n", `{"orderId":"ord-1"}`} {
				e := newEnv(t)
				w := e.do("POST", path, body)
				require.Equal(t, http.StatusOK, w.Code, "body %q: %s", body, w.Body.String())
				c := last(e, path)
				require.Equal(t, "ord-1", c.orderID)
				require.NotEmpty(t, c.source, "an empty sourceCommandId is filled")
			}
			e := newEnv(t)
			w := e.do("POST", path, `{"sourceCommandId":"mine"}`)
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, call{"ord-1", "mine"}, last(e, path))

			for body, field := range map[string]string{
				`{"orderId":"ord-2"}`:           "orderId",
				`{"nope":1}`:                    "nope",
				`{} {}`:                         "body",
				`{"sourceCommandId":"a{b}"}`:    "sourceCommandId",
				`{"sourceCommandId":"a\u0001"}`: "sourceCommandId",
			} {
				e := newEnv(t)
				w := e.do("POST", path, body)
				require.Equal(t, http.StatusBadRequest, w.Code, body)
				require.Equal(t, field, decodeError(t, w).Field, body)
				require.Zero(t, e.orders.calls(), body)
			}
		})
	}
}

// The Idempotency-Key header is the body's idempotencyKey sent another
// way: a start with either, or both when equal, is the same start, and
// two keys for one request are refused before any key is reserved.
func TestStartOrderIdempotencyKeyHeader(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	key := func(vs ...string) http.Header { return http.Header{HeaderIdempotencyKey: vs} }
	noKey := startBodyNoKey(cartOK, "addr-1", "pm-1")
	withKey := func(k string) string { return startBody(cartOK, "addr-1", "pm-1", k) }
	cases := []struct {
		name   string
		body   string
		header http.Header
		// key is the key the start must run under; "" means refused
		// with a 400 on field.
		key, field string
	}{
		{"header only", noKey, key("key-h"), "key-h", ""},
		{"header only, longest key", noKey, key(strings.Repeat("é", MaxIDLen)), strings.Repeat("é", MaxIDLen), ""},
		{"header and body equal", withKey("key-h"), key("key-h"), "key-h", ""},
		{"body only", withKey("key-h"), nil, "key-h", ""},
		{"header and body differ", withKey("key-b"), key("key-h"), "", HeaderIdempotencyKey},
		{"header and body differ in case", withKey("KEY-H"), key("key-h"), "", HeaderIdempotencyKey},
		{"header given twice", noKey, key("key-1", "key-2"), "", HeaderIdempotencyKey},
		{"header given twice, same value", noKey, key("key-h", "key-h"), "", HeaderIdempotencyKey},
		{"header given twice, body equal", withKey("key-h"), key("key-h", "key-h"), "", HeaderIdempotencyKey},
		{"header empty", noKey, key(""), "", HeaderIdempotencyKey},
		{"header empty, body has a key", withKey("key-b"), key(""), "", HeaderIdempotencyKey},
		{"header too long", noKey, key(long), "", HeaderIdempotencyKey},
		{"header blank", noKey, key(" \u00a0"), "", HeaderIdempotencyKey},
		{"header brace", noKey, key("{k}"), "", HeaderIdempotencyKey},
		{"header control", noKey, key("k\tk"), "", HeaderIdempotencyKey},
		{"header not UTF-8", noKey, key("k\xff"), "", HeaderIdempotencyKey},
		{"header invalid, body valid", withKey("key-b"), key("key{b}"), "", HeaderIdempotencyKey},
		{"neither", noKey, nil, "", "idempotencyKey"},
		{"another header only", noKey, http.Header{"X-Idempotency-Key": {"key-h"}}, "", "idempotencyKey"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.doWith("POST", "/orders", tc.body, tc.header)
			if tc.key == "" {
				require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
				ae := decodeError(t, w)
				require.Equal(t, CodeInvalidArgument, ae.Code)
				require.Equal(t, tc.field, ae.Field, ae.Message)
				require.True(t, strings.HasPrefix(ae.Message, tc.field+": "), "the message names the field: %q", ae.Message)
				require.Zero(t, e.idem.calls, "a refused key is never reserved")
				require.Zero(t, e.orders.calls(), "a refused key never reaches the grain")
				return
			}
			require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
			id := decodeMessage[contracts.StartOrderRes](t, w).OrderId
			require.Equal(t, order.OrderIDFor([]byte(testOrderIDSecret), tc.key), id, "the OrderId is derived from the one key")
			require.Len(t, e.orders.starts, 1)
			got := e.orders.starts[0]
			require.Equal(t, tc.key, got.IdempotencyKey)
			require.Equal(t, order.StartSourceCommandID(tc.key), got.SourceCommandId)
			m, ok := e.idem.get(tc.key)
			require.True(t, ok, "the mapping is under the key")
			require.Equal(t, id, m.OrderID)
			require.Equal(t, commerce.Fingerprint(cartOK, "addr-1", "pm-1"), m.Fingerprint)
		})
	}
}

// A key reaches the same order whichever way each request sends it: a
// client that moves from the body to the header, or back, retries its
// start instead of making a second one, and a different request under
// the key is refused as 422 either way.
func TestStartOrderIdempotencyKeyHeaderConverges(t *testing.T) {
	header := http.Header{HeaderIdempotencyKey: {"key-c"}}
	byBody := func(e *env) *httptest.ResponseRecorder {
		return e.do("POST", "/orders", startBody(cartOK, "addr-1", "pm-1", "key-c"))
	}
	byHeader := func(e *env) *httptest.ResponseRecorder {
		return e.doWith("POST", "/orders", startBodyNoKey(cartOK, "addr-1", "pm-1"), header)
	}
	for _, tc := range []struct {
		name          string
		first, second func(*env) *httptest.ResponseRecorder
	}{
		{"body then header", byBody, byHeader},
		{"header then body", byHeader, byBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := tc.first(e)
			require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
			first := decodeMessage[contracts.StartOrderRes](t, w).OrderId
			w = tc.second(e)
			require.Equal(t, http.StatusOK, w.Code, "the second is a replay: %s", w.Body.String())
			require.Equal(t, first, decodeMessage[contracts.StartOrderRes](t, w).OrderId)
			require.Len(t, e.idem.m, 1, "one mapping for the key")
			require.Len(t, e.orders.starts, 2)
			require.True(t, proto.Equal(e.orders.starts[0], e.orders.starts[1]), "the grain sees the same start twice")

			w = e.doWith("POST", "/orders", startBodyNoKey(cartOther, "addr-1", "pm-1"), header)
			require.Equal(t, http.StatusUnprocessableEntity, w.Code, w.Body.String())
			require.Equal(t, CodeIdempotencyKeyReused, decodeError(t, w).Code)
		})
	}
	t.Run("fresh servers agree", func(t *testing.T) {
		a, b := newEnv(t), newEnv(t)
		wa, wb := byBody(a), byHeader(b)
		require.Equal(t, http.StatusCreated, wa.Code, wa.Body.String())
		require.Equal(t, http.StatusCreated, wb.Code, wb.Body.String())
		require.Equal(t, decodeMessage[contracts.StartOrderRes](t, wa).OrderId, decodeMessage[contracts.StartOrderRes](t, wb).OrderId)
		require.True(t, proto.Equal(a.orders.starts[0], b.orders.starts[0]), "the grain's start is the same")
	})
}
