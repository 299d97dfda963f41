// Package redistest starts a private redis-server for one test and stops
// it, by PID, when the test ends.
//
// It is test support: import it only from _test.go files. It exists apart
// from package redisserver so that the binaries that start Redis servers
// (the local cluster, the bench, the soak) do not link package testing.
// It must not import any package of this module but redisserver.
package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// startTimeout bounds the start: a healthy redis-server answers PING
// within milliseconds.
const startTimeout = 15 * time.Second

// Start starts a non-persistent server on a unix socket in a short
// temporary directory and stops it when the test ends. A missing binary
// fails the test: store tests must run against a real server.
func Start(t testing.TB) *redisserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := redisserver.Start(ctx, redisserver.Config{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop redis-server pid=%d: %v", s.PID(), err)
		}
	})
	t.Logf("redis-server pid=%d addr=%s", s.PID(), s.Addr())
	return s
}
