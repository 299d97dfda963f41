package localcluster_test

// Real processes against a real redis-server with its append-only file,
// as `make cluster-up` runs them. An external test package: it seeds the
// demo catalogue through actors/commerce, which package cluster itself
// must not import.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// seedDemo writes the demo catalogue after the cluster started, as
// clusterctl does, retrying while Redis still loads its data.
func seedDemo(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, applySeed(ctx, url))
}

func applySeed(ctx context.Context, url string) error {
	rc, err := redisurl.NewClient(url, redisurl.Options{})
	if err != nil {
		return err
	}
	defer rc.Close()
	store, err := commerce.NewRedis(commerce.Config{Client: rc})
	if err != nil {
		return err
	}
	return store.ApplySeedRetrying(ctx, commerce.DemoSeed(), nil)
}

func clusterConfig(t *testing.T, runDir string) localcluster.Config {
	api, wf := proctest.Binaries(t)
	return localcluster.Config{
		RunDir: runDir, APIBin: api, WorkflowBin: wf,
		RedisPersist: true,
		Env:          localcluster.ChildEnv(os.Environ()),
		StopGrace:    20 * time.Second,
		Logf:         t.Logf,
	}
}

func startCluster(t *testing.T, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	seedDemo(t, c.RedisURL())
	return c
}

// fillerKeys makes the append-only file take about a second to load:
// Redis answers LOADING meanwhile (it serves clients every 1024 replayed
// commands), long after redisserver.Start, which only asks INFO, has
// returned and the nodes have started.
const fillerKeys = 600_000

// fillScript writes keys server-side: the append-only file records each
// SET, as many commands to replay as a client would have sent, without a
// client's round trips.
var fillScript = redis.NewScript(`for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('SET', 'test-filler:' .. i, 'x') end return 0`)

func fill(t *testing.T, url string) {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	rc := redis.NewClient(opt)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const batch = 50_000
	for i := 0; i < fillerKeys; i += batch {
		require.NoError(t, fillScript.Run(ctx, rc, nil, i, i+batch-1).Err())
	}
}

type reply struct {
	status int
	body   map[string]any
	raw    string
}

func call(method, url, body string) (reply, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: res.StatusCode, raw: string(bytes.TrimSpace(b))}
	_ = json.Unmarshal(b, &r.body)
	return r, nil
}

func startOrder(t *testing.T, api, key string) string {
	t.Helper()
	r, err := call(http.MethodPost, api+"/orders", fmt.Sprintf(`{"cartId":%q,"shippingAddressId":"addr-1","paymentMethodId":%q,"idempotencyKey":%q}`,
		commerce.DemoCartOK, commerce.DemoMethodOK, key))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	id, _ := r.body["orderId"].(string)
	require.NotEmpty(t, id, r.raw)
	return id
}

func orderStatus(api, id string) (string, error) {
	r, err := call(http.MethodGet, api+"/orders/"+id, "")
	if err != nil {
		return "", err
	}
	if r.status != http.StatusOK {
		return "", fmt.Errorf("GET /orders/%s: %d %s", id, r.status, r.raw)
	}
	st, _ := r.body["state"].(map[string]any)
	s, _ := st["status"].(string)
	return s, nil
}

// waitFor polls cond every 50 ms until it holds or d has passed; cond's
// string says what was last seen.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, d, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitTerminal(t *testing.T, api, id string) string {
	t.Helper()
	var last string
	waitFor(t, 20*time.Second, "order "+id+" terminal", func() (bool, string) {
		s, err := orderStatus(api, id)
		if err != nil {
			return false, err.Error()
		}
		last = s
		return s == "Confirmed" || s == "Failed", s
	})
	return last
}

// readyz GETs a /readyz and reports its status and body.
func readyz(base string) (int, string) {
	r, err := call(http.MethodGet, base+"/readyz", "")
	if err != nil {
		return 0, err.Error()
	}
	return r.status, r.raw
}

func wantReadyz(t *testing.T, base string, want int, contains string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%s/readyz answers %d", base, want), func() (bool, string) {
		code, body := readyz(base)
		return code == want && strings.Contains(body, contains), fmt.Sprintf("%d %s", code, body)
	})
}

// `make cluster-up`, `make cluster-down`, `make cluster-up` on the same
// run dir: the second start comes up on the Redis that reloads its
// append-only file, still serves the order written before, and takes new
// ones.
//
// With an archive (ARCHIVE=1): each start runs its PostgreSQL on the run
// dir's data, every node opens it, and each stop leaves no server behind.
func TestClusterRestartOnSameRunDirKeepsOrders(t *testing.T) {
	runDir := t.TempDir()
	// The archive's server runs as an unprivileged user, who must reach
	// the run dir through the test's own folders.
	require.NoError(t, os.Chmod(filepath.Dir(runDir), 0o755))
	require.NoError(t, os.Chmod(runDir, 0o755))
	cfg := clusterConfig(t, runDir)
	cfg.Archive = true

	first := startCluster(t, cfg)
	archived := first.State().Archive
	require.NotZero(t, archived.PID, "the archive runs")
	for _, name := range append(append([]string(nil), localcluster.WorkflowNodes...), localcluster.APINodes...) {
		n, err := localcluster.CountLines(first.LogPath(name), 0, localcluster.MatchFunc("archive open", func(l string) bool {
			return strings.Contains(l, `"msg":"archive open"`)
		}))
		require.NoError(t, err)
		require.Equal(t, 1, n, "%s opened the archive", name)
	}
	id := startOrder(t, first.APIURL(localcluster.APIA), fmt.Sprintf("restart-1-%d", time.Now().UnixNano()))
	status := waitTerminal(t, first.APIURL(localcluster.APIA), id)
	for _, wf := range localcluster.WorkflowNodes {
		// A member that served no order of its own may still be finishing
		// its join on a busy machine: ready within a deadline.
		var last string
		ok := assert.Eventually(t, func() bool {
			code, body := readyz(first.OpsURL(wf))
			last = fmt.Sprintf("%d %s", code, body)
			return code == http.StatusOK
		}, 20*time.Second, 50*time.Millisecond)
		require.True(t, ok, "%s ops /readyz: %s", wf, last)
	}
	fill(t, first.RedisURL())
	require.NoError(t, first.Stop())
	require.False(t, localcluster.Alive(archived.PID, archived.StartTime), "the archive stopped with the cluster")
	_, err := os.Stat(filepath.Join(runDir, "redis"))
	require.NoError(t, err, "the Redis data stays in the run dir")
	_, err = os.Stat(filepath.Join(runDir, "archive", "data", "PG_VERSION"))
	require.NoError(t, err, "and so does the archive's")
	from := map[string]int64{}
	for _, wf := range localcluster.WorkflowNodes {
		from[wf], err = localcluster.LogSize(first.LogPath(wf))
		require.NoError(t, err)
	}

	second := startCluster(t, cfg)
	// The failure this test exists for: the workflows met a Redis still
	// loading its append-only file, and waited instead of exiting.
	loading := localcluster.MatchFunc("a wait for a LOADING Redis", func(l string) bool {
		return strings.Contains(l, `"msg":"stores do not answer yet; waiting"`) && strings.Contains(l, "LOADING")
	})
	waited := 0
	for _, wf := range localcluster.WorkflowNodes {
		n, err := localcluster.CountLines(second.LogPath(wf), from[wf], loading)
		require.NoError(t, err)
		t.Logf("%s waited %d times for the loading Redis", wf, n)
		waited += n
	}
	require.Positive(t, waited, "no workflow met LOADING: make fillerKeys larger")
	for _, api := range localcluster.APINodes {
		got, err := orderStatus(second.APIURL(api), id)
		require.NoError(t, err)
		require.Equal(t, status, got, "the order written before the restart, read through %s", api)
	}
	id2 := startOrder(t, second.APIURL(localcluster.APIB), fmt.Sprintf("restart-2-%d", time.Now().UnixNano()))
	require.NotEqual(t, id, id2)
	require.Equal(t, "Confirmed", waitTerminal(t, second.APIURL(localcluster.APIB), id2))
	st := second.State()
	require.NotZero(t, st.Archive.PID, "the archive runs again on its data")
	require.NotEqual(t, archived.PID, st.Archive.PID)
	for _, wf := range localcluster.WorkflowNodes {
		n, ok := st.Node(wf)
		require.True(t, ok)
		require.Equal(t, second.OpsURL(wf), n.OpsURL, "localcluster.json records %s's ops address", wf)
	}
}

// A process started while Redis is down listens, says in its log that it
// waits, answers /readyz 503, and becomes ready once Redis is back; the
// processes already running ride the same outage out and are ready again
// without a restart.
func TestProcessStartedWhileRedisIsDownBecomesReady(t *testing.T) {
	cfg := clusterConfig(t, t.TempDir())
	// The seeded carts must survive the SIGKILL below. With everysec a
	// write that arrives while a background fsync still runs is answered
	// before Redis writes it to the file (postponed for up to 2 s), so a
	// process kill on a busy disk can lose it.
	cfg.RedisAppendFsync = "always"
	c := startCluster(t, cfg)
	apiA, apiB := c.APIURL(localcluster.APIA), c.APIURL(localcluster.APIB)
	wfA, wfB := c.OpsURL(localcluster.WorkflowA), c.OpsURL(localcluster.WorkflowB)
	wantReadyz(t, apiA, http.StatusOK, `"status":"ready"`)
	wantReadyz(t, wfA, http.StatusOK, `"status":"ready"`)
	pidA, pidWfA := c.PID(localcluster.APIA), c.PID(localcluster.WorkflowA)

	require.NoError(t, c.KillRedis())
	require.NoError(t, c.Kill(localcluster.APIB))
	require.NoError(t, c.Kill(localcluster.WorkflowB))
	wfLogFrom, err := localcluster.LogSize(c.LogPath(localcluster.WorkflowB))
	require.NoError(t, err)
	apiLogFrom, err := localcluster.LogSize(c.LogPath(localcluster.APIB))
	require.NoError(t, err)

	// Restart waits for the new incarnation's readiness lines, which it
	// can only print once Redis is back.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	restarted := make(chan error, 2)
	for _, n := range []string{localcluster.WorkflowB, localcluster.APIB} {
		go func() { restarted <- c.Restart(ctx, n) }()
	}

	wantReadyz(t, wfB, http.StatusServiceUnavailable, `"stores":"node: stores unavailable`)
	wantReadyz(t, apiB, http.StatusServiceUnavailable, `starting: the stores do not answer`)
	wantReadyz(t, wfA, http.StatusServiceUnavailable, `"stores":"node: stores unavailable`)
	wantReadyz(t, apiA, http.StatusServiceUnavailable, `the stores do not answer`)
	waiting := localcluster.MatchFunc("stores do not answer yet; waiting", func(l string) bool {
		return strings.Contains(l, `"msg":"stores do not answer yet; waiting"`)
	})
	for n, from := range map[string]int64{localcluster.WorkflowB: wfLogFrom, localcluster.APIB: apiLogFrom} {
		require.NoError(t, localcluster.WaitLines(ctx, c.LogPath(n), from, localcluster.Poll{Interval: 50 * time.Millisecond, Attempts: 200},
			localcluster.Want{Line: waiting, AtLeast: 2}), "%s logs that it waits, with backoff", n)
	}
	select {
	case err := <-restarted:
		t.Fatalf("a node became ready while Redis was down: %v", err)
	default:
	}

	require.NoError(t, c.RestartRedis(ctx))
	for range 2 {
		require.NoError(t, <-restarted)
	}
	for _, base := range []string{apiA, apiB, wfA, wfB} {
		wantReadyz(t, base, http.StatusOK, `"status":"ready"`)
	}
	require.Equal(t, pidA, c.PID(localcluster.APIA), "api-a rode the outage out")
	require.Equal(t, pidWfA, c.PID(localcluster.WorkflowA), "workflow-a rode the outage out")
	id := startOrder(t, apiB, fmt.Sprintf("after-outage-%d", time.Now().UnixNano()))
	require.Equal(t, "Confirmed", waitTerminal(t, apiA, id))
}
