package localcluster

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeMetricsAPI and fakeMetricsWorkflow report the metrics address they
// got through their environment.
const fakeMetricsAPI = parseNode + `echo "env-metrics $node ${SHOPPINGMALL_METRICS_HTTP:-none}"
echo "shoppingmall-ready kind=http node=$node"
echo "shoppingmall-ready kind=object-route node=$node target=workflow-a"
echo "shoppingmall-ready kind=object-route node=$node target=workflow-b"
exec sleep 600
`

const fakeMetricsWorkflow = parseNode + `echo "env-metrics $node ${SHOPPINGMALL_METRICS_HTTP:-none}"
echo '{"time":"t","level":"INFO","msg":"order-workflow started","node":"'$node'","member":"m"}'
exec sleep 600
`

// Every node gets a loopback metrics address of its own through its
// environment (not its command line: an older binary without
// -metrics-http still starts), and the state records it.
func TestEveryNodeGetsItsOwnLoopbackMetricsAddress(t *testing.T) {
	t.Setenv(MetricsHTTPEnv, "0.0.0.0:9999")
	c, _, err := startFake(t, fakeMetricsAPI, fakeMetricsWorkflow, Poll{Interval: 20 * time.Millisecond, Attempts: 500})
	require.NoError(t, err)
	st := c.State()
	seen := map[string]string{}
	for _, name := range append(append([]string{}, APINodes...), WorkflowNodes...) {
		u := c.MetricsURL(name)
		require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), "%s: %s", name, u)
		require.NotContains(t, []string{c.APIURL(name), c.AdminURL(name), c.OpsURL(name)}, u, "a listener of its own")
		require.NotContains(t, seen, u, "%s shares %s with %s", name, u, seen[u])
		seen[u] = name
		ps, ok := st.Node(name)
		require.True(t, ok)
		require.Equal(t, u, ps.MetricsURL, "the state records %s's metrics address", name)
		// Start waits for the APIs' readiness lines, not for the fake
		// workflows' first line: wait for that line with a deadline.
		want := "env-metrics " + name + " " + strings.TrimPrefix(u, "http://")
		var log string
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(c.LogPath(name))
			log = string(b)
			return err == nil && strings.Contains(log, want)
		}, 10*time.Second, 10*time.Millisecond, "the runner's address wins over the caller's: %s's log has no %q", name, want)
		require.NotContains(t, strings.SplitN(log, "\n", 2)[0], "-metrics-http", "not on the command line")
	}
	require.Empty(t, c.MetricsURL("no-such-node"))
}
