package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// fakeOrderAPI answers POST /orders 201 Created and GET /orders/o-1 with
// Confirmed once terminalAfter GETs have been answered Created. With
// waits it is the API with the bounded wait (X-Wait); without, an older
// one that answers every GET plainly.
type fakeOrderAPI struct {
	waits bool
	// refuseWait: a current API built without the waiter, which answers
	// 400 to a GET with waitFor.
	refuseWait    bool
	terminalAfter int64
	gets          atomic.Int64
	waitGets      atomic.Int64
	// waitQueries counts GETs that asked for the wait, answered or not.
	waitQueries atomic.Int64
}

func (f *fakeOrderAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"orderId":"o-1","state":{"orderId":"o-1","status":"Created"}}`))
		return
	}
	if r.URL.Query().Has("waitFor") {
		f.waitQueries.Add(1)
		if f.refuseWait {
			w.Header().Set("Content-Type", client.ContentTypeProblem)
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(problemBody(http.StatusBadRequest, "INVALID_ARGUMENT", "", "waitFor: unknown")))
			return
		}
	}
	n := f.gets.Add(1)
	status := "Created"
	if n > f.terminalAfter {
		status = "Confirmed"
	}
	if f.waits && r.URL.Query().Get("waitFor") == "terminal" {
		f.waitGets.Add(1)
		outcome := client.WaitTimeout
		if status == "Confirmed" {
			outcome = client.WaitReached
		}
		w.Header().Set(client.HeaderWait, outcome)
	}
	_, _ = w.Write([]byte(`{"state":{"orderId":"o-1","status":"` + status + `"}}`))
}

func runOne(t *testing.T, api *fakeOrderAPI) orderResult {
	t.Helper()
	_, res := runOrders(t, api, 1)
	r := res.Results[0]
	require.Equal(t, int64(r.Polls), res.Polls)
	require.Equal(t, int64(r.Waits), res.Waits)
	return r
}

// runOrders runs n orders one after another against api.
func runOrders(t *testing.T, api *fakeOrderAPI, n int) (*load, loadResult) {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	l := newLoad(loadConfig{APIs: []string{srv.URL}, Concurrency: 1, Poll: time.Millisecond, PollTimeout: 10 * time.Second, RunID: "t"})
	res := l.run(context.Background(), "t", 0, n, quiet)
	require.Len(t, res.Results, n)
	for _, r := range res.Results {
		require.Empty(t, r.Err)
		require.True(t, r.terminal())
	}
	return l, res
}

// Against the API with the wait, an order takes one wait (two when the
// first times out) and no poll.
func TestLoadWaitsInsteadOfPolling(t *testing.T) {
	api := &fakeOrderAPI{waits: true}
	r := runOne(t, api)
	require.Equal(t, 0, r.Polls)
	require.Equal(t, 1, r.Waits)
	require.EqualValues(t, 1, api.waitGets.Load(), "every GET was a wait")

	api = &fakeOrderAPI{waits: true, terminalAfter: 1}
	r = runOne(t, api)
	require.Equal(t, 0, r.Polls)
	require.Equal(t, 2, r.Waits, "a timed-out wait is followed by another")
}

// Against an API without the wait (an older binary measured with
// -api-bin) the load falls back to polling, and the count says so.
func TestLoadPollsAnAPIWithoutTheWait(t *testing.T) {
	r := runOne(t, &fakeOrderAPI{terminalAfter: 3})
	require.Equal(t, 4, r.Polls)
	require.Equal(t, 0, r.Waits)
}

// The wait's absence is detected once: after the first plain answer every
// GET is a plain poll, and the mode says so.
func TestLoadDetectsAnAPIWithoutTheWaitOnce(t *testing.T) {
	api := &fakeOrderAPI{}
	l, res := runOrders(t, api, 5)
	require.Equal(t, "poll", l.waitMode())
	require.EqualValues(t, 1, api.waitQueries.Load(), "only the first GET asked for the wait")
	require.EqualValues(t, 5, res.Polls, "one poll per order (terminal at once)")
	require.Zero(t, res.Waits)

	api = &fakeOrderAPI{waits: true}
	l, res = runOrders(t, api, 5)
	require.Equal(t, "wait", l.waitMode())
	require.EqualValues(t, 5, api.waitQueries.Load())
	require.EqualValues(t, 5, res.Waits)
	require.Zero(t, res.Polls)
}

// An API that refuses the wait (400 naming waitFor) is polled from then
// on; the refused GET counts as a poll.
func TestLoadPollsAnAPIThatRefusesTheWait(t *testing.T) {
	api := &fakeOrderAPI{refuseWait: true, terminalAfter: 1}
	l, res := runOrders(t, api, 3)
	require.Equal(t, "poll", l.waitMode())
	require.EqualValues(t, 1, api.waitQueries.Load())
	// Order 1: the refused GET, a Created poll, a Confirmed poll; orders 2
	// and 3: one Confirmed poll each.
	require.EqualValues(t, 5, res.Polls)
	require.Zero(t, res.Waits)
}

// The report keeps the poll count (0 with waits) beside the waits, and
// spreads the API's GET reads over GET requests of either kind.
func TestReportCountsPollsAndWaits(t *testing.T) {
	var res loadResult
	for range 10 {
		res.Results = append(res.Results, orderResult{Path: pathSuccess, Status: "Confirmed"})
	}
	res.Waits = 12
	rep := buildReport(options{concurrency: 1, duration: time.Second}, res, snap{}, snap{})
	require.Zero(t, rep.Polls.Total)
	require.Zero(t, rep.Polls.PerOrder)
	require.EqualValues(t, 12, rep.Waits.Total)
	require.InDelta(t, 1.2, rep.Waits.PerOrder, 1e-9)
}
