// Package proctest is the shared support of the real-process test
// packages (runner/localcluster/faulttest, overloadtest, pausetest, takeovertest, admintest):
// it builds the two process binaries once per test binary and reads a
// process's scheduler state. It links testing, so only _test files may
// import it; it must not import edge, actors/... or cluster/...
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	binDir   string
	buildErr error
	buildOne sync.Once
)

// Main runs the tests and removes the built binaries; call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// Binaries builds commerce-api and order-workflow once per test binary
// and returns their paths.
func Binaries(t testing.TB) (api, workflow string) {
	t.Helper()
	buildOne.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "proctest-bin"); buildErr != nil {
			return
		}
		for _, b := range []struct{ pkg, name string }{
			{"./edge/cmd/commerce-api", "commerce-api"},
			{"./actors/cmd/order-workflow", "order-workflow"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.name), b.pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "commerce-api"), filepath.Join(binDir, "order-workflow")
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// ProcState is the one-letter scheduler state of pid from /proc ("T" when
// stopped by SIGSTOP), or "" when it cannot be read.
func ProcState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) < i+3 {
		return ""
	}
	return s[i+2 : i+3]
}
