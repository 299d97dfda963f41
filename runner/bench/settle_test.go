package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gaugeServer serves a /metrics with the grains-hosted gauge at *hosted.
func gaugeServer(t *testing.T, hosted *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE %s gauge\n%s %d\n", metricGrainsHosted, metricGrainsHosted, hosted.Load())
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The next phase starts once every workflow's grains passivated, not
// before.
func TestSettlePassivationsWaitsForEveryGaugeAtZero(t *testing.T) {
	var a, b atomic.Int64
	a.Store(3)
	b.Store(1)
	urls := []string{gaugeServer(t, &a), gaugeServer(t, &b)}
	done := make(chan error, 1)
	go func() {
		done <- settlePassivations(context.Background(), urls, time.Second, 20*time.Second, "open loop")
	}()
	a.Store(0)
	select {
	case err := <-done:
		t.Fatalf("returned while workflow b still hosted a grain: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	b.Store(0)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("did not return once both gauges read 0")
	}
}

// Grains that never passivate fail the run, instead of measuring the
// next phase beside their releases.
func TestSettlePassivationsFailsPastItsBound(t *testing.T) {
	var a atomic.Int64
	a.Store(2)
	err := settlePassivations(context.Background(), []string{gaugeServer(t, &a)}, 100*time.Millisecond, 200*time.Millisecond, "ceiling")
	require.ErrorContains(t, err, "2 grains still hosted")
}

// A binary without the gauge (an older baseline) gets the idle timeout
// and a second, and no error.
func TestSettlePassivationsWithoutTheGauge(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	start := time.Now()
	require.NoError(t, settlePassivations(context.Background(), []string{srv.URL}, 100*time.Millisecond, time.Minute, "open loop"))
	require.GreaterOrEqual(t, time.Since(start), 1100*time.Millisecond)
	require.NoError(t, settlePassivations(context.Background(), []string{srv.URL}, 0, time.Minute, "open loop"), "0 never passivates: nothing to wait for")
}
