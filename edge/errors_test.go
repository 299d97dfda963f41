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
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// secret stands for internal detail that must never reach a client.
const secret = "member 7f3a at 10.9.8.7:40123 redis://internal:6390"

// TestHTTPErrorMapping proves the reply for each sentinel the edge is
// handed: each package's sentinels carry the kind that keeps the reply
// they had when the edge listed them by name.
func TestHTTPErrorMapping(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("op on %s: %w", secret, err) }
	cases := []struct {
		err        error
		status     int
		code       string
		reason     string
		retryAfter int
	}{
		{ErrPayloadTooLarge, 413, CodePayloadTooLarge, "", 0},
		{invalidField("cartId", "no such cart"), 400, CodeInvalidArgument, "", 0},
		{ErrIdempotencyKeyReused, 422, CodeIdempotencyKeyReused, "", 0},
		{ErrNotFound, 404, CodeNotFound, "", 0},
		{errNoRoute, 404, CodeNotFound, "", 0},
		{errMethodNotAllowed, 405, CodeMethodNotAllowed, "", 0},
		{ErrFailedPrecondition, 409, CodeFailedPrecondition, "", 0},
		{workflow.ErrNotFound, 404, CodeNotFound, "", 0},
		{readmodel.ErrNotFound, 404, CodeNotFound, "", 0},
		{commerce.ErrNotFound, 404, CodeNotFound, "", 0},
		{relocation.ErrNotFound, 404, CodeNotFound, "", 0},
		{workflow.ErrInvalidArgument, 400, CodeInvalidArgument, "", 0},
		{commerce.ErrInvalidArgument, 400, CodeInvalidArgument, "", 0},
		{readmodel.ErrInvalidOrderID, 400, CodeInvalidArgument, "", 0},
		{eventstore.ErrInvalidOrderID, 400, CodeInvalidArgument, "", 0},
		{location.ErrInvalidIdentity, 400, CodeInvalidArgument, "", 0},
		{relocation.ErrInvalidID, 400, CodeInvalidArgument, "", 0},
		{workflow.ErrConflict, 409, CodeFailedPrecondition, "", 0},
		{grain.ErrFailedPrecondition, 409, CodeFailedPrecondition, "", 0},
		// A relocation that rolled back for want of a member is the
		// operation's precondition, not an outage.
		{fmt.Errorf("%w: %w: %w", grain.ErrFailedPrecondition, placement.ErrMoveRolledBack, placement.ErrNoMember),
			409, CodeFailedPrecondition, "", 0},

		{placement.ErrUnavailable, 503, CodeUnavailable, ReasonOwnerGone, 30},
		{grain.ErrStoreUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{location.ErrStoreUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{commerce.ErrUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{readmodel.ErrUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{eventstore.ErrUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{relocation.ErrUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{fixture.ErrUnavailable, 503, CodeUnavailable, ReasonStoreUnavailable, 1},
		{placement.ErrNoMember, 503, CodeUnavailable, ReasonNoEligibleMember, 5},
		{placement.ErrMoveRolledBack, 503, CodeUnavailable, ReasonRelocationRolledBack, 1},
		{fmt.Errorf("%w: %w", placement.ErrMoveRolledBack, placement.ErrNoMember), 503, CodeUnavailable, ReasonNoEligibleMember, 5},
		{context.Canceled, 503, CodeUnavailable, ReasonCanceled, 1},
		{fmt.Errorf("%w: %w", relocation.ErrUnavailable, context.Canceled), 503, CodeUnavailable, ReasonCanceled, 1},
		{location.ErrTimeout, 504, CodeTimeout, ReasonDeadlineExceeded, 1},
		{context.DeadlineExceeded, 504, CodeTimeout, ReasonDeadlineExceeded, 1},
		{fmt.Errorf("%w: %w", commerce.ErrUnavailable, context.DeadlineExceeded), 504, CodeTimeout, ReasonDeadlineExceeded, 1},

		{grain.ErrInternal, 500, CodeInternal, "", 0},
		{eventstore.ErrCorrupt, 500, CodeInternal, "", 0},
		{errors.New("anything else"), 500, CodeInternal, "", 0},
		{nil, 500, CodeInternal, "", 0},
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
				require.Equal(t, tc.reason, ae.Reason)
				require.Equal(t, tc.retryAfter, ae.retryAfter)
				require.NotEmpty(t, ae.Message)
				require.NotContains(t, ae.Message, "10.9.8.7", "no internal detail in the reply")
				require.NotContains(t, ae.Message, "redis", "no internal detail in the reply")
				if tc.code == CodeInternal {
					require.Equal(t, "internal error", ae.Message)
				}
				if tc.code != CodeInvalidArgument {
					require.Empty(t, ae.Field, "field only for INVALID_ARGUMENT")
				}
				// An outage is never 500, and every 503/504 says why and
				// when to come back.
				if status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout {
					require.NotEmpty(t, ae.Reason)
					require.Positive(t, ae.retryAfter)
				} else {
					require.Empty(t, ae.Reason, "reason only for 503/504")
					require.Zero(t, ae.retryAfter, "Retry-After only for 503/504")
				}
			}
		})
	}
	_, ae := httpError(invalidField("shippingAddressId", "is required"))
	require.Equal(t, "shippingAddressId", ae.Field)
}

// Each error kind is one public reply: the table below is the whole map
// from the kinds to HTTP, and every kind is in it.
func TestEveryKindMapsToItsPublicReply(t *testing.T) {
	replies := map[errkind.Kind]struct {
		status     int
		code       string
		reason     string
		retryAfter int
		message    string
	}{
		errkind.Internal:        {500, CodeInternal, "", 0, "internal error"},
		errkind.InvalidArgument: {400, CodeInvalidArgument, "", 0, "the request was refused as invalid"},
		errkind.NotFound:        {404, CodeNotFound, "", 0, "order not found"},
		errkind.KeyReused: {422, CodeIdempotencyKeyReused, "", 0,
			"the idempotency key was already used with a different cart, shipping address or payment method"},
		errkind.Conflict:             {409, CodeFailedPrecondition, "", 0, "the operation cannot run in the order's current situation"},
		errkind.FailedPrecondition:   {409, CodeFailedPrecondition, "", 0, "the operation cannot run in the order's current situation"},
		errkind.OwnerGone:            {503, CodeUnavailable, ReasonOwnerGone, 30, "the order's owner is gone; it is not moved elsewhere automatically"},
		errkind.StoreUnavailable:     {503, CodeUnavailable, ReasonStoreUnavailable, 1, "a store the order needs is unavailable; retry later"},
		errkind.NoEligibleMember:     {503, CodeUnavailable, ReasonNoEligibleMember, 5, "no order workflow member can take the order; retry later"},
		errkind.RelocationRolledBack: {503, CodeUnavailable, ReasonRelocationRolledBack, 1, "a relocation of the order rolled back; retry"},
		errkind.Timeout:              {504, CodeTimeout, ReasonDeadlineExceeded, 1, "the order workflow did not answer in time"},
		errkind.Canceled:             {503, CodeUnavailable, ReasonCanceled, 1, "the request was canceled before it completed"},
		errkind.OwnerUnreachable: {503, CodeUnavailable, ReasonOwnerUnreachable, 1,
			"the order's owner cannot be reached from this API; retry, possibly through another API"},
		errkind.StoreFull: {503, CodeUnavailable, ReasonStoreFull, 1,
			"a store the order needs is full; nothing was done, retry once it has room"},
		errkind.VersionUnsupported: {503, CodeUnavailable, ReasonVersionUnsupported, 5,
			"the order was written by a newer version than the running members read; nothing was done, retry once a newer member runs"},
		// Overloaded's Retry-After is jittered over 1–3 s; checked below.
		errkind.Overloaded: {503, CodeUnavailable, ReasonOverloaded, -1,
			"the service is overloaded; nothing was done, retry after the Retry-After pause"},
	}
	require.Len(t, replies, len(errkind.All()), "a kind without a public reply")
	for _, k := range errkind.All() {
		want, ok := replies[k]
		require.True(t, ok, "kind %s has no public reply", k)
		t.Run(k.String(), func(t *testing.T) {
			// A sentinel of the kind, wrapped with detail, and the bare kind.
			sentinel := errkind.New(k, "somepkg: failed at "+secret)
			for _, err := range []error{sentinel, fmt.Errorf("op on %s: %w", secret, sentinel), k} {
				status, ae := httpError(err)
				require.Equal(t, want.status, status)
				require.Equal(t, want.code, ae.Code)
				require.Equal(t, want.reason, ae.Reason)
				if want.retryAfter < 0 {
					require.GreaterOrEqual(t, ae.retryAfter, 1)
					require.LessOrEqual(t, ae.retryAfter, 3)
				} else {
					require.Equal(t, want.retryAfter, ae.retryAfter)
				}
				require.Equal(t, want.message, ae.Message)
				require.Empty(t, ae.Field)
			}
		})
	}
}

// Shed clients are spread over 1–3 s, so a shed burst does not come back
// as one burst: every value of the range occurs.
func TestOverloadedRetryAfterIsJittered(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 1000 && len(seen) < 3; i++ {
		_, ae := httpError(errkind.Overloaded)
		require.Contains(t, []int{1, 2, 3}, ae.retryAfter)
		seen[ae.retryAfter] = true
	}
	require.Len(t, seen, 3, "Retry-After takes every value of 1–3 s")
}

// What the grain boundary hands the edge for each reason code turns into
// the public status, reason and Retry-After header on the wire.
func TestOutagesOverHTTPSayWhatTheyAre(t *testing.T) {
	cases := []struct {
		err        error
		status     int
		code       string
		reason     string
		retryAfter string
	}{
		{fmt.Errorf("%w: owner %s has left", placement.ErrUnavailable, secret), 503, CodeUnavailable, ReasonOwnerGone, "30"},
		{fmt.Errorf("%w: order o: eventstore: unavailable: %s", grain.ErrStoreUnavailable, secret), 503, CodeUnavailable, ReasonStoreUnavailable, "1"},
		{fmt.Errorf("%w: no other member hosts %s", placement.ErrNoMember, secret), 503, CodeUnavailable, ReasonNoEligibleMember, "5"},
		{fmt.Errorf("%w: no reply from %s", location.ErrTimeout, secret), 504, CodeTimeout, ReasonDeadlineExceeded, "1"},
		{fmt.Errorf("%w: at %s", context.Canceled, secret), 503, CodeUnavailable, ReasonCanceled, "1"},
		{fmt.Errorf("%w: %s", workflow.ErrNotFound, secret), 404, CodeNotFound, "", ""},
		{fmt.Errorf("%w: panic at %s", grain.ErrInternal, secret), 500, CodeInternal, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			for _, path := range []string{"/orders/ord-1/continue", "/orders/ord-1/rebuild-projection", "/orders"} {
				e := newEnv(t)
				e.orders.err = tc.err
				body := "{}"
				if path == "/orders" {
					body = startBody(cartOK, "a", "p", "k")
				}
				w := e.do("POST", path, body)
				require.Equal(t, tc.status, w.Code, "%s: %s", path, w.Body.String())
				ae := decodeError(t, w)
				require.Equal(t, tc.code, ae.Code)
				require.Equal(t, tc.reason, ae.Reason)
				require.Equal(t, tc.retryAfter, w.Header().Get("Retry-After"))
				require.NotContains(t, w.Body.String(), "10.9.8.7", "reply leaks internals")
				require.NotContains(t, w.Body.String(), "retryAfter", "the header is not part of the body")
			}
		})
	}
}

func TestGrainErrorsOverHTTPLeakNothing(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: owner %s has left", placement.ErrUnavailable, secret), 503, CodeUnavailable},
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
