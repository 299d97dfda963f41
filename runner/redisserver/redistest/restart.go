package redistest

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// Restartable is a persistent server that a test stops and starts again
// at the same address (a unix socket in a directory of its own), for
// tests of what survives a Redis restart: clients keep their address and
// the data is kept (RDB and AOF in that directory).
type Restartable struct {
	t   testing.TB
	dir string

	mu  sync.Mutex
	srv *redisserver.Server
}

// StartRestartable starts the server; it is stopped, by its PID, and its
// directory removed when the test ends.
func StartRestartable(t testing.TB) *Restartable {
	t.Helper()
	// A short directory name keeps the unix socket path under the
	// sun_path limit; t.TempDir's would not.
	dir, err := os.MkdirTemp("", "rds")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	r := &Restartable{t: t, dir: dir}
	t.Cleanup(func() {
		r.mu.Lock()
		srv := r.srv
		r.mu.Unlock()
		if srv != nil {
			if err := srv.Stop(); err != nil {
				t.Errorf("stop redis-server pid=%d: %v", srv.PID(), err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("redistest: remove %s: %v", dir, err)
		}
	})
	r.start()
	return r
}

// Server is the server running now; its address stays the same across
// restarts.
func (r *Restartable) Server() *redisserver.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

// Restart stops the server by its PID (SIGTERM: it persists on the way
// out) and starts a new one on the same directory and socket. Clients
// see their connections drop and reconnect to the same address.
func (r *Restartable) Restart() {
	r.t.Helper()
	r.Down()
	r.Up()
}

// Down stops the server by its PID (SIGTERM: it persists on the way out)
// and leaves it down: clients of its address are refused until Up.
func (r *Restartable) Down() {
	r.t.Helper()
	old := r.Server()
	if err := old.Stop(); err != nil {
		r.t.Fatalf("redistest: stop redis-server pid=%d: %v", old.PID(), err)
	}
	r.t.Logf("redis-server pid=%d stopped", old.PID())
}

// Up starts a new server on the directory and socket of the one Down
// stopped, with its data.
func (r *Restartable) Up() {
	r.t.Helper()
	r.start()
}

func (r *Restartable) start() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := redisserver.Start(ctx, redisserver.Config{Dir: r.dir, Persist: true})
	if err != nil {
		r.t.Fatalf("%v", err)
	}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	r.t.Logf("redis-server pid=%d addr=%s (restartable)", srv.PID(), srv.Addr())
}
