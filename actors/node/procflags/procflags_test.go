package procflags

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
)

func TestCommandLineWinsOverEnvironment(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, "api-a", 6331)
	require.NoError(t, fs.Parse([]string{"-node", "api-b"}))
	env := map[string]string{
		"SHOPPINGMALL_NODE": "ignored", "SHOPPINGMALL_REDIS_EVENTS": "redis://x:1/0",
		"SHOPPINGMALL_REFRESH": "250ms", "SHOPPINGMALL_SEEDS": "h:1, h:2,,",
	}
	require.NoError(t, envDefaults(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.Equal(t, "api-b", c.Node)
	require.Equal(t, "redis://x:1/0", c.Redis.Events)
	require.Equal(t, 250*time.Millisecond, c.Refresh)
	require.Equal(t, []string{"h:1", "h:2"}, c.Cluster(nil).Seeds)
}

func TestBadEnvironmentValueIsAnError(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Register(fs, "workflow-a", 6333)
	require.NoError(t, fs.Parse(nil))
	err := envDefaults(fs, func(k string) (string, bool) { return "soon", k == "SHOPPINGMALL_REFRESH" })
	require.ErrorContains(t, err, "SHOPPINGMALL_REFRESH")
}

func TestTestProviderRefusedAcrossProcesses(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Register(fs, "workflow-a", 6333)
	require.Error(t, c.Parse(fs, []string{"-provider", "test"}))
	c.LogFormat = "yaml"
	_, err := c.Logger()
	require.Error(t, err)
}

// A process opens while its Redis is down, and waits for it: nothing at
// start-up gives up on a store that does not answer yet.
func TestOpenDoesNotWaitForRedis(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Register(fs, "workflow-a", 6333)
	require.NoError(t, c.Parse(fs, []string{"-redis", "redis://127.0.0.1:1/0", "-log-level", "error"}))
	defer slog.SetDefault(slog.Default())
	p, err := c.Open()
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = p.WaitStores(ctx, node.NewReadiness(p.Stores))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, node.ErrStoresUnavailable)
}

// Production wiring has no fixture store: only a main that sets
// Fixtures from its runner-only flag (-fixtures, -self-check) gets one.
func TestOpenBuildsTheFixtureStoreOnlyWhenAsked(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	for _, fixtures := range []bool{false, true} {
		var c Common
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.Register(fs, "workflow-a", 6333)
		require.NoError(t, c.Parse(fs, []string{"-redis", "redis://127.0.0.1:1/0", "-log-level", "error", "-metrics-http", "off"}))
		c.Fixtures = fixtures
		p, err := c.Open()
		require.NoError(t, err)
		require.Equal(t, fixtures, p.Stores.Fixtures != nil, "fixtures asked: %v", fixtures)
		p.Close()
	}
}

func TestClusterTLSFlagsReachTheClusterConfig(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, "workflow-a", 6333)
	t.Setenv("SHOPPINGMALL_CLUSTER_TLS_CA", "certs/ca.pem")
	require.NoError(t, c.Parse(fs, []string{"-cluster-tls-cert", "certs/cert.pem", "-cluster-tls-key", "certs/key.pem"}))
	tls := c.Cluster(nil).TLS
	require.Equal(t, "certs/cert.pem", tls.CertFile)
	require.Equal(t, "certs/key.pem", tls.KeyFile)
	require.Equal(t, "certs/ca.pem", tls.CAFile)

	var half Common
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	half.Register(fs, "workflow-a", 6333)
	require.ErrorContains(t, half.Parse(fs, []string{"-cluster-tls-cert", "certs/cert.pem"}), "go together")
}

// The replica count of WAIT is configured, by flag or environment, and
// reaches the stores' options; a negative one is refused at start-up.
func TestRedisWaitFlags(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, "workflow-a", 6333)
	require.NoError(t, c.Parse(fs, nil))
	require.Equal(t, redisurl.Replication{Replicas: 0, Timeout: time.Second}, c.Replication(), "no WAIT by default")

	c = Common{}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, "api-a", 6331)
	t.Setenv("SHOPPINGMALL_REDIS_WAIT_REPLICAS", "1")
	require.NoError(t, c.Parse(fs, []string{"-redis-wait-timeout", "250ms"}))
	require.Equal(t, redisurl.Replication{Replicas: 1, Timeout: 250 * time.Millisecond}, c.Replication())

	c = Common{}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs, "api-a", 6331)
	require.ErrorIs(t, c.Parse(fs, []string{"-redis-wait-replicas", "-1"}), redisurl.ErrBadReplication)
}
