package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The schedule is the seed's alone: a failing soak reruns with the same
// faults at the same offsets.
func TestScheduleIsTheSeeds(t *testing.T) {
	a, b := schedule(42, 10*time.Minute), schedule(42, 10*time.Minute)
	require.Equal(t, a, b)
	require.NotEqual(t, a, schedule(43, 10*time.Minute))
}

// Every fault kind occurs in every run of at least coverEveryKind, the
// CI soak's 60 s among them, whatever the seed: the first faults are one
// of each kind, in an order the seed shuffles. Each fault keeps its
// bounds, and after the first round the faults are spaced as usual.
func TestScheduleCoversEveryKind(t *testing.T) {
	require.LessOrEqual(t, coverEveryKind, 60*time.Second, "the CI soak (-duration 60s) must see every kind")
	firstOrders := map[string]bool{}
	for _, d := range []time.Duration{coverEveryKind, 60 * time.Second, 2 * time.Minute, 10 * time.Minute} {
		for seed := range uint64(200) {
			s := schedule(seed, d)
			require.GreaterOrEqual(t, len(s), len(faultKinds), "seed %d, %s: %v", seed, d, s)
			var first []string
			for _, f := range s[:len(faultKinds)] {
				first = append(first, f.Kind)
			}
			require.ElementsMatch(t, faultKinds, first, "seed %d, %s: the first round is one of each kind", seed, d)
			firstOrders[strings.Join(first, ",")] = true
			for i, f := range s {
				require.Equal(t, i+1, f.N)
				require.LessOrEqual(t, f.At, d-scheduleTail, "seed %d, %s: %s", seed, d, f)
				if i > 0 {
					gap := f.At - s[i-1].At
					require.GreaterOrEqual(t, gap, minFirstGap, "seed %d, %s: %s", seed, d, f)
					if i >= len(faultKinds) {
						require.GreaterOrEqual(t, gap, scheduleGap, "seed %d, %s: %s", seed, d, f)
					}
				}
				requireBounds(t, f)
			}
		}
	}
	require.Greater(t, len(firstOrders), 100, "the seed shuffles the first round")
}

func requireBounds(t *testing.T, f Fault) {
	t.Helper()
	switch f.Kind {
	case faultWorkflowPause:
		require.GreaterOrEqual(t, f.Hold, time.Second)
		require.LessOrEqual(t, f.Hold, 5*time.Second)
		require.Contains(t, workflowNodes, f.Target)
	case faultStoreStall:
		require.Greater(t, f.Hold, workflowLease, "a store stall outlasts the lease: %s", f)
		require.LessOrEqual(t, f.Hold, workflowLease+5*time.Second)
	case faultOverload:
		require.GreaterOrEqual(t, f.Hold, burstMinHold)
		require.LessOrEqual(t, f.Hold, burstMaxHold)
	case faultPartition:
		require.Contains(t, localcluster.APINodes, f.Target)
		require.Contains(t, workflowNodes, f.Peer)
		require.Equal(t, partitionHold, f.Hold)
	}
}

// The burst is an open loop with bounds: against an API that answers
// nothing for a long time it offers starts at its rate, never has more
// than burstInFlight in flight, drops the arrivals over that bound,
// stops at its hold, logs every start it sent, and retries the keys
// left without a final answer.
func TestBurstIsBounded(t *testing.T) {
	var inFlight, maxInFlight, served atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		served.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", client.ContentTypeProblem)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"urn:shoppingmall:problem:UNAVAILABLE","title":"Unavailable","status":503,"detail":"busy","code":"UNAVAILABLE","reason":"OVERLOADED"}`))
	}))
	defer srv.Close()
	log := newClientLog()
	ld := &load{log: log, ids: seedIDs{CartLimited: "c1", CartAmple: "c2", CartNoStock: "c3", MethodOK: "m1", MethodDeclined: "m2"},
		runID: "t", retryBy: time.Now()}
	for _, n := range []string{"api-a", "api-b"} {
		ld.apis = append(ld.apis, &client.API{BaseURL: srv.URL, HTTP: srv.Client()})
		ld.names = append(ld.names, n)
	}
	f := &faulter{log: log, ld: ld, seed: 7}
	hold := 1500 * time.Millisecond
	go func() {
		// Answer once the burst has had time to hit its bound.
		time.Sleep(hold + 500*time.Millisecond)
		close(release)
	}()
	began := time.Now()
	ft := f.burst(context.Background(), Fault{N: 1, Kind: faultOverload, Hold: hold})
	f.bg.Wait()
	took := time.Since(began)
	for _, d := range ft.Detail {
		t.Log(d)
	}
	require.True(t, ft.Injected)
	require.True(t, ft.Effective, "the bound was reached")
	require.LessOrEqual(t, maxInFlight.Load(), int64(burstInFlight))
	require.Less(t, took, hold+burstTimeout)
	// Rate × hold arrivals; every start sent is logged, and so is each
	// key's one retry (retryBy has passed).
	starts, _, errs := log.snapshot()
	require.Equal(t, int(served.Load()), starts)
	require.Equal(t, starts, errs["503 OVERLOADED"])
	log.mu.Lock()
	keys := map[string]int{}
	for _, e := range log.events {
		keys[e.Key]++
	}
	log.mu.Unlock()
	first := len(keys)
	require.LessOrEqual(t, first, burstRate*int(hold/time.Millisecond)/1000+burstRate/100)
	require.Equal(t, burstInFlight, first, "every arrival over the bound is dropped while the API answers nothing")
	require.Equal(t, 2*first, starts, "each key without a final answer is retried")
}

// -only keeps the first fault of each kind asked for, alone, brought to
// the front of the run.
func TestOnlyKeepsTheFirstOfEachKind(t *testing.T) {
	s := onlyFirstOf(schedule(7, coverEveryKind), []string{faultRedisKill, faultAPIKill})
	require.Len(t, s, 2)
	kinds := []string{s[0].Kind, s[1].Kind}
	require.ElementsMatch(t, []string{faultRedisKill, faultAPIKill}, kinds)
	for i, f := range s {
		require.Equal(t, i+1, f.N)
		require.Equal(t, scheduleLead+time.Duration(i)*scheduleGap, f.At)
	}
	require.Empty(t, onlyFirstOf(schedule(7, coverEveryKind), []string{faultRedisFailover}), "no failover without -redis-ha")
}

// -strict fails a run whose fault was missing, not injected or without
// effect, or whose orders needed the operator.
func TestStrictProblems(t *testing.T) {
	ok := Fault{N: 1, Kind: faultRedisFailover, Injected: true, Effective: true}
	require.Empty(t, strictProblems([]string{faultRedisFailover}, []Fault{ok}, []Fault{ok}, 0))
	require.Len(t, strictProblems([]string{faultRedisFailover}, nil, nil, 0), 2, "nothing scheduled, the kind missing")
	noEffect := ok
	noEffect.Effective = false
	notInjected := ok
	notInjected.Injected = false
	require.Empty(t, strictProblems(nil, []Fault{ok}, []Fault{noEffect}, 0), "a failover without effect is failoverProblems' alone")
	require.Len(t, failoverProblems([]Fault{noEffect}), 1)
	pause := Fault{N: 2, Kind: faultWorkflowPause, Injected: true}
	require.Len(t, strictProblems(nil, []Fault{pause}, []Fault{pause}, 0), 1, "another kind without effect")
	require.Len(t, strictProblems(nil, []Fault{ok}, []Fault{notInjected}, 0), 1)
	require.Len(t, strictProblems(nil, []Fault{ok}, []Fault{ok}, 3), 1, "orders that needed the operator")
}

// A failover that did not take effect fails the run, strict or not.
func TestAFailoverWithoutEffectIsAProblem(t *testing.T) {
	for _, k := range []string{faultRedisFailover, faultRedisLagging, faultMasterKill} {
		f := Fault{N: 1, Kind: k, Injected: true, Detail: []string{"no promotion: timeout"}}
		require.Len(t, failoverProblems([]Fault{f}), 1, k)
		f.Effective = true
		require.Empty(t, failoverProblems([]Fault{f}), k)
	}
	require.Empty(t, failoverProblems([]Fault{{Kind: faultWorkflowPause, Injected: true}}), "other kinds are judged elsewhere")
}
