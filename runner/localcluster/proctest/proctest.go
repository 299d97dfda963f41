// Package proctest is the shared support of the real-process test
// packages (runner/localcluster and its faulttest, overloadtest,
// pausetest, takeovertest, admintest, crashtest, metricstest, …): it
// hands them the two process binaries, built once per run under make and
// once per test binary without it, and reads a process's scheduler
// state. It links testing, so only _test files may
// import it; it must not import edge, actors/... or cluster/...
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	binDir   string
	buildErr error
	buildOne sync.Once

	// tagged holds the builds of Build, by tags, under binDir;
	// taggedMu guards it and binDir's creation.
	tagged   = map[string]*taggedBuild{}
	taggedMu sync.Mutex
)

type taggedBuild struct {
	once     sync.Once
	api, wf  string
	buildErr error
}

// BinDirEnv names the environment variable holding a folder with
// commerce-api and order-workflow built from this checkout. make's
// test-bin target builds them there and exports it, so that every test
// binary of a run shares one build instead of linking its own pair.
const BinDirEnv = "SHOPPINGMALL_TEST_BIN_DIR"

// Main runs the tests and removes the binaries it built; call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// Binaries returns the paths of commerce-api and order-workflow: those in
// BinDirEnv's folder when it is set, or else built once per test binary
// into a temporary folder (removed by Main).
func Binaries(t testing.TB) (api, workflow string) {
	t.Helper()
	if dir := os.Getenv(BinDirEnv); dir != "" {
		api, workflow = filepath.Join(dir, "commerce-api"), filepath.Join(dir, "order-workflow")
		for _, p := range []string{api, workflow} {
			_, err := os.Stat(p)
			require.NoError(t, err, "%s=%s names no built binary; run make test-bin or unset it", BinDirEnv, dir)
		}
		return api, workflow
	}
	buildOne.Do(func() {
		taggedMu.Lock()
		buildErr = makeBinDir()
		taggedMu.Unlock()
		if buildErr == nil {
			buildErr = build(binDir, "")
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "commerce-api"), filepath.Join(binDir, "order-workflow")
}

// Build returns commerce-api and order-workflow built from this checkout
// with the build tags tags (comma-separated, as go build -tags takes
// them): another build of the same tree, such as the upgrade proof's
// newer schema. Each set of tags is built once per test binary, into a
// folder Main removes.
func Build(t testing.TB, tags string) (api, workflow string) {
	t.Helper()
	taggedMu.Lock()
	b, ok := tagged[tags]
	if !ok {
		b = &taggedBuild{}
		tagged[tags] = b
	}
	taggedMu.Unlock()
	b.once.Do(func() {
		taggedMu.Lock()
		err := makeBinDir()
		taggedMu.Unlock()
		if err != nil {
			b.buildErr = err
			return
		}
		dir := filepath.Join(binDir, "tags-"+strings.NewReplacer(",", "-", " ", "-").Replace(tags))
		b.api, b.wf = filepath.Join(dir, "commerce-api"), filepath.Join(dir, "order-workflow")
		b.buildErr = build(dir, tags)
	})
	require.NoError(t, b.buildErr)
	return b.api, b.wf
}

// makeBinDir makes the temporary folder of this test binary's builds
// once; the caller holds taggedMu.
func makeBinDir() error {
	if binDir != "" {
		return nil
	}
	dir, err := os.MkdirTemp("", "proctest-bin")
	if err != nil {
		return err
	}
	binDir = dir
	return nil
}

// build builds both binaries into dir with tags ("" none).
func build(dir, tags string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	for _, b := range []struct{ pkg, name string }{
		{"./edge/cmd/commerce-api", "commerce-api"},
		{"./actors/cmd/order-workflow", "order-workflow"},
	} {
		args := []string{"build", "-o", filepath.Join(dir, b.name)}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		cmd := exec.Command("go", append(args, b.pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build -tags %q %s: %v\n%s", tags, b.pkg, err, out)
		}
	}
	return nil
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

// load says how busy the machine is, for the failure message of an
// assertion on a duration: the 1-minute load average beside the cores,
// and the share of the last 10 s in which some runnable task waited for
// a core (/proc/pressure/cpu, where the kernel has it). A bound broken
// on a starved machine then says so, instead of reading as a regression.
func load() string {
	avg := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			avg = f[0]
		}
	}
	s := fmt.Sprintf("machine: load %s on %d cores", avg, runtime.NumCPU())
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		for _, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				s += ", tasks waited for a core " + v + "% of the last 10 s"
			}
		}
	}
	return s
}

// RequireFaster fails t unless took is below bound, and then names the
// machine's load (load): a duration bound is what a loaded machine
// breaks first, and the message tells that apart from a slow path.
func RequireFaster(t testing.TB, took, bound time.Duration, format string, args ...any) {
	t.Helper()
	if took < bound {
		return
	}
	require.Failf(t, fmt.Sprintf("took %s, bound %s", took.Round(time.Millisecond), bound),
		fmt.Sprintf(format, args...)+"; "+load())
}
