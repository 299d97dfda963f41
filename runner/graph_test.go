package runner_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// graphDoc holds the package graph, fenced by graphBegin and graphEnd;
// the lines between them are what packageGraph prints.
const (
	graphDoc   = "docs/architecture.md"
	graphBegin = "<!-- package graph: begin (runner/graph_test.go checks it) -->"
	graphEnd   = "<!-- package graph: end -->"
)

// packageGraph prints one line per package of the module: its path and
// the project packages its production files import directly, in the
// module's own terms (no module prefix). Test files are left out: the
// graph is what ships.
func packageGraph(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool is needed to read the package graph")
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	var lines []string
	width := 0
	type row struct {
		pkg  string
		deps []string
	}
	var rows []row
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		r := row{pkg: strings.TrimPrefix(f[0], module+"/")}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				r.deps = append(r.deps, rel)
			}
		}
		sort.Strings(r.deps)
		width = max(width, len(r.pkg))
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].pkg < rows[j].pkg })
	for _, r := range rows {
		if len(r.deps) == 0 {
			lines = append(lines, r.pkg)
			continue
		}
		lines = append(lines, fmt.Sprintf("%-*s → %s", width, r.pkg, strings.Join(r.deps, ", ")))
	}
	return strings.Join(lines, "\n")
}

// The package graph in docs/architecture.md is the one the code has: a
// new import, a moved or a new package fails this test until the graph
// says so.
func TestDocumentedPackageGraphMatchesTheCode(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(graphDoc)))
	require.NoError(t, err)
	text := string(doc)
	_, afterBegin, ok := strings.Cut(text, graphBegin)
	require.True(t, ok, "%s has no %q line", graphDoc, graphBegin)
	block, _, ok := strings.Cut(afterBegin, graphEnd)
	require.True(t, ok, "%s has no %q line", graphDoc, graphEnd)
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```text")
	block = strings.TrimSuffix(block, "```")

	want := packageGraph(t)
	require.Greater(t, strings.Count(want, "\n"), 30, "go list found too few packages: the pattern is wrong")
	require.Equal(t, want, strings.TrimSpace(block),
		"the package graph in %s is out of date; put this between its markers:\n```text\n%s\n```", graphDoc, want)
}

// Nothing under cluster/ or eventstore imports actors/: they sit below
// it, and the error kinds they give their sentinels live in
// eventstore/errkind, not beside the contracts. Like the depguard rule
// (cluster-below-actors, eventstore), but on the graph as go list reads
// it, test files left out.
func TestNoArrowRunsBackUpIntoActors(t *testing.T) {
	var up []string
	for _, line := range strings.Split(packageGraph(t), "\n") {
		pkg, deps, _ := strings.Cut(line, "→")
		pkg = strings.TrimSpace(pkg)
		if !strings.HasPrefix(pkg, "cluster") && !strings.HasPrefix(pkg, "eventstore") {
			continue
		}
		for _, d := range strings.Split(deps, ",") {
			if d = strings.TrimSpace(d); strings.HasPrefix(d, "actors/") {
				up = append(up, pkg+" → "+d)
			}
		}
	}
	require.Empty(t, up, "arrows running back up into actors/")
}
