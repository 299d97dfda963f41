package admintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
	"github.com/shoppingmall-go/shoppingmall/runner/pgserver/pgtest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// Both process kinds started with -require-durable-store on a Redis that
// keeps nothing on disk refuse to start, and say why; the same processes
// without the flag would serve it. The refusal is fast: a configuration
// does not fix itself by waiting.
func TestProcessesRefuseAStoreWithoutTheAOF(t *testing.T) {
	apiBin, wfBin := proctest.Binaries(t)
	srv := redistest.Start(t)
	for _, p := range []struct {
		name string
		bin  string
		args []string
	}{
		{"commerce-api", apiBin, []string{"-http", "127.0.0.1:0", "-automanaged-port", "0"}},
		{"order-workflow", wfBin, []string{"-ops-http", "127.0.0.1:0", "-automanaged-port", "0"}},
	} {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"-redis", srv.URL(), "-require-durable-store", "-metrics-http", "off", "-log-format", "text"}, p.args...)
			cmd := exec.CommandContext(ctx, p.bin, args...)
			cmd.Env = append(cmd.Environ(), "SHOPPINGMALL_ADMIN_TOKEN=", "SHOPPINGMALL_ORDER_ID_SECRET=admintest-order-id-secret")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			requireRefused(t, ctx, cmd.Run(), out.String(), "refusing to start", "append-only file is off")
		})
	}
}

// Both process kinds given an -archive they cannot open refuse to start,
// fast, and say why; given a live PostgreSQL they open it, migrate its
// schema and serve.
func TestProcessesOpenTheArchiveOrRefuseToStart(t *testing.T) {
	apiBin, wfBin := proctest.Binaries(t)
	srv := redistest.Start(t)
	pg := pgtest.Start(t)
	// A port nothing listens on, and each process's automanaged port,
	// which is its cluster's only seed: each serves alone.
	ports, err := redisserver.FreePorts(3)
	require.NoError(t, err)
	closed := ports[:1]
	for i, p := range []struct {
		name string
		bin  string
		args []string
	}{
		{"commerce-api", apiBin, []string{"-http", "127.0.0.1:0", "-admin-http", "127.0.0.1:0"}},
		{"order-workflow", wfBin, []string{"-ops-http", "127.0.0.1:0"}},
	} {
		seed := fmt.Sprintf("127.0.0.1:%d", ports[1+i])
		p.args = append(p.args, "-automanaged-port", strconv.Itoa(ports[1+i]), "-seeds", seed)
		t.Run(p.name, func(t *testing.T) {
			run := func(ctx context.Context, archiveURL string) (*exec.Cmd, *syncBuffer) {
				args := append([]string{"-redis", srv.URL(), "-archive", archiveURL, "-metrics-http", "off", "-log-format", "text"}, p.args...)
				cmd := exec.CommandContext(ctx, p.bin, args...)
				cmd.Env = append(cmd.Environ(), "SHOPPINGMALL_ADMIN_TOKEN=", "SHOPPINGMALL_ORDER_ID_SECRET=admintest-order-id-secret")
				out := &syncBuffer{}
				cmd.Stdout, cmd.Stderr = out, out
				return cmd, out
			}

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd, out := run(ctx, fmt.Sprintf("postgres://shoppingmall@127.0.0.1:%d/shoppingmall?sslmode=disable", closed[0]))
			requireRefused(t, ctx, cmd.Run(), out.String(), "refusing to start: -archive", "archive: unavailable")

			cmd, out = run(ctx, pg.URL())
			require.NoError(t, cmd.Start())
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "archive open") },
				30*time.Second, 20*time.Millisecond, "the process opens the archive")
			c, err := pgx.Connect(ctx, pg.URL())
			require.NoError(t, err)
			defer c.Close(context.Background())
			var version int64
			require.NoError(t, c.QueryRow(ctx, "SELECT max(version_id) FROM goose_db_version").Scan(&version))
			require.Equal(t, archive.SchemaVersion(), version, "the schema is migrated")
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			err = cmd.Wait()
			t.Log(out.String())
			require.NoError(t, err, "and stops cleanly")
		})
	}
}

// A workflow member with a retention and no archive refuses to start:
// it would move finished orders out of Redis with nowhere to keep them;
// so does one whose grains never passivate, since an order is archived
// only once no grain hosts it.
// (With -archive it starts: TestProcessesOpenTheArchiveOrRefuseToStart.)
func TestARetentionWithoutTheArchiveRefusesToStart(t *testing.T) {
	_, wfBin := proctest.Binaries(t)
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, wfBin, "-redis", srv.URL(), "-retention", "168h", "-ops-http", "127.0.0.1:0",
		"-metrics-http", "off", "-log-format", "text")
	out, err := cmd.CombinedOutput()
	requireRefused(t, ctx, err, string(out), "refusing to start: -retention 168h0m0s moves finished orders out of Redis, and needs -archive")

	// Nor with grains that never passivate: it would archive nothing.
	cmd = exec.CommandContext(ctx, wfBin, "-redis", srv.URL(), "-retention", "168h", "-archive", "postgres://nobody@127.0.0.1:1/none",
		"-idle-timeout", "0", "-ops-http", "127.0.0.1:0", "-metrics-http", "off", "-log-format", "text")
	out, err = cmd.CombinedOutput()
	requireRefused(t, ctx, err, string(out), "refusing to start: -retention 168h0m0s archives an order only once its grain passivated, which -idle-timeout 0 never does")
}

// requireRefused checks a process that refused to start: it stopped by
// itself, before ctx's end, with a non-zero exit and out saying each of
// wants.
func requireRefused(t *testing.T, ctx context.Context, err error, out string, wants ...string) {
	t.Helper()
	t.Log(out)
	require.NoError(t, ctx.Err(), "the process did not stop by itself")
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exits with an error, got %v", err)
	require.NotZero(t, exit.ExitCode())
	for _, w := range wants {
		require.Contains(t, out, w)
	}
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
