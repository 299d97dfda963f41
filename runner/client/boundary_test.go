package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The client reaches the system only through the public HTTP API (spec
// §9, §10.1): it imports no store, no cluster package and no runner hook
// code, and no string literal of it names a /self-check/ or /admin/ route.
func TestClientUsesOnlyThePublicAPI(t *testing.T) {
	allowed := map[string]bool{"github.com/shoppingmall-go/shoppingmall/actors/contracts": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := filepath.Glob(filepath.Join("cmd", "*", "*.go"))
	files = append(files, cmd...)
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			first := strings.SplitN(p, "/", 2)[0]
			if !strings.Contains(first, ".") || allowed[p] || strings.HasPrefix(p, "google.golang.org/protobuf/") ||
				p == "github.com/shoppingmall-go/shoppingmall/runner/client" {
				continue
			}
			t.Errorf("%s imports %s: the client may use only the standard library, the protobuf runtime and the contracts", f, p)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			for _, route := range []string{"/self-check", "/admin/"} {
				if strings.Contains(lit.Value, route) {
					t.Errorf("%s: %s names %s: runner-only and operator routes stay outside the client", fset.Position(lit.Pos()), lit.Value, route)
				}
			}
			return true
		})
	}
}
