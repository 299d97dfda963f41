package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The client reaches the system only through the public HTTP API
// (docs/contract.md, "Runner-only hooks"): no string literal of it names a
// /self-check/ or /admin/ route. Its imports (the standard library, the
// protobuf runtime and the contracts only) are the linter's runner-client
// rule (.golangci.yml); a route is a string, which an import rule cannot
// see.
func TestClientNamesNoRunnerOrOperatorRoute(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	cmd, err := filepath.Glob(filepath.Join("cmd", "*", "*.go"))
	require.NoError(t, err)
	files = append(files, cmd...)
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			for _, route := range []string{"/self-check", "/admin/"} {
				assert.NotContains(t, lit.Value, route,
					"%s: runner-only and operator routes stay outside the client", fset.Position(lit.Pos()))
			}
			return true
		})
	}
	require.NotZero(t, checked, "no source files checked")
}
