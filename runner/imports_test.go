package runner_test

import (
	"errors"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/shoppingmall-go/shoppingmall"

// forbiddenInRunner are the import paths (and, ending in '/', path
// prefixes) no package under runner/ may link, test files aside.
var forbiddenInRunner = []string{
	"github.com/gin-gonic/gin",
	"github.com/asynkron/protoactor-go/",
}

type pkg struct {
	path, name string
	deps       []string
}

// listDeps runs go list over the module: every package with its
// transitive non-test dependencies.
func listDeps(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool is needed to read the package graph")
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{.Name}} {{join .Deps \" \"}}", module+"/...").Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	var pkgs []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 2, "go list line %q", line)
		pkgs = append(pkgs, pkg{path: f[0], name: f[1], deps: f[2:]})
	}
	return pkgs
}

func forbidden(deps []string, rules []string) []string {
	var hit []string
	for _, d := range deps {
		for _, r := range rules {
			if d == r || (strings.HasSuffix(r, "/") && strings.HasPrefix(d, r)) {
				hit = append(hit, d)
			}
		}
	}
	sort.Strings(hit)
	return hit
}

// isTestSupport tells a package meant for _test.go files only (proctest,
// redistest, the real-process test packages): it may link testing.
func isTestSupport(p pkg) bool { return strings.HasSuffix(p.name, "test") }

// The runner talks to the cluster over HTTP and Redis: it links neither
// the HTTP framework nor the actor runtime, and none of its packages
// but test support links testing. No binary of the module links testing.
func TestRunnerLinksNeitherGinNorProtoactorNorTesting(t *testing.T) {
	pkgs := listDeps(t)
	runners := 0
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.path, module+"/")
		inRunner := strings.HasPrefix(rel, "runner/") || rel == "runner"
		if p.name == "main" || (inRunner && !isTestSupport(p)) {
			require.Empty(t, forbidden(p.deps, []string{"testing"}), "%s links package testing", rel)
		}
		if !inRunner {
			continue
		}
		runners++
		require.Empty(t, forbidden(p.deps, forbiddenInRunner), "%s links the HTTP framework or the actor runtime", rel)
	}
	require.Greater(t, runners, 10, "go list found too few runner packages: the pattern is wrong")
}

// The rules above must catch what they are meant to: a package that
// links protoactor through a dependency, gin itself, or testing.
func TestForbiddenMatchesPathsAndPrefixes(t *testing.T) {
	require.Equal(t, []string{"github.com/asynkron/protoactor-go/actor"},
		forbidden([]string{"fmt", "github.com/asynkron/protoactor-go/actor"}, forbiddenInRunner))
	require.Equal(t, []string{"github.com/gin-gonic/gin"},
		forbidden([]string{"github.com/gin-gonic/gin", "github.com/gin-gonic/gin/binding"}, forbiddenInRunner))
	require.Empty(t, forbidden([]string{"github.com/gin-gonic/ginx", "testing/fstest"}, append(forbiddenInRunner, "testing")))
	require.Equal(t, []string{"testing"}, forbidden([]string{"testing", "testing/iotest"}, []string{"testing"}))
}
