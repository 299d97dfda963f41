package admintest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
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
			err := cmd.Run()
			t.Log(out.String())
			require.NoError(t, ctx.Err(), "the process did not stop by itself")
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "exits with an error, got %v", err)
			require.NotZero(t, exit.ExitCode())
			require.Contains(t, out.String(), "refusing to start")
			require.Contains(t, out.String(), "append-only file is off")
		})
	}
}
