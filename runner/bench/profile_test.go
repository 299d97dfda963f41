package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The profiles are fetched during the loop, but `go tool pprof` runs only
// at writeTops, after the run's figures are taken: in the loop its CPU
// would be counted as the cluster's.
func TestProfileTopsAreWrittenOnlyAfterTheRun(t *testing.T) {
	var profile bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&profile))
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
	}
	pprof.StopCPUProfile()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/debug/pprof/profile" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write(profile.Bytes())
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()

	p := fetchProfiles(t.Context(), dir, []profiledNode{{"api-a", srv.URL}, {"workflow-a", srv.URL}}, "tok", 3*time.Second)
	p.wait()
	for _, n := range []string{"api-a", "workflow-a"} {
		require.FileExists(t, filepath.Join(dir, n+".pprof"))
		require.NoFileExists(t, filepath.Join(dir, n+".top.txt"), "no pprof tool while the loop runs")
	}
	p.writeTops(t.Context())
	for _, n := range []string{"api-a", "workflow-a"} {
		top, err := os.ReadFile(filepath.Join(dir, n+".top.txt"))
		require.NoError(t, err)
		require.Contains(t, string(top), "flat%")
	}
}
