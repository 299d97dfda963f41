package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// secret stands for internal detail that must never reach a client.
const secret = "member 7f3a at 10.9.8.7:40123 redis://internal:6390"

func TestHTTPErrorMapping(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("op on %s: %w", secret, err) }
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{ErrPayloadTooLarge, 413, CodePayloadTooLarge},
		{invalidField("cartId", "no such cart"), 400, CodeInvalidArgument},
		{ErrIdempotencyKeyReused, 422, CodeIdempotencyKeyReused},
		{ErrNotFound, 404, CodeNotFound},
		{errNoRoute, 404, CodeNotFound},
		{ErrFailedPrecondition, 409, CodeFailedPrecondition},
		{workflow.ErrNotFound, 404, CodeNotFound},
		{readmodel.ErrNotFound, 404, CodeNotFound},
		{commerce.ErrNotFound, 404, CodeNotFound},
		{relocation.ErrNotFound, 404, CodeNotFound},
		{workflow.ErrInvalidArgument, 400, CodeInvalidArgument},
		{commerce.ErrInvalidArgument, 400, CodeInvalidArgument},
		{readmodel.ErrInvalidOrderID, 400, CodeInvalidArgument},
		{eventstore.ErrInvalidOrderID, 400, CodeInvalidArgument},
		{location.ErrInvalidIdentity, 400, CodeInvalidArgument},
		{relocation.ErrInvalidID, 400, CodeInvalidArgument},
		{workflow.ErrConflict, 409, CodeFailedPrecondition},
		{grain.ErrFailedPrecondition, 409, CodeFailedPrecondition},
		{location.ErrUnavailable, 503, CodeUnavailable},
		{location.ErrStoreUnavailable, 503, CodeUnavailable},
		{location.ErrNoMember, 503, CodeUnavailable},
		{location.ErrMoveRolledBack, 503, CodeUnavailable},
		{commerce.ErrUnavailable, 503, CodeUnavailable},
		{readmodel.ErrUnavailable, 503, CodeUnavailable},
		{eventstore.ErrUnavailable, 503, CodeUnavailable},
		{relocation.ErrUnavailable, 503, CodeUnavailable},
		{context.Canceled, 503, CodeUnavailable},
		{location.ErrTimeout, 504, CodeTimeout},
		{context.DeadlineExceeded, 504, CodeTimeout},
		{fmt.Errorf("%w: %w", commerce.ErrUnavailable, context.DeadlineExceeded), 504, CodeTimeout},
		{grain.ErrInternal, 500, CodeInternal},
		{eventstore.ErrCorrupt, 500, CodeInternal},
		{errors.New("anything else"), 500, CodeInternal},
		{nil, 500, CodeInternal},
	}
	for _, tc := range cases {
		name := "nil"
		if tc.err != nil {
			name = tc.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			for _, err := range []error{tc.err, wrap(tc.err)} {
				if tc.err == nil && err != nil {
					continue
				}
				status, ae := httpError(err)
				require.Equal(t, tc.status, status)
				require.Equal(t, tc.code, ae.Code)
				require.NotEmpty(t, ae.Message)
				require.NotContains(t, ae.Message, "10.9.8.7", "no internal detail in the reply")
				require.NotContains(t, ae.Message, "redis", "no internal detail in the reply")
				if tc.code == CodeInternal {
					require.Equal(t, "internal error", ae.Message)
				}
				if tc.code != CodeInvalidArgument {
					require.Empty(t, ae.Field, "field only for INVALID_ARGUMENT")
				}
			}
		})
	}
	_, ae := httpError(invalidField("shippingAddressId", "is required"))
	require.Equal(t, "shippingAddressId", ae.Field)
}

func TestGrainErrorsOverHTTPLeakNothing(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: owner %s has left", location.ErrUnavailable, secret), 503, CodeUnavailable},
		{fmt.Errorf("%w: no reply from %s", location.ErrTimeout, secret), 504, CodeTimeout},
		{fmt.Errorf("%w: %s", workflow.ErrNotFound, secret), 404, CodeNotFound},
		{fmt.Errorf("%w: panic at %s", grain.ErrInternal, secret), 500, CodeInternal},
	}
	for _, tc := range cases {
		for _, path := range []string{"/orders/ord-1/continue", "/orders/ord-1/rebuild-projection", "/orders"} {
			e := newEnv(t)
			e.orders.err = tc.err
			body := "{}"
			if path == "/orders" {
				body = startBody(cartOK, "a", "p", "k")
			}
			w := e.do("POST", path, body)
			require.Equal(t, tc.status, w.Code, "%s: %s", path, w.Body.String())
			require.Equal(t, tc.code, decodeError(t, w).Code)
			require.NotContains(t, w.Body.String(), "10.9.8.7", "reply leaks internals")
			require.Contains(t, e.logs.String(), "10.9.8.7", "the detail is logged instead")
		}
	}
}

func TestPanicIsInternalWithoutDetail(t *testing.T) {
	e := newEnv(t)
	e.orders.check = func(*contracts.StartOrderWorkflowReq) { panic("boom at " + secret) }
	w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "k"))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	ae := decodeError(t, w)
	require.Equal(t, CodeInternal, ae.Code)
	require.Equal(t, "internal error", ae.Message)
	require.NotContains(t, w.Body.String(), "10.9.8.7")
	require.Contains(t, e.logs.String(), "10.9.8.7", "the panic is logged")
}

func TestUnknownRouteIsJSON404(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/nope", "/orders/a/b/c", "/self-check/orders/o/evidence", "/admin/orders/o/close"} {
		w := e.do("POST", p, "{}")
		require.Equal(t, http.StatusNotFound, w.Code, p)
		ae := decodeError(t, w)
		require.Equal(t, CodeNotFound, ae.Code)
		require.Equal(t, "no such route", ae.Message)
	}
}
