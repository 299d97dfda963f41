package order

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDomainImportsOnlyPureStandardLibrary enforces the package contract:
// standard library only, and nothing that reads the clock or randomness,
// so a replay is a pure function of the stream.
func TestDomainImportsOnlyPureStandardLibrary(t *testing.T) {
	forbidden := map[string]bool{"time": true, "math/rand": true, "math/rand/v2": true, "crypto/rand": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range parsed.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %q, which is not in the standard library", f, path)
			}
			if forbidden[path] {
				t.Errorf("%s imports %q: the domain takes time and randomness as arguments", f, path)
			}
		}
		if strings.Contains(string(src), "time.Now") {
			t.Errorf("%s mentions time.Now", f)
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
