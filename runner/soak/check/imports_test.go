package check

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyStandardLibraryAndDomain enforces the package contract: a
// history re-checks offline, so the checker reads nothing but the history,
// the domain fold and the workflow's event codec.
func TestImportsOnlyStandardLibraryAndDomain(t *testing.T) {
	allowed := map[string]bool{
		"github.com/shoppingmall-go/shoppingmall/actors/order":    true,
		"github.com/shoppingmall-go/shoppingmall/actors/workflow": true,
	}
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
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !allowed[path] {
				t.Errorf("%s imports %q", f, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no files checked")
	}
}
