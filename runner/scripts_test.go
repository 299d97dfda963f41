package runner_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Redis 7 reads a script's flags from its first line. Without a shebang a
// script runs in the compatibility mode, where Redis checks the memory
// limit only at the script's first deny-oom command: a script that
// frees a key first then runs on past the limit. With "#!lua" (no
// allow-oom) Redis refuses the whole script before it runs when memory is
// full, and with "#!lua flags=no-writes" a reader may run on a replica
// and under OOM but can never write.
var scriptShebangs = []string{"#!lua\n", "#!lua flags=no-writes\n"}

// TestEveryLuaScriptCarriesAShebang walks every production file of the
// module and checks each redis.NewScript source: it must start with a
// string literal that opens with one of scriptShebangs, so that no
// concatenation puts a fragment before the shebang.
func TestEveryLuaScriptCarriesAShebang(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	fset := token.NewFileSet()
	scripts := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name != "." && (strings.HasPrefix(name, ".") || name == "testdata") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "NewScript" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "redis" {
				return true
			}
			scripts++
			first := call.Args[0]
			for {
				b, ok := first.(*ast.BinaryExpr)
				if !ok {
					break
				}
				first = b.X
			}
			rel, _ := filepath.Rel(root, path)
			lit, ok := first.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: the script's source must start with a string literal holding its shebang", fset.Position(call.Pos()))
				return true
			}
			src, err := strconv.Unquote(lit.Value)
			require.NoError(t, err, rel)
			found := false
			for _, sb := range scriptShebangs {
				found = found || strings.HasPrefix(src, sb)
			}
			if !found {
				t.Errorf("%s: the script's source does not start with one of %q", fset.Position(call.Pos()), scriptShebangs)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, scripts, "no redis.NewScript found: the walk missed the module")
	t.Logf("%d scripts checked", scripts)
}
