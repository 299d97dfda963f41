package procflags

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func openWith(t *testing.T, args ...string) *Process {
	t.Helper()
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, "workflow-a", 6333)
	require.NoError(t, c.Parse(fs, append([]string{"-log-level", "error"}, args...)))
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	p, err := c.Open()
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// readModelRoundTrips scrapes the process's /metrics over HTTP.
func readModelRoundTrips(t *testing.T, addr string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	require.Contains(t, mfs, "process_cpu_seconds_total", "the process collector")
	require.Contains(t, mfs, "go_goroutines", "the Go collector")
	for _, m := range mfs[telemetry.MetricRedisRoundTrips].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == telemetry.LabelStore && lp.GetValue() == node.StoreReadModel {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s series for store %s", telemetry.MetricRedisRoundTrips, node.StoreReadModel)
	return 0
}

// The process serves its registry on -metrics-http (loopback by default),
// and its stores' Redis calls show there as they happen.
func TestOpenServesMetricsAndCountsTheStores(t *testing.T) {
	srv := redistest.Start(t)
	p := openWith(t, "-redis", srv.URL())
	addr := p.MetricsAddr()
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host, "loopback by default")

	before := readModelRoundTrips(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		_, _, err := p.Stores.ReadModel.Get(ctx, "ord-none")
		require.Error(t, err)
	}
	require.Equal(t, before+3, readModelRoundTrips(t, addr), "one HMGET round trip per read-model Get")
}

func TestMetricsOffServesNothing(t *testing.T) {
	p := openWith(t, "-redis", "redis://127.0.0.1:1/0", "-metrics-http", "off")
	require.Empty(t, p.MetricsAddr())
	require.NotNil(t, p.Metrics, "still counted, served nowhere")
}

func TestTakenMetricsAddressFailsOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Register(fs, "workflow-a", 6333)
	require.NoError(t, c.Parse(fs, []string{"-log-level", "error", "-redis", "redis://127.0.0.1:1/0", "-metrics-http", ln.Addr().String()}))
	prev := slog.Default()
	defer slog.SetDefault(prev)
	_, err = c.Open()
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "metrics listen"), err.Error())
}
