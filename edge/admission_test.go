package edge

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// heldOrders holds every continue and rebuild until release is closed, so
// that a test can keep command slots taken.
type heldOrders struct {
	*fakeOrders
	release chan struct{}
}

func (h heldOrders) ContinueOrderWorkflow(ctx context.Context, req *contracts.ContinueOrderWorkflowReq) (*contracts.ContinueOrderWorkflowRes, error) {
	<-h.release
	return h.fakeOrders.ContinueOrderWorkflow(ctx, req)
}

func (h heldOrders) RebuildOrderProjection(ctx context.Context, req *contracts.RebuildOrderProjectionReq) (*contracts.RebuildOrderProjectionRes, error) {
	<-h.release
	return h.fakeOrders.RebuildOrderProjection(ctx, req)
}

// heldReads holds every read-model read until release is closed.
type heldReads struct {
	ReadModel
	release chan struct{}
}

func (h heldReads) Get(ctx context.Context, id string) (*contracts.OrderState, int64, error) {
	<-h.release
	return h.ReadModel.Get(ctx, id)
}

func withAdmission(a Admission) envOpt {
	return func(c *Config) { c.Admission = a }
}

// eventually waits, with a deadline, for cond.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, what)
}

// requireShed checks one shed answer: 503 UNAVAILABLE OVERLOADED with a
// Retry-After of 1..3 s and a request id, in the edge's error shape.
func requireShed(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	ae := decodeError(t, w)
	require.Equal(t, CodeUnavailable, ae.Code)
	require.Equal(t, ReasonOverloaded, ae.Reason)
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", w.Header().Get("Retry-After"))
	require.GreaterOrEqual(t, ra, 1)
	require.LessOrEqual(t, ra, 3)
	require.NotEmpty(t, w.Header().Get(HeaderRequestID), "a shed reply echoes a request id too")
}

// TestStartBudgetAdmitsNAndShedsTheNextAtOnce: with a start budget of 3,
// three starts held in their grain call are all admitted; the fourth is
// answered 503 OVERLOADED at once, before its body is read or its key
// reserved, and costs the grain nothing. Once a slot is free, starts are
// admitted again.
func TestStartBudgetAdmitsNAndShedsTheNextAtOnce(t *testing.T) {
	const budget = 3
	o := newObserved(t, withAdmission(Admission{Starts: budget}))
	release := make(chan struct{})
	var held atomic.Int64
	o.orders.check = func(*contracts.StartOrderWorkflowReq) {
		held.Add(1)
		<-release
	}
	var wg sync.WaitGroup
	codes := make([]int, budget)
	for i := range budget {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = o.do("POST", "/orders", startBody(cartOK, "a", "p", fmt.Sprintf("held-%d", i))).Code
		}()
	}
	eventually(t, func() bool { return held.Load() == budget }, "three starts held in their grain call")
	require.Equal(t, budget, o.srv.InFlight(RouteKindStart))

	begin := time.Now()
	w := o.do("POST", "/orders", startBody(cartOK, "a", "p", "shed"))
	took := time.Since(begin)
	requireShed(t, w)
	require.Less(t, took, time.Second, "shed at once, never after a wait")
	require.Equal(t, budget, o.srv.InFlight(RouteKindStart), "the shed request took no slot")
	o.idem.mu.Lock()
	reserves := o.idem.calls
	o.idem.mu.Unlock()
	require.Equal(t, budget, reserves, "the shed start reserved no key")
	_, reserved := o.idem.get("shed")
	require.False(t, reserved)

	// Counted as shed, as a 503 of its route, and by reason.
	kind := map[string]string{LabelRouteKind: string(RouteKindStart)}
	require.Equal(t, 1.0, o.sum(MetricShed, kind))
	require.Equal(t, 1.0, o.sum(MetricShedSeconds, kind), "one shed latency observed")
	require.Equal(t, 1.0, o.sum(MetricUnavailable, map[string]string{LabelReason: ReasonOverloaded}))
	require.Equal(t, 1.0, o.sum(MetricHTTPRequests, map[string]string{LabelRoute: "/orders", LabelCode: "503"}))
	require.Equal(t, float64(budget), o.sum(MetricInFlight, kind))
	require.Zero(t, o.sum(MetricShed, map[string]string{LabelRouteKind: string(RouteKindCommand)}))

	close(release)
	wg.Wait()
	for i, c := range codes {
		require.Equal(t, http.StatusCreated, c, "held start %d", i)
	}
	require.Zero(t, o.srv.InFlight(RouteKindStart), "every slot given back")
	require.Equal(t, http.StatusCreated, o.do("POST", "/orders", startBody(cartOK, "a", "p", "after")).Code)
}

// TestWaitsHaveABudgetOfTheirOwn: waits that fill their own budget never
// keep a start, a read or a command out, and a full start budget never
// keeps a wait out. The wait beyond its budget is shed.
func TestWaitsHaveABudgetOfTheirOwn(t *testing.T) {
	const waits = 4
	e := newWaitEnv(t, withAdmission(Admission{Starts: 1, Commands: 1, Reads: 1, Waits: waits}))
	e.rm.Seed("ord-w", 1, orderState("ord-w", contracts.OrderStatus_Created))
	var wg sync.WaitGroup
	for range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.do("GET", waitPath("ord-w", "30000"), "")
		}()
	}
	eventually(t, func() bool { return e.srv.InFlight(RouteKindWait) == waits }, "the waits in flight")
	requireShed(t, e.do("GET", waitPath("ord-w", "30000"), ""))

	require.Equal(t, http.StatusCreated, e.do("POST", "/orders", startBody(cartOK, "a", "p", "k1")).Code,
		"a start is admitted while the waits' budget is full")
	require.Equal(t, http.StatusOK, e.do("GET", "/orders/ord-w", "").Code, "so is a read")
	require.Equal(t, http.StatusOK, e.do("POST", "/orders/ord-w/continue", "{}").Code, "and a command")

	// A start held in flight fills the start budget; a wait still goes
	// through once a wait slot is free.
	release := make(chan struct{})
	e.orders.check = func(*contracts.StartOrderWorkflowReq) { <-release }
	started := make(chan int, 1)
	go func() { started <- e.do("POST", "/orders", startBody(cartOK, "a", "p", "k2")).Code }()
	eventually(t, func() bool { return e.srv.InFlight(RouteKindStart) == 1 }, "a start in flight")
	requireShed(t, e.do("POST", "/orders", startBody(cartOK, "a", "p", "k3")))

	// End the waits (the server stopping answers them), then wait again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.srv.http.Shutdown(ctx))
	wg.Wait()
	require.Zero(t, e.srv.InFlight(RouteKindWait))
	w := e.do("GET", waitPath("ord-w", "0"), "")
	require.Equal(t, http.StatusOK, w.Code, "a wait is admitted while the start budget is full: %s", w.Body.String())
	close(release)
	require.Equal(t, http.StatusCreated, <-started)
}

// TestHealthAndAdminAreNeverShed: with every budget of the public routes
// full, /healthz, /readyz, unknown routes, wrong methods and the admin
// listener still answer as usual, and take no slot.
func TestHealthAndAdminAreNeverShed(t *testing.T) {
	release := make(chan struct{})
	e := newWaitEnv(t, withAdmin(), withAdmission(Admission{Starts: 1, Commands: 1, Reads: 1, Waits: 1}),
		func(c *Config) {
			c.Orders = heldOrders{fakeOrders: c.Orders.(*fakeOrders), release: release}
			c.ReadModel = heldReads{ReadModel: c.ReadModel, release: release}
		})
	e.srv.listening.Store(true)
	e.topo.n.Store(1)
	e.orders.check = func(*contracts.StartOrderWorkflowReq) { <-release }
	e.rm.Seed("ord-h", 1, orderState("ord-h", contracts.OrderStatus_Created))
	var wg sync.WaitGroup
	hold := func(method, path, body string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.do(method, path, body)
		}()
	}
	hold("POST", "/orders", startBody(cartOK, "a", "p", "k"))
	hold("POST", "/orders/ord-h/continue", "{}")
	hold("GET", "/orders/ord-h", "")
	hold("GET", waitPath("ord-h", "30000"), "")
	eventually(t, func() bool {
		for _, k := range routeKinds {
			if e.srv.InFlight(k) != 1 {
				return false
			}
		}
		return true
	}, "one request of every kind in flight")
	requireShed(t, e.do("POST", "/orders", startBody(cartOK, "a", "p", "k2")))
	requireShed(t, e.do("POST", "/orders/ord-h/rebuild-projection", "{}"))
	requireShed(t, e.do("GET", "/orders/ord-h", ""))
	requireShed(t, e.do("GET", waitPath("ord-h", "0"), ""))

	require.Equal(t, http.StatusOK, e.do("GET", "/healthz", "").Code)
	require.Equal(t, http.StatusOK, e.do("GET", "/readyz", "").Code)
	require.Equal(t, http.StatusNotFound, e.do("GET", "/nope", "").Code)
	// A wrong method on an order path is no start, command, read or wait:
	// shed as one, it would answer 503 here.
	for _, r := range []struct{ method, path string }{
		{"GET", "/orders"},
		{"DELETE", "/orders/ord-h"},
		{"POST", "/orders/ord-h"},
		{"POST", waitPath("ord-h", "0")},
		{"GET", "/orders/ord-h/continue"},
		{"PUT", "/orders/ord-h/rebuild-projection"},
	} {
		w := e.do(r.method, r.path, "{}")
		require.Equal(t, http.StatusMethodNotAllowed, w.Code, "%s %s: %s", r.method, r.path, w.Body.String())
		require.Equal(t, CodeMethodNotAllowed, decodeError(t, w).Code)
	}
	for _, k := range routeKinds {
		require.Equal(t, 1, e.srv.InFlight(k), "%s: only the held request is counted", k)
	}
	for range 3 {
		w := e.admin("POST", "/admin/orders/ord-h/close", "{}")
		require.Equal(t, http.StatusOK, w.Code, "the admin listener is never shed: %s", w.Body.String())
	}

	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.srv.http.Shutdown(ctx))
	wg.Wait()
}

// TestBudgetIsNeverExceeded: many goroutines start orders at once against
// a budget of 5; the grain never sees more than 5 starts at a time, every
// answer is a 201 or a shed 503, and every slot is given back.
func TestBudgetIsNeverExceeded(t *testing.T) {
	const (
		budget     = 5
		goroutines = 64
		each       = 20
	)
	e := newEnv(t, withAdmission(Admission{Starts: budget}))
	var now, peak atomic.Int64
	e.orders.check = func(*contracts.StartOrderWorkflowReq) {
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		// Hold the slot a little, so that the starts overlap.
		time.Sleep(50 * time.Microsecond)
		now.Add(-1)
	}
	var admitted, shed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				w := serve(e.srv, "POST", "/orders", startBody(cartOK, "a", "p", fmt.Sprintf("k-%d-%d", g, i)))
				switch {
				case w.Code == http.StatusCreated:
					admitted.Add(1)
				case w.Code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "":
					shed.Add(1)
				default:
					errs <- fmt.Sprintf("%d %s", w.Code, w.Body.String())
				}
				if n := e.srv.InFlight(RouteKindStart); n > budget {
					errs <- fmt.Sprintf("%d starts in flight, budget %d", n, budget)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	t.Logf("admitted %d, shed %d, peak %d in the grain", admitted.Load(), shed.Load(), peak.Load())
	require.Equal(t, int64(goroutines*each), admitted.Load()+shed.Load())
	require.LessOrEqual(t, peak.Load(), int64(budget), "the budget was exceeded")
	require.Positive(t, admitted.Load())
	require.Positive(t, shed.Load(), "the load never exceeded the budget: the test proved nothing")
	require.Zero(t, e.srv.InFlight(RouteKindStart))
}

// TestNegativeBudgetIsUnbounded: a kind whose budget is negative is never
// shed.
func TestNegativeBudgetIsUnbounded(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, withAdmission(Admission{Commands: -1}), func(c *Config) {
		c.Orders = heldOrders{fakeOrders: c.Orders.(*fakeOrders), release: release}
	})
	const n = 50 // above the default budget of commands
	require.Greater(t, n, DefaultAdmission.Commands)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.Equal(t, http.StatusOK, e.do("POST", "/orders/ord-1/continue", "{}").Code)
		}()
	}
	eventually(t, func() bool { return e.srv.InFlight(RouteKindCommand) == n }, "every command admitted")
	close(release)
	wg.Wait()
}

// fakeStreams is the event store's presence check: exists holds the
// orders with a stream, archived the archived ones' sealed records.
type fakeStreams struct {
	mu       sync.Mutex
	exists   map[string]bool
	archived map[string]eventstore.SealedRecord
	err      error
	calls    int
}

func (f *fakeStreams) Presence(_ context.Context, id string) (eventstore.Presence, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return eventstore.Presence{}, f.err
	}
	if rec, ok := f.archived[id]; ok {
		return eventstore.Presence{Tier: eventstore.TierArchived, Sealed: rec}, nil
	}
	if f.exists[id] {
		return eventstore.Presence{Tier: eventstore.TierHot}, nil
	}
	return eventstore.Presence{}, nil
}

// TestCommandOnAnOrderWithoutAStreamCostsNoGrainCall: continue and
// rebuild-projection of an id without a stream answer exactly what the
// grain's own NOT_FOUND answers, without calling it; an id with a stream
// reaches the grain; a store that does not answer is 503
// STORE_UNAVAILABLE, still without a grain call. The check never reads the
// read model.
func TestCommandOnAnOrderWithoutAStreamCostsNoGrainCall(t *testing.T) {
	for _, path := range []string{"continue", "rebuild-projection"} {
		t.Run(path, func(t *testing.T) {
			// Today's answer: the grain finds no stream.
			grainSide := newEnv(t)
			grainSide.orders.err = fmt.Errorf("%s order ord-none: %w", path, workflow.ErrNotFound)
			want := grainSide.do("POST", "/orders/ord-none/"+path, "{}")
			require.Equal(t, http.StatusNotFound, want.Code)
			require.Equal(t, 1, grainSide.orders.calls())

			streams := &fakeStreams{exists: map[string]bool{"ord-1": true}}
			e := newEnv(t, func(c *Config) { c.Streams = streams })
			e.rm.err = fmt.Errorf("the read model must not be read")
			got := e.do("POST", "/orders/ord-none/"+path, "{}")
			require.Equal(t, want.Code, got.Code)
			require.Equal(t, want.Body.String(), got.Body.String(), "the same reply as the grain's")
			require.Equal(t, want.Header().Get("Retry-After"), got.Header().Get("Retry-After"))
			require.Zero(t, e.orders.calls(), "no grain call, so no cold activation")
			require.Equal(t, 1, streams.calls)

			require.Equal(t, http.StatusOK, e.do("POST", "/orders/ord-1/"+path, "{}").Code)
			require.Equal(t, 1, e.orders.calls(), "an order with a stream reaches its grain")

			streams.mu.Lock()
			streams.err = fmt.Errorf("check: %w", eventstore.ErrUnavailable)
			streams.mu.Unlock()
			w := e.do("POST", "/orders/ord-1/"+path, "{}")
			require.Equal(t, http.StatusServiceUnavailable, w.Code)
			require.Equal(t, ReasonStoreUnavailable, decodeError(t, w).Reason)
			require.Equal(t, 1, e.orders.calls(), "no grain call when the check fails")

			// A malformed id or body is refused before the check.
			require.Equal(t, http.StatusBadRequest, e.do("POST", "/orders/ord-1/"+path, `{"orderId":"other"}`).Code)
			require.Equal(t, 3, streams.calls)
		})
	}
}
