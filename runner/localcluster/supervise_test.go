package localcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exitingWorkflow runs until a file named after its node appears in the
// directory $EXIT_DIR, then removes it and exits 3, as a workflow member
// that fenced itself does.
const exitingWorkflow = parseNode + `echo "incarnation $node $$"
echo '{"time":"t","level":"INFO","msg":"order-workflow started","node":"'$node'","member":"m"}'
while [ ! -f "$EXIT_DIR/$node" ]; do sleep 0.02; done
rm -f "$EXIT_DIR/$node"
echo "self-fenced: test" >&2
exit 3
`

func startSupervised(t *testing.T, policy RestartPolicy, onRestart func(string, int)) (*Cluster, string) {
	t.Helper()
	dir := t.TempDir()
	exitDir := filepath.Join(dir, "exit")
	require.NoError(t, os.MkdirAll(exitDir, 0o755))
	ctx := t.Context()
	c, err := Start(ctx, Config{
		RunDir:         filepath.Join(dir, "run"),
		APIBin:         script(t, dir, "api", fakeAPI),
		WorkflowBin:    script(t, dir, "workflow", exitingWorkflow),
		Env:            append(os.Environ(), "EXIT_DIR="+exitDir),
		Poll:           Poll{Interval: 20 * time.Millisecond, Attempts: 500},
		StopGrace:      5 * time.Second,
		RestartPolicy:  policy,
		RestartBackoff: 50 * time.Millisecond,
		OnRestart:      onRestart,
		Logf:           t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	return c, exitDir
}

// exitOnItsOwn makes the node's fake process exit 3 by itself.
func exitOnItsOwn(t *testing.T, exitDir, node string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(exitDir, node), nil, 0o644))
}

// A node that exits on its own is started again under the same name, as
// a new incarnation, and is supervised again; one killed on purpose is
// left to its caller until the caller hands it back with Restart.
func TestSupervisorRestartsANodeThatExitsOnItsOwn(t *testing.T) {
	restarted := make(chan string, 4)
	c, exitDir := startSupervised(t, "", func(name string, pid int) { restarted <- name + " " + strconv.Itoa(pid) })
	for _, n := range append(append([]string(nil), APINodes...), WorkflowNodes...) {
		require.True(t, c.Managed(n), "%s is supervised once started", n)
	}

	old := c.PID(WorkflowA)
	exitOnItsOwn(t, exitDir, WorkflowA)
	require.Eventually(t, func() bool { return len(c.Restarts(WorkflowA)) == 1 && c.Running(WorkflowA) }, 10*time.Second, 10*time.Millisecond)
	r := c.Restarts(WorkflowA)[0]
	require.Equal(t, old, r.OldPID)
	require.Equal(t, "exit status 3", r.Exit)
	require.Equal(t, c.PID(WorkflowA), r.NewPID)
	require.NotEqual(t, old, r.NewPID)
	require.GreaterOrEqual(t, r.At.Sub(r.ExitedAt), 50*time.Millisecond, "after the backoff")
	require.Equal(t, WorkflowA+" "+strconv.Itoa(r.NewPID), <-restarted)
	require.True(t, c.Managed(WorkflowA), "the new incarnation is supervised too")
	require.Equal(t, r.NewPID, pidFile(t, c.RunDir(), WorkflowA), "pid file of the new incarnation")
	require.Eventually(t, func() bool {
		n, err := CountLines(c.LogPath(WorkflowA), 0, WorkflowJoined(WorkflowA))
		return err == nil && n == 2
	}, 10*time.Second, 10*time.Millisecond, "same node name, same log, two incarnations")
	st, ok := c.State().Node(WorkflowA)
	require.True(t, ok)
	require.Equal(t, r.NewPID, st.PID, "the state names the new PID")

	// Killed on purpose: the caller holds it; the supervisor stays away.
	killedPID := c.PID(WorkflowB)
	require.NoError(t, c.Kill(WorkflowB))
	require.False(t, c.Managed(WorkflowB))
	require.Never(t, func() bool { return c.Running(WorkflowB) || len(c.Restarts(WorkflowB)) > 0 },
		500*time.Millisecond, 20*time.Millisecond, "the supervisor restarted a node killed on purpose")
	// Restart hands it back: its next exit on its own is the supervisor's.
	require.NoError(t, c.Restart(t.Context(), WorkflowB))
	require.NotEqual(t, killedPID, c.PID(WorkflowB))
	require.True(t, c.Managed(WorkflowB))
	exitOnItsOwn(t, exitDir, WorkflowB)
	require.Eventually(t, func() bool { return len(c.Restarts(WorkflowB)) == 1 && c.Running(WorkflowB) }, 10*time.Second, 10*time.Millisecond)

	// Unmanage hands a node to a caller that stops it by other means.
	require.NoError(t, c.Unmanage(WorkflowA))
	exitOnItsOwn(t, exitDir, WorkflowA)
	require.Eventually(t, func() bool { return !c.Running(WorkflowA) }, 10*time.Second, 10*time.Millisecond)
	require.Never(t, func() bool { return c.Running(WorkflowA) }, 500*time.Millisecond, 20*time.Millisecond,
		"the supervisor restarted an unmanaged node")
	require.Len(t, c.Restarts(WorkflowA), 1)

	// Stop leaves nothing running and restarts nothing.
	pids := []int{c.PID(APIA), c.PID(APIB), c.PID(WorkflowB)}
	require.NoError(t, c.Stop())
	for _, pid := range pids {
		require.False(t, Alive(pid, 0), "pid %d left behind", pid)
	}
	require.Never(t, func() bool { return c.Running(WorkflowB) || c.Running(APIA) }, 300*time.Millisecond, 20*time.Millisecond)
}

// A node that keeps exiting is restarted with growing delays.
func TestSupervisorBacksOffACrashLoop(t *testing.T) {
	c, exitDir := startSupervised(t, RestartAlways, nil)
	for i := 1; i <= 3; i++ {
		exitOnItsOwn(t, exitDir, WorkflowA)
		require.Eventually(t, func() bool { return len(c.Restarts(WorkflowA)) == i && c.Running(WorkflowA) },
			10*time.Second, 10*time.Millisecond, "restart %d", i)
	}
	rs := c.Restarts(WorkflowA)
	for i, r := range rs {
		t.Logf("restart %d: %s", i+1, r)
	}
	for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		require.GreaterOrEqual(t, rs[i].At.Sub(rs[i].ExitedAt), want, "restart %d", i+1)
	}
}

// With RestartNever a node that exits stays down.
func TestRestartNeverLeavesAnExitedNodeDown(t *testing.T) {
	c, exitDir := startSupervised(t, RestartNever, nil)
	require.False(t, c.Managed(WorkflowA))
	exitOnItsOwn(t, exitDir, WorkflowA)
	require.Eventually(t, func() bool { return !c.Running(WorkflowA) }, 10*time.Second, 10*time.Millisecond)
	require.Never(t, func() bool { return c.Running(WorkflowA) }, 500*time.Millisecond, 20*time.Millisecond)
	require.Empty(t, c.Restarts(WorkflowA))
}
