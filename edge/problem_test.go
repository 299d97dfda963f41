package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// allCodes is every error code of the contract.
var allCodes = []string{CodeInvalidArgument, CodeNotFound, CodeIdempotencyKeyReused, CodeUnavailable, CodeTimeout,
	CodePayloadTooLarge, CodeFailedPrecondition, CodeInternal, CodeUnauthenticated, CodeMethodNotAllowed}

// Every code has its own stable type URN, title and status, and nothing
// else has one.
func TestEveryCodeHasAProblemType(t *testing.T) {
	require.Len(t, problemKinds, len(allCodes), "problemKinds lists exactly the codes")
	types := map[string]string{}
	for _, code := range allCodes {
		k, ok := problemKinds[code]
		require.True(t, ok, code)
		require.Equal(t, "urn:shoppingmall:problem:"+code, k.Type, "the type URN of %s never changes", code)
		require.Equal(t, k.Type, ProblemType(code))
		require.NotEmpty(t, k.Title, code)
		require.NotEmpty(t, http.StatusText(k.Status), code)
		require.NotContains(t, types, k.Type, "%s and %s share a type", code, types[k.Type])
		types[k.Type] = code
	}
	require.Equal(t, ProblemTypeBlank, ProblemType("NO_SUCH_CODE"))
}

// Every error httpError answers has the status its code's problem type
// says, so type, title and status agree in every reply.
func TestHTTPErrorStatusIsTheCodesStatus(t *testing.T) {
	errs := []error{nil, ErrUnauthenticated, ErrPayloadTooLarge, invalidField("cartId", "no such cart"), errNoRoute,
		errMethodNotAllowed, errUnknownSKU, ErrNotFound, ErrFailedPrecondition, ErrIdempotencyKeyReused, ErrOverloaded,
		ErrInvalidArgument, context.DeadlineExceeded, context.Canceled, errors.New("anything else")}
	for _, k := range errkind.All() {
		errs = append(errs, fmt.Errorf("wrapped: %w", errkind.New(k, "a "+k.String())))
	}
	for _, err := range errs {
		status, ae := httpError(err)
		require.Equal(t, problemKinds[ae.Code].Status, status, "%v", err)
	}
}

// An error reply is application/problem+json with type, title, status and
// detail, and the code, reason and field as extension members; a 503 or
// 504 keeps its reason and Retry-After.
func TestErrorRepliesAreProblemDetails(t *testing.T) {
	cases := []struct {
		err        error
		status     int
		code       string
		reason     string
		field      string
		retryAfter string
	}{
		{fmt.Errorf("%w: gone", errkind.New(errkind.OwnerGone, "owner")), 503, CodeUnavailable, ReasonOwnerGone, "", "30"},
		{fmt.Errorf("%w: down", errkind.New(errkind.StoreUnavailable, "store")), 503, CodeUnavailable, ReasonStoreUnavailable, "", "1"},
		{context.DeadlineExceeded, 504, CodeTimeout, ReasonDeadlineExceeded, "", "1"},
		{invalidField("cartId", "no such cart"), 400, CodeInvalidArgument, "", "cartId", ""},
		{ErrNotFound, 404, CodeNotFound, "", "", ""},
	}
	for _, tc := range cases {
		e := newEnv(t)
		w := httptest.NewRecorder()
		status, ae := httpError(tc.err)
		e.srv.writeError(w, status, ae)
		require.Equal(t, tc.status, w.Code)
		require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		require.Equal(t, tc.retryAfter, w.Header().Get("Retry-After"))
		var m map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
		want := map[string]any{"type": "urn:shoppingmall:problem:" + tc.code, "title": problemKinds[tc.code].Title,
			"status": float64(tc.status), "detail": ae.Message, "code": tc.code}
		if tc.reason != "" {
			want["reason"] = tc.reason
		}
		if tc.field != "" {
			want["field"] = tc.field
		}
		require.Equal(t, want, m, w.Body.String())
		require.NotContains(t, w.Body.String(), `"error"`, "no envelope of the old shape")
	}
}

// The replies of the router itself, the admission gate and the admin
// token check are problem details too.
func TestEveryProducerWritesProblemDetails(t *testing.T) {
	e := newEnv(t, withAdmin())
	for _, tc := range []struct {
		w    *httptest.ResponseRecorder
		code string
	}{
		{e.do(http.MethodGet, "/nope", ""), CodeNotFound},
		{e.do(http.MethodDelete, "/orders", ""), CodeMethodNotAllowed},
		{e.do(http.MethodPost, "/orders", strings.Repeat("x", MaxBody+1)), CodePayloadTooLarge},
		{serveAs(e.srv.AdminHandler(), http.MethodGet, "/admin/nope", "", "Bearer wrong"), CodeUnauthenticated},
	} {
		ae := decodeError(t, tc.w)
		require.Equal(t, tc.code, ae.Code, tc.w.Body.String())
	}
	w := e.do(http.MethodDelete, "/orders", "")
	require.NotEmpty(t, w.Header().Get("Allow"), "405 keeps Allow")
}

// A reply a report embeds (a dispatched takeover's failure) keeps the
// embedded error's shape, read from the problem details reply.
func TestDispatchedProblemBecomesTheEmbeddedError(t *testing.T) {
	w := httptest.NewRecorder()
	status, ae := httpError(fmt.Errorf("%w: gone", errkind.New(errkind.OwnerGone, "owner")))
	writeProblem(w, status, ae)
	got := dispatchedError(w.Code, w.Body.Bytes())
	require.Equal(t, apiError{Code: CodeUnavailable, Reason: ReasonOwnerGone, Message: ae.Message}, *got)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"code":"UNAVAILABLE","reason":"OWNER_GONE","message":"`+ae.Message+`"}`, string(b))
}
