package runner_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/shoppingmall-go/shoppingmall/actors/contracts" // registers the contract messages
)

// The markers that fence the lines of docs/contract.md this test holds to
// the code: the evidence lines a run is judged by, and the project's
// other lines. Between them, every fenced block holds one line.
const (
	evidenceBegin = "<!-- evidence lines: begin (runner/contract_test.go checks them) -->"
	evidenceEnd   = "<!-- evidence lines: end -->"
	projectBegin  = "<!-- project lines: begin (runner/contract_test.go checks them) -->"
	projectEnd    = "<!-- project lines: end -->"
)

// linePrefixes start every line of those families. A string the code
// builds that starts with one of them is such a line and must be one the
// contract names.
var linePrefixes = []string{
	"shoppingmall-ready ",
	"shoppingmall-order ",
	"shoppingmall-evidence ",
	"shoppingmall-topology ",
	"shoppingmall=",
	"shoppingmall-placement=",
}

// placeholders are the contract's <Name>s and the one fmt verb the code
// may print each with (an operand concatenated to a string is a %s).
var placeholders = map[string]string{
	"NodeId":         "s",
	"WorkflowNodeId": "s",
	"OrderId":        "s",
	"SpotId":         "s",
	"N":              "d",
}

// samples instantiate a template, to try the code's regular expressions
// on; <SpotId> is spelled out (spotForm).
var samples = map[string]string{
	"NodeId":         "api-a",
	"WorkflowNodeId": "workflow-b",
	"OrderId":        "ord-0123456789abcdef0123456789abcdef",
	"N":              "4",
}

// seg is one piece of a line template: literal text, or a hole the
// printer fills. hole is a placeholder name in the contract's templates;
// in the code's it is the fmt verb ("s", "d", "v", or a verb with flags,
// which matches nothing), "*" for a <description> written in a literal.
type seg struct{ lit, hole string }

type template []seg

func (t template) String() string {
	var b strings.Builder
	for _, s := range t {
		switch s.hole {
		case "":
			b.WriteString(s.lit)
		case "*":
			b.WriteString("<…>")
		default:
			if _, ok := placeholders[s.hole]; ok {
				b.WriteString("<" + s.hole + ">")
			} else {
				b.WriteString("%" + s.hole)
			}
		}
	}
	return b.String()
}

// add appends s, merging adjacent literals and dropping empty ones.
func (t template) add(s seg) template {
	if s.hole == "" {
		if s.lit == "" {
			return t
		}
		if n := len(t); n > 0 && t[n-1].hole == "" {
			t[n-1].lit += s.lit
			return t
		}
	}
	return append(t, s)
}

var placeholderRE = regexp.MustCompile(`<([A-Za-z]+)>`)

// contractTemplate parses a line of the contract: literal text and
// <Name> placeholders, each of which must be one of placeholders.
func contractTemplate(line string) (template, error) {
	var t template
	rest := line
	for {
		loc := placeholderRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			return t.add(seg{lit: rest}), nil
		}
		name := rest[loc[2]:loc[3]]
		if _, ok := placeholders[name]; !ok {
			return nil, fmt.Errorf("%q: <%s> is no placeholder this test knows (%v)", line, name, placeholders)
		}
		t = t.add(seg{lit: rest[:loc[0]]}).add(seg{hole: name})
		rest = rest[loc[1]:]
	}
}

// forms are the ways the code may build a contract line: as written, and
// with <SpotId> spelled out as the grain kind and the order id.
func forms(t template, spotForm template) []template {
	out := []template{t}
	var spelled template
	for _, s := range t {
		if s.hole == "SpotId" {
			for _, x := range spotForm {
				spelled = spelled.add(x)
			}
			continue
		}
		spelled = spelled.add(s)
	}
	if len(spelled) != len(t) || spelled.String() != t.String() {
		out = append(out, spelled)
	}
	return out
}

// matches reports whether the code's template builds the contract's.
func matches(code, doc template) bool {
	if len(code) != len(doc) {
		return false
	}
	for i := range code {
		c, d := code[i], doc[i]
		switch {
		case c.hole == "" || d.hole == "":
			if c.hole != d.hole || c.lit != d.lit {
				return false
			}
		case c.hole == "*", c.hole == "v":
		case c.hole != placeholders[d.hole]:
			return false
		}
	}
	return true
}

// instance fills every placeholder of t with its sample.
func instance(t template) string {
	var b strings.Builder
	for _, s := range t {
		if s.hole == "" {
			b.WriteString(s.lit)
		} else {
			b.WriteString(samples[s.hole])
		}
	}
	return b.String()
}

// fencedLines returns the one line of each fenced block between begin and
// end in text.
func fencedLines(t *testing.T, text, begin, end string) []string {
	t.Helper()
	_, after, ok := strings.Cut(text, begin)
	require.True(t, ok, "docs/contract.md has no %q line", begin)
	region, _, ok := strings.Cut(after, end)
	require.True(t, ok, "docs/contract.md has no %q line after %q", end, begin)
	var lines, block []string
	inside := false
	for _, l := range strings.Split(region, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if inside {
				require.Len(t, block, 1, "every fenced block between %q and %q holds exactly one line: %q", begin, end, block)
				lines = append(lines, block[0])
				block = nil
			}
			inside = !inside
			continue
		}
		if inside {
			block = append(block, strings.TrimSuffix(l, "\r"))
		}
	}
	require.False(t, inside, "an unclosed fenced block between %q and %q", begin, end)
	require.NotEmpty(t, lines, "no fenced line between %q and %q", begin, end)
	return lines
}

// site is one place where the code builds or matches a line.
type site struct {
	pos  string
	code template       // a string the code builds
	re   *regexp.Regexp // or a regular expression it matches lines with
}

func hasLinePrefix(s string) bool {
	for _, p := range linePrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// mentionsLine reports whether a regular expression's source is about one
// of the lines.
func mentionsLine(expr string) bool {
	expr = strings.TrimPrefix(strings.TrimPrefix(expr, "^"), "(?:")
	return hasLinePrefix(strings.ReplaceAll(expr, `\.`, "."))
}

var verbRE = regexp.MustCompile(`%[-+# 0]*(?:\[\d+\])?(?:\d+|\*)?(?:\.(?:\d+|\*)?)?[a-zA-Z]`)

// formatTemplate is a fmt format string as a template: each verb a hole.
func formatTemplate(format string) template {
	var t template
	rest := strings.ReplaceAll(format, "%%", "\x00")
	for {
		loc := verbRE.FindStringIndex(rest)
		if loc == nil {
			return t.add(seg{lit: strings.ReplaceAll(rest, "\x00", "%")})
		}
		t = t.add(seg{lit: strings.ReplaceAll(rest[:loc[0]], "\x00", "%")})
		t = t.add(seg{hole: strings.TrimPrefix(rest[loc[0]:loc[1]], "%")})
		rest = rest[loc[1]:]
	}
}

var descriptionRE = regexp.MustCompile(`<[^<>]+>`)

// literalTemplate is a plain string literal as a template: a <...> in it
// describes a value (a matcher's description) and is a hole.
func literalTemplate(s string) template {
	var t template
	for {
		loc := descriptionRE.FindStringIndex(s)
		if loc == nil {
			return t.add(seg{lit: s})
		}
		t = t.add(seg{lit: s[:loc[0]]}).add(seg{hole: "*"})
		s = s[loc[1]:]
	}
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// concat flattens a + chain into its operands, left to right.
func concat(e ast.Expr) []ast.Expr {
	if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
		return append(concat(b.X), concat(b.Y)...)
	}
	if p, ok := e.(*ast.ParenExpr); ok {
		return concat(p.X)
	}
	return []ast.Expr{e}
}

// callName is "pkg.Func" or "Func" for a call's function.
func callName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok {
			return x.Name + "." + f.Sel.Name
		}
	}
	return ""
}

// lineSites parses every production Go file of the module and returns
// each place that builds one of the lines (a string literal, a fmt
// format, a concatenation) or matches them (a regular expression).
func lineSites(t *testing.T, root string) []site {
	t.Helper()
	fset := token.NewFileSet()
	var sites []site
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
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
		rel, _ := filepath.Rel(root, path)
		at := func(n ast.Node) string {
			return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), fset.Position(n.Pos()).Line)
		}
		seen := map[ast.Expr]bool{} // literals read as a format or a pattern
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				name := callName(n)
				switch {
				case name == "regexp.MustCompile" || name == "regexp.Compile" || name == "localcluster.Pattern" || name == "Pattern":
					if len(n.Args) != 1 {
						return true
					}
					expr, ok := stringLit(n.Args[0])
					if !ok || !mentionsLine(expr) {
						return true
					}
					if strings.HasSuffix(name, "Pattern") {
						expr = `^(?:` + expr + `)$`
					}
					re, err := regexp.Compile(expr)
					require.NoError(t, err, at(n))
					sites = append(sites, site{pos: at(n), re: re})
					seen[n.Args[0]] = true
				case strings.HasPrefix(name, "fmt.") && strings.HasSuffix(name, "f"):
					i := 0
					if strings.HasPrefix(name, "fmt.F") {
						i = 1
					}
					if len(n.Args) <= i {
						return true
					}
					format, ok := stringLit(n.Args[i])
					if !ok || !hasLinePrefix(format) {
						return true
					}
					sites = append(sites, site{pos: at(n), code: formatTemplate(format)})
					seen[n.Args[i]] = true
				}
			case *ast.BinaryExpr:
				parts := concat(n)
				if len(parts) < 2 {
					return true
				}
				first, ok := stringLit(parts[0])
				if !ok || !hasLinePrefix(first) {
					return true
				}
				var tpl template
				for _, p := range parts {
					if s, ok := stringLit(p); ok {
						tpl = tpl.add(seg{lit: s})
					} else {
						tpl = tpl.add(seg{hole: "s"})
					}
				}
				sites = append(sites, site{pos: at(n), code: tpl})
				return false
			case *ast.BasicLit:
				s, ok := stringLit(n)
				if ok && !seen[n] && hasLinePrefix(s) {
					sites = append(sites, site{pos: at(n), code: literalTemplate(s)})
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return sites
}

// grainKind reads the order grains' cluster kind, grain.KindName, from
// its declaration: the first half of every <SpotId>.
func grainKind(t *testing.T, root string) string {
	t.Helper()
	path := filepath.Join(root, "actors", "grain", "grain.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err)
	kind := ""
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, id := range vs.Names {
			if id.Name == "KindName" && i < len(vs.Values) {
				kind, _ = stringLit(vs.Values[i])
			}
		}
		return true
	})
	require.NotEmpty(t, kind, "actors/grain/grain.go declares no string constant KindName")
	return kind
}

// The evidence lines of docs/contract.md are the ones the code prints and
// the runner waits for: every string the code builds that starts like one
// of them (a constant, a fmt format with its verbs, a concatenation with
// its operands) is a contract line with its placeholders filled, every
// regular expression the code matches such lines with accepts a contract
// line, and every contract line is built somewhere. Changing a line on
// either side fails this test until the other says the same.
func TestContractEvidenceLinesAreTheCodes(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "contract.md"))
	require.NoError(t, err)
	text := string(doc)
	lines := append(fencedLines(t, text, evidenceBegin, evidenceEnd), fencedLines(t, text, projectBegin, projectEnd)...)

	kind := grainKind(t, root)
	spotForm, err := contractTemplate(kind + "/<OrderId>")
	require.NoError(t, err)
	named := map[string]bool{}
	var docForms [][]template
	for _, l := range lines {
		require.False(t, named[l], "docs/contract.md names %q twice", l)
		named[l] = true
		require.True(t, hasLinePrefix(l), "%q starts like no line family this test knows (%q)", l, linePrefixes)
		tpl, err := contractTemplate(l)
		require.NoError(t, err)
		docForms = append(docForms, forms(tpl, spotForm))
	}

	sites := lineSites(t, root)
	require.NotEmpty(t, sites, "no code builds any line: the walk is wrong")
	built := make([][]string, len(lines))
	for _, s := range sites {
		found := false
		for i, alts := range docForms {
			for _, f := range alts {
				if s.re != nil && s.re.MatchString(instance(f)) || s.re == nil && matches(s.code, f) {
					found = true
					if s.re == nil {
						built[i] = append(built[i], s.pos)
					}
				}
			}
		}
		if s.re != nil {
			assert.True(t, found, "%s matches lines with %s, which accepts no line of docs/contract.md", s.pos, s.re)
			continue
		}
		assert.True(t, found, "%s builds %q, which is no line of docs/contract.md", s.pos, s.code.String())
	}
	for i, l := range lines {
		assert.NotEmpty(t, built[i], "docs/contract.md names %q, but no code builds it", l)
		t.Logf("%s: %s", l, strings.Join(built[i], ", "))
	}
}

// docField is one row of a message table of docs/contract.md.
type docField struct {
	json, goName string
	optional     bool
}

var goNameRE = regexp.MustCompile("`([A-Za-z0-9]+)`")

// docMessageTables reads every message table of docs/contract.md: a table
// whose header is "| <Message> field | JSON | Go | meaning |" (or "| field
// | JSON | Go | meaning |" under the message's own heading), one row per
// field. The events' table lists its fields as "name `GoName`" pairs, every
// event also having eventId and orderId.
func docMessageTables(t *testing.T, text string) map[string][]docField {
	t.Helper()
	tables := map[string][]docField{}
	lines := strings.Split(text, "\n")
	heading := ""
	cells := func(l string) []string {
		parts := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		return parts
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if h, ok := strings.CutPrefix(l, "### "); ok {
			heading = h
			continue
		}
		if !strings.HasPrefix(l, "|") || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|---") {
			continue
		}
		head := cells(l)
		i += 2
		var rows [][]string
		for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			rows = append(rows, cells(lines[i]))
		}
		switch {
		case len(head) == 4 && head[1] == "JSON" && head[2] == "Go" && strings.HasSuffix(head[0], "field"):
			msg := strings.TrimSpace(strings.TrimSuffix(head[0], "field"))
			if msg == "" {
				msg = heading
			}
			require.NotContains(t, tables, msg, "docs/contract.md has two field tables for %s", msg)
			for _, r := range rows {
				g := goNameRE.FindStringSubmatch(r[2])
				require.NotNil(t, g, "%s.%s: the Go column names no field", msg, r[0])
				name, optional := strings.CutSuffix(r[0], "?")
				tables[msg] = append(tables[msg], docField{json: name, goName: g[1], optional: optional})
			}
		case len(head) == 3 && head[0] == "event":
			pairRE := regexp.MustCompile("([a-zA-Z]+) `([A-Za-z]+)`")
			for _, r := range rows {
				fields := []docField{{json: "eventId", goName: "EventId"}, {json: "orderId", goName: "OrderId"}}
				for _, m := range pairRE.FindAllStringSubmatch(r[1], -1) {
					fields = append(fields, docField{json: m[1], goName: m[2]})
				}
				tables[r[0]] = fields
			}
		}
	}
	return tables
}

// The message tables of docs/contract.md name the contract's fields as the
// code has them: every field of the message, no other, with its JSON name,
// its generated Go field and whether it is optional.
func TestContractMessageFieldsAreTheProtos(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "contract.md"))
	require.NoError(t, err)
	tables := docMessageTables(t, string(doc))
	require.GreaterOrEqual(t, len(tables), 20, "docs/contract.md: too few message tables found; the table format changed")
	for msg, fields := range tables {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("shoppingmall.contracts.v1." + msg))
		if !assert.NoError(t, err, "docs/contract.md has a field table for %s, which is no contract message", msg) {
			continue
		}
		desc := mt.Descriptor().Fields()
		goType := reflect.TypeOf(mt.Zero().Interface()).Elem()
		var want, got []string
		for i := range desc.Len() {
			f := desc.Get(i)
			want = append(want, string(f.Name()))
		}
		for _, f := range fields {
			got = append(got, f.json)
			fd := desc.ByName(protoreflect.Name(f.json))
			if !assert.NotNil(t, fd, "%s has no field %q", msg, f.json) {
				continue
			}
			assert.Equal(t, fd.HasOptionalKeyword(), f.optional, "%s.%s: optional in the code is %v, in docs/contract.md %v", msg, f.json, fd.HasOptionalKeyword(), f.optional)
			sf, ok := goType.FieldByName(f.goName)
			if assert.True(t, ok, "%s has no Go field %s", msg, f.goName) {
				assert.Contains(t, strings.Split(sf.Tag.Get("protobuf"), ","), "name="+f.json, "%s.%s is not the Go field of %q", msg, f.goName, f.json)
			}
		}
		assert.ElementsMatch(t, want, got, "docs/contract.md lists the fields of %s", msg)
	}
	for _, m := range []string{"StartOrderReq", "OrderState", "StartOrderWorkflowReq", "OrderStartedEvent", "OrderFailedEvent"} {
		assert.Contains(t, tables, m, "docs/contract.md has no field table for %s", m)
	}
}
