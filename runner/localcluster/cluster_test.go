package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fake node binaries: they print what the real ones print at start and
// then wait to be signalled. They parse -node like the real processes.
const parseNode = `#!/bin/sh
echo "args $*"
node=
while [ $# -gt 0 ]; do case "$1" in -node) node=$2; shift 2;; *) shift;; esac; done
`

const fakeAPI = parseNode + `echo "incarnation $node $$"
echo "shoppingmall-ready kind=http node=$node"
echo "shoppingmall-ready kind=object-route node=$node target=workflow-a"
echo "shoppingmall-ready kind=object-route node=$node target=workflow-b"
exec sleep 600
`

const fakeWorkflow = parseNode + `echo "incarnation $node $$"
echo '{"time":"t","level":"INFO","msg":"order-workflow started","node":"'$node'","member":"m"}'
exec sleep 600
`

// silentAPI never announces readiness.
const silentAPI = parseNode + `echo "incarnation $node $$" >&2
exec sleep 600
`

const crashingWorkflow = parseNode + `echo "cannot start $node" >&2
exit 3
`

func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	return p
}

func startFake(t *testing.T, api, workflow string, poll Poll) (*Cluster, string, error) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seeded := ""
	c, err := Start(ctx, Config{
		RunDir:      filepath.Join(dir, "run"),
		APIBin:      script(t, dir, "api", api),
		WorkflowBin: script(t, dir, "workflow", workflow),
		SelfCheck:   true,
		Fixtures:    true,
		Poll:        poll,
		StopGrace:   5 * time.Second,
		Logf:        t.Logf,
		BeforeNodes: func(_ context.Context, url string) error { seeded = url; return nil },
	})
	if err == nil {
		t.Cleanup(func() { _ = c.Stop() })
		assert.Equal(t, c.RedisURL(), seeded, "BeforeNodes ran with the cluster's Redis")
	}
	return c, filepath.Join(dir, "run"), err
}

func pidFile(t *testing.T, runDir, node string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, "pids", node+".pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

func TestClusterStartKillRestartStop(t *testing.T) {
	c, runDir, err := startFake(t, fakeAPI, fakeWorkflow, Poll{Interval: 20 * time.Millisecond, Attempts: 500})
	require.NoError(t, err)

	all := append(append([]string(nil), APINodes...), WorkflowNodes...)
	for _, n := range all {
		require.True(t, c.Running(n), n)
		assert.Equal(t, c.PID(n), pidFile(t, runDir, n), "%s pid file", n)
		assert.Equal(t, filepath.Join(runDir, n+".log"), c.LogPath(n))
	}
	assert.Equal(t, c.RedisPID(), pidFile(t, runDir, "redis"))
	assert.True(t, strings.HasPrefix(c.APIURL(APIA), "http://127.0.0.1:"))
	assert.NotEqual(t, c.APIURL(APIA), c.APIURL(APIB))
	assert.Empty(t, c.APIURL(WorkflowA))

	st := c.State()
	require.Len(t, st.Nodes, 4)
	a, ok := st.Node(APIA)
	require.True(t, ok)
	assert.Equal(t, RoleAPI, a.Role)
	assert.Equal(t, c.APIURL(APIA), a.URL)
	assert.True(t, Alive(a.PID, a.StartTime))
	assert.Empty(t, a.OpsURL)
	for _, wf := range WorkflowNodes {
		ops := c.OpsURL(wf)
		require.True(t, strings.HasPrefix(ops, "http://127.0.0.1:"), ops)
		w, ok := st.Node(wf)
		require.True(t, ok)
		assert.Equal(t, ops, w.OpsURL, "the state records %s's ops address", wf)
		// Start waits for the APIs' ready lines, not for the fake
		// workflows' first line.
		want := "-ops-http " + strings.TrimPrefix(ops, "http://") + " "
		require.Eventually(t, func() bool {
			log, err := os.ReadFile(c.LogPath(wf))
			return err == nil && strings.Contains(string(log), want)
		}, 10*time.Second, 10*time.Millisecond, "%s started with its ops address", wf)
	}
	assert.NotEqual(t, c.OpsURL(WorkflowA), c.OpsURL(WorkflowB))
	assert.Empty(t, c.OpsURL(APIA))

	// SIGKILL, then the same name again as a new incarnation.
	old := c.PID(WorkflowA)
	require.NoError(t, c.Kill(WorkflowA))
	assert.False(t, c.Running(WorkflowA))
	assert.False(t, Alive(old, 0), "killed process is gone")
	_, err = os.Stat(filepath.Join(runDir, "pids", WorkflowA+".pid"))
	assert.True(t, os.IsNotExist(err), "pid file of the killed process removed")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorIs(t, c.Restart(ctx, WorkflowB), ErrNodeRunning)
	require.NoError(t, c.Restart(ctx, WorkflowA))
	require.True(t, c.Running(WorkflowA))
	assert.NotEqual(t, old, c.PID(WorkflowA))
	assert.Equal(t, c.PID(WorkflowA), pidFile(t, runDir, WorkflowA))
	// Append mode: both incarnations in one log.
	log, err := os.ReadFile(c.LogPath(WorkflowA))
	require.NoError(t, err)
	assert.Contains(t, string(log), "incarnation workflow-a "+strconv.Itoa(old)+"\n")
	assert.Contains(t, string(log), "incarnation workflow-a "+strconv.Itoa(c.PID(WorkflowA))+"\n")

	// An API restart waits for its own lines written after the restart.
	require.NoError(t, c.Kill(APIB))
	require.NoError(t, c.Restart(ctx, APIB))
	n, err := CountLines(c.LogPath(APIB), 0, Exact(ReadyHTTPLine(APIB)))
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	pids := []int{c.RedisPID()}
	for _, n := range all {
		pids = append(pids, c.PID(n))
	}
	require.NoError(t, c.Stop())
	for _, pid := range pids {
		assert.False(t, Alive(pid, 0), "pid %d left behind", pid)
	}
	entries, err := os.ReadDir(filepath.Join(runDir, "pids"))
	require.NoError(t, err)
	assert.Empty(t, entries, "pid files removed")
}

func TestClusterNotReadyStopsEverything(t *testing.T) {
	start := time.Now()
	_, runDir, err := startFake(t, silentAPI, fakeWorkflow, Poll{Interval: 10 * time.Millisecond, Attempts: 20})
	require.ErrorIs(t, err, ErrNotSeen)
	assert.Contains(t, err.Error(), "shoppingmall-ready kind=http node=api-")
	assert.Less(t, time.Since(start), 20*time.Second)
	entries, rerr := os.ReadDir(filepath.Join(runDir, "pids"))
	require.NoError(t, rerr)
	assert.Empty(t, entries, "every process started was stopped")
}

func TestClusterNodeExitFailsFast(t *testing.T) {
	// The budget would allow minutes; the crash must end the wait at once.
	start := time.Now()
	_, _, err := startFake(t, silentAPI, crashingWorkflow, Poll{Interval: 100 * time.Millisecond, Attempts: 3000})
	require.ErrorIs(t, err, ErrNodeExited)
	assert.Contains(t, err.Error(), "cannot start workflow-")
	assert.Less(t, time.Since(start), 20*time.Second)
}

func TestChildEnvDropsSampleVariables(t *testing.T) {
	got := ChildEnv([]string{"PATH=/bin", "SHOPPINGMALL_SELF_CHECK=1", "HOME=/h", "SHOPPINGMALL_NODE=x"})
	assert.Equal(t, []string{"PATH=/bin", "HOME=/h"}, got)
}

// A node named in NodeBins runs its own executable, the others their
// role's; SetBinary changes what a node's next start runs, back to its
// role's with "". Unknown names and empty paths are refused.
func TestEachNodeRunsItsOwnBinary(t *testing.T) {
	dir := t.TempDir()
	newBuild := script(t, dir, "workflow-new", parseNode+`echo "build new $node"
echo '{"time":"t","level":"INFO","msg":"order-workflow started","node":"'$node'","member":"m"}'
exec sleep 600
`)
	cfg := func(bins map[string]string) Config {
		return Config{
			RunDir: filepath.Join(dir, "run"), APIBin: script(t, dir, "api", fakeAPI), WorkflowBin: script(t, dir, "workflow", fakeWorkflow),
			NodeBins: bins, Poll: Poll{Interval: 20 * time.Millisecond, Attempts: 500}, StopGrace: 5 * time.Second, Logf: t.Logf,
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, bad := range []map[string]string{{"workflow-z": newBuild}, {WorkflowB: ""}} {
		_, err := Start(ctx, cfg(bad))
		require.ErrorIs(t, err, ErrConfig, "%v", bad)
	}
	c, err := Start(ctx, cfg(map[string]string{WorkflowB: newBuild}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	logOf := func(n string) string {
		b, err := os.ReadFile(c.LogPath(n))
		require.NoError(t, err)
		return string(b)
	}
	require.Eventually(t, func() bool { return strings.Contains(logOf(WorkflowB), "build new "+WorkflowB) }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(logOf(WorkflowA), "incarnation "+WorkflowA) }, 10*time.Second, 10*time.Millisecond)
	require.NotContains(t, logOf(WorkflowA), "build new", "workflow-a runs its role's executable")

	// Roll workflow-b back to the role's build, then forward again.
	require.NoError(t, c.Kill(WorkflowB))
	require.NoError(t, c.SetBinary(WorkflowB, ""))
	require.NoError(t, c.Restart(ctx, WorkflowB))
	require.Contains(t, logOf(WorkflowB), "incarnation "+WorkflowB+" "+strconv.Itoa(c.PID(WorkflowB)), "the role's executable")
	require.NoError(t, c.Kill(WorkflowB))
	require.NoError(t, c.SetBinary(WorkflowB, newBuild))
	require.NoError(t, c.Restart(ctx, WorkflowB))
	require.Equal(t, 2, strings.Count(logOf(WorkflowB), "build new "+WorkflowB))
	require.ErrorIs(t, c.SetBinary("workflow-z", newBuild), ErrUnknownNode)
}
