package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeAdminAPI reports the admin token it got through its environment.
const fakeAdminAPI = parseNode + `echo "env-token $node ${SHOPPINGMALL_ADMIN_TOKEN:-none}"
echo "shoppingmall-ready kind=http node=$node"
echo "shoppingmall-ready kind=object-route node=$node target=workflow-a"
echo "shoppingmall-ready kind=object-route node=$node target=workflow-b"
exec sleep 600
`

// fakeTokenWorkflow reports the admin token it got through its
// environment.
const fakeTokenWorkflow = parseNode + `echo "env-token $node ${SHOPPINGMALL_ADMIN_TOKEN:-none}"
echo '{"time":"t","level":"INFO","msg":"order-workflow started","node":"'$node'","member":"m"}'
exec sleep 600
`

func TestEveryAPIGetsALoopbackAdminListenerAndTheGeneratedToken(t *testing.T) {
	t.Setenv(AdminTokenEnv, "a-token-from-the-callers-shell")
	c, runDir, err := startFake(t, fakeAdminAPI, fakeTokenWorkflow, Poll{Interval: 20 * time.Millisecond, Attempts: 500})
	require.NoError(t, err)

	fi, err := os.Stat(filepath.Join(runDir, "admin.token"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the token file is the owner's only")
	tok, err := ReadAdminToken(runDir)
	require.NoError(t, err)
	require.Len(t, tok, 64)
	require.Equal(t, tok, c.AdminToken())

	st := c.State()
	require.Equal(t, AdminTokenPath(runDir), st.AdminTokenFile)
	b, err := os.ReadFile(filepath.Join(runDir, "admin.token"))
	require.NoError(t, err)
	for _, api := range APINodes {
		u := c.AdminURL(api)
		require.True(t, strings.HasPrefix(u, "http://127.0.0.1:"), u)
		require.NotEqual(t, c.APIURL(api), u, "never the public listener")
		ps, ok := st.Node(api)
		require.True(t, ok)
		require.Equal(t, u, ps.AdminURL, "the state records %s's admin address", api)
		log, err := os.ReadFile(c.LogPath(api))
		require.NoError(t, err)
		require.Contains(t, string(log), "-admin-http "+strings.TrimPrefix(u, "http://"))
		require.Contains(t, string(log), "env-token "+api+" "+tok, "%s gets the generated token through its environment", api)
		require.NotContains(t, string(log), "args "+tok, "never on a command line")
		require.NotContains(t, strings.SplitN(string(log), "\n", 2)[0], tok, "never on a command line")
	}
	require.NotEqual(t, c.AdminURL(APIA), c.AdminURL(APIB))
	for _, wf := range WorkflowNodes {
		require.Empty(t, c.AdminURL(wf))
		// Start waits for the APIs' ready lines, which these fakes print
		// without their workflows: a workflow's script may not have
		// written yet.
		var log []byte
		require.Eventually(t, func() bool {
			log, err = os.ReadFile(c.LogPath(wf))
			return err == nil && strings.Contains(string(log), "env-token "+wf+" ")
		}, 10*time.Second, 10*time.Millisecond, "%s printed the token it got", wf)
		require.Contains(t, string(log), "env-token "+wf+" "+tok,
			"a workflow gets the generated token too, never the caller's: it guards the ops listener's /debug/pprof/")
	}
	require.NotContains(t, string(b), "a-token-from-the-callers-shell")
}
