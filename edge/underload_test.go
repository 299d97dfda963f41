package edge

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// The errors a request can meet under load, on every path from the edge:
// the start's cart read and idempotency reservation (with and without the
// one-step reservation that also takes the creation lock), its replay's
// read-model read, the grain call of a start, a continue and a rebuild
// (placement, the creation lock, the owner's mailbox, the Location Store,
// the grain's own stores), the stream check of a command, and reads and
// waits. Each carries a kind, so none falls to INTERNAL (issue 26, point
// 3); the list is what each of these tests feeds the edge.
var underLoad = []struct {
	name   string
	err    error
	status int
	reason string
}{
	{"creation lock lost", fmt.Errorf("commit %s: %w", secret, location.ErrLockLost), 503, ReasonOverloaded},
	{"member overloaded", fmt.Errorf("%w: mailbox full at %s", placement.ErrOverloaded, secret), 503, ReasonOverloaded},
	{"owner unreachable", fmt.Errorf("%w: %s", placement.ErrOwnerUnreachable, secret), 503, ReasonOwnerUnreachable},
	{"owner gone", fmt.Errorf("%w: %s", placement.ErrUnavailable, secret), 503, ReasonOwnerGone},
	{"location timeout", fmt.Errorf("%w: no reply from %s", location.ErrTimeout, secret), 504, ReasonDeadlineExceeded},
	{"location store", fmt.Errorf("%w: %s", location.ErrStoreUnavailable, secret), 503, ReasonStoreUnavailable},
	{"grain's store", fmt.Errorf("%w: %s", grain.ErrStoreUnavailable, secret), 503, ReasonStoreUnavailable},
	{"commerce store", fmt.Errorf("%w: pool timeout at %s", commerce.ErrUnavailable, secret), 503, ReasonStoreUnavailable},
	{"commerce store past the deadline", fmt.Errorf("%w: %w", commerce.ErrUnavailable, context.DeadlineExceeded), 504, ReasonDeadlineExceeded},
	{"read model", fmt.Errorf("%w: i/o timeout at %s", readmodel.ErrUnavailable, secret), 503, ReasonStoreUnavailable},
	{"event store", fmt.Errorf("%w: %s", eventstore.ErrUnavailable, secret), 503, ReasonStoreUnavailable},
	{"deadline", fmt.Errorf("await %s: %w", secret, context.DeadlineExceeded), 504, ReasonDeadlineExceeded},
	{"canceled", fmt.Errorf("await %s: %w", secret, context.Canceled), 503, ReasonCanceled},
	{"edge's own budget", ErrOverloaded, 503, ReasonOverloaded},
}

// requireOutage: a 503 or 504 with the reason, a Retry-After and no
// internal detail.
func requireOutage(t *testing.T, w interface {
	Result() *http.Response
}, status int, reason string, what string) {
	t.Helper()
	res := w.Result()
	require.Equal(t, status, res.StatusCode, what)
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "%s: Retry-After %q", what, res.Header.Get("Retry-After"))
	require.Positive(t, ra, what)
}

// TestErrorsReachableUnderLoadCarryAKind: every sentinel in the list has
// a kind of its own, so that no layer on the way sees it as Internal.
func TestErrorsReachableUnderLoadCarryAKind(t *testing.T) {
	for _, tc := range underLoad {
		require.NotEqual(t, errkind.Internal, errkind.Of(tc.err), tc.name)
	}
}

// TestErrorsUnderLoadOnTheStartPath: each error, met at each step of
// POST /orders, is a 503/504 with its reason, never INTERNAL.
func TestErrorsUnderLoadOnTheStartPath(t *testing.T) {
	steps := []struct {
		name string
		opts []envOpt
		set  func(e *env, err error)
	}{
		{"cart read", nil, func(e *env, err error) { e.carts.err = err }},
		{"key reservation", nil, func(e *env, err error) { e.idem.err = err }},
		{"one-step reservation", []envOpt{withCartReserve()}, func(e *env, err error) { e.idem.err = err }},
		{"replay's read", nil, func(e *env, err error) {
			e.idem.set("k", commerce.Mapping{OrderID: "ord-r", Status: commerce.MappingStarted,
				Fingerprint: commerce.Fingerprint(cartOK, "a", "p")})
			e.rm.err = err
		}},
		{"grain call", nil, func(e *env, err error) { e.orders.err = err }},
		{"grain call after a one-step reservation", []envOpt{withCartReserve()}, func(e *env, err error) { e.orders.err = err }},
	}
	for _, step := range steps {
		for _, tc := range underLoad {
			t.Run(step.name+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t, step.opts...)
				step.set(e, tc.err)
				w := e.do("POST", "/orders", startBody(cartOK, "a", "p", "k"))
				requireOutage(t, w, tc.status, tc.reason, w.Body.String())
				ae := decodeError(t, w)
				require.Equal(t, tc.reason, ae.Reason)
				require.NotEqual(t, CodeInternal, ae.Code)
				require.NotContains(t, w.Body.String(), "10.9.8.7")
			})
		}
	}
}

// TestErrorsUnderLoadOnCommandsReadsAndWaits: the same for continue and
// rebuild (their stream check and their grain call), a read and a wait.
func TestErrorsUnderLoadOnCommandsReadsAndWaits(t *testing.T) {
	type call struct{ method, path, body string }
	steps := []struct {
		name  string
		calls []call
		env   func(t *testing.T, err error) *env
	}{
		{"stream check", []call{{"POST", "/orders/ord-1/continue", "{}"}, {"POST", "/orders/ord-1/rebuild-projection", "{}"}},
			func(t *testing.T, err error) *env {
				return newEnv(t, func(c *Config) { c.Streams = &fakeStreams{err: err} })
			}},
		{"grain call", []call{{"POST", "/orders/ord-1/continue", "{}"}, {"POST", "/orders/ord-1/rebuild-projection", "{}"}},
			func(t *testing.T, err error) *env {
				e := newEnv(t, func(c *Config) { c.Streams = &fakeStreams{exists: map[string]bool{"ord-1": true}} })
				e.orders.err = err
				return e
			}},
		{"read", []call{{"GET", "/orders/ord-1", ""}}, func(t *testing.T, err error) *env {
			e := newEnv(t)
			e.rm.err = err
			return e
		}},
		{"wait's first read", []call{{"GET", waitPath("ord-1", "1000"), ""}}, func(t *testing.T, err error) *env {
			e := newWaitEnv(t, func(c *Config) { c.ReadModel = &fakeReadModel{err: err} })
			return e.env
		}},
	}
	for _, step := range steps {
		for _, tc := range underLoad {
			t.Run(step.name+"/"+tc.name, func(t *testing.T) {
				e := step.env(t, tc.err)
				for _, c := range step.calls {
					w := e.do(c.method, c.path, c.body)
					requireOutage(t, w, tc.status, tc.reason, c.path+": "+w.Body.String())
					ae := decodeError(t, w)
					require.Equal(t, tc.reason, ae.Reason, c.path)
					require.NotEqual(t, CodeInternal, ae.Code)
				}
			})
		}
	}
}
