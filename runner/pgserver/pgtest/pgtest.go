// Package pgtest starts a private PostgreSQL server for one test and
// stops it, by PID, when the test ends.
//
// It is test support: import it only from _test.go files. It exists apart
// from package pgserver so that the binaries that start servers do not
// link package testing. It must not import any package of this module but
// pgserver.
package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/pgserver"
)

// startTimeout bounds initdb and the start: both take about a second.
const startTimeout = 60 * time.Second

// Start starts a non-durable server on a free port in a temporary folder
// and stops it when the test ends. A missing installation fails the test:
// the archive's tests must run against a real server.
func Start(t testing.TB) *pgserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := pgserver.Start(ctx, pgserver.Config{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop postgres pid=%d: %v", s.PID(), err)
		}
	})
	t.Logf("postgres pid=%d addr=%s", s.PID(), s.Addr())
	return s
}
