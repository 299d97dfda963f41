package deploy

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The observability files: Prometheus alert rules, their promtool unit
// test, and a Grafana dashboard. The queries in them name metrics by
// string, which no compiler checks; these tests read the metric families
// the module's code registers from its source (the name and labels of
// every prometheus.*Opts literal) and fail when a query names a family,
// a label or a label value the code no longer has.
const (
	alertsFile     = "scripts/deploy/observability/alerts.yaml"
	alertsTestFile = "scripts/deploy/observability/alerts_test.yaml"
	dashboardFile  = "scripts/deploy/observability/dashboard.json"
)

const prometheusPkg = "github.com/prometheus/client_golang/prometheus"

// family is a registered metric family as its code declares it.
type family struct {
	kind   string // CounterOpts, GaugeOpts, HistogramOpts, SummaryOpts
	labels map[string]bool
	where  string
}

// registered is what the module's code exposes: its families, the
// families of the collectors it registers from client_golang, and every
// string literal of its code (the label values it can produce).
type registered struct {
	families map[string]family
	literals map[string]bool
}

// libraryFamilies are families client_golang's collectors register,
// which the queries may use once the code registers that collector.
var libraryFamilies = map[string]struct {
	call   string // selector of the constructor the code must call
	family family
}{
	"process_start_time_seconds": {"collectors.NewProcessCollector", family{kind: "GaugeOpts", labels: map[string]bool{}, where: "client_golang's process collector"}},
}

// goPackage is one directory's non-test files.
type goPackage struct {
	name   string
	files  []*ast.File
	consts map[string]constDecl
}

type constDecl struct {
	expr ast.Expr
	file *ast.File
}

type sourceTree struct {
	root, module string
	fset         *token.FileSet
	pkgs         map[string]*goPackage // by import path
}

// parseModule parses every non-test Go file of the module (not of the
// modules nested in it).
func parseModule(t *testing.T, root string) *sourceTree {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(mod)
	require.NotNil(t, m, "go.mod names its module")
	st := &sourceTree{root: root, module: string(m[1]), fset: token.NewFileSet(), pkgs: map[string]*goPackage{}}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			if n := d.Name(); strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(st.fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		ip := st.module
		if rel != "." {
			ip += "/" + filepath.ToSlash(rel)
		}
		pkg := st.pkgs[ip]
		if pkg == nil {
			pkg = &goPackage{name: f.Name.Name, consts: map[string]constDecl{}}
			st.pkgs[ip] = pkg
		}
		pkg.files = append(pkg.files, f)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						pkg.consts[n.Name] = constDecl{expr: vs.Values[i], file: f}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, st.pkgs)
	return st
}

// imports maps a file's import names to their paths.
func (st *sourceTree) imports(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, is := range f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		name := path.Base(p)
		if pkg, ok := st.pkgs[p]; ok {
			name = pkg.name
		}
		if is.Name != nil {
			name = is.Name.Name
		}
		out[name] = p
	}
	return out
}

// constString evaluates a string constant expression of package pkg in
// file f: literals, constants of the module's packages, and + between
// them.
func (st *sourceTree) constString(pkg string, f *ast.File, e ast.Expr) (string, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", fmt.Errorf("%s is not a string", e.Value)
		}
		return strconv.Unquote(e.Value)
	case *ast.ParenExpr:
		return st.constString(pkg, f, e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", fmt.Errorf("operator %s", e.Op)
		}
		a, err := st.constString(pkg, f, e.X)
		if err != nil {
			return "", err
		}
		b, err := st.constString(pkg, f, e.Y)
		return a + b, err
	case *ast.Ident:
		return st.constOf(pkg, e.Name)
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok {
			return "", fmt.Errorf("selector on %T", e.X)
		}
		p, ok := st.imports(f)[x.Name]
		if !ok {
			return "", fmt.Errorf("%s is not an import", x.Name)
		}
		return st.constOf(p, e.Sel.Name)
	}
	return "", fmt.Errorf("%T is not a constant string expression", e)
}

func (st *sourceTree) constOf(pkg, name string) (string, error) {
	p, ok := st.pkgs[pkg]
	if !ok {
		return "", fmt.Errorf("package %s is not the module's", pkg)
	}
	c, ok := p.consts[name]
	if !ok {
		return "", fmt.Errorf("%s.%s is not a constant", pkg, name)
	}
	return st.constString(pkg, c.file, c.expr)
}

// registeredNames collects the families the module's code declares: each
// prometheus.CounterOpts, GaugeOpts, HistogramOpts or SummaryOpts literal
// (Namespace, Subsystem and Name joined as client_golang does), with the
// label names of the []string passed beside it and its ConstLabels.
func registeredNames(t *testing.T, root string) registered {
	t.Helper()
	st := parseModule(t, root)
	reg := registered{families: map[string]family{}, literals: map[string]bool{}}
	calls := map[string]bool{}
	for ip, pkg := range st.pkgs {
		for _, f := range pkg.files {
			imps := st.imports(f)
			opts := func(e ast.Expr) (string, *ast.CompositeLit) {
				cl, ok := e.(*ast.CompositeLit)
				if !ok {
					return "", nil
				}
				sel, ok := cl.Type.(*ast.SelectorExpr)
				if !ok {
					return "", nil
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok || imps[x.Name] != prometheusPkg {
					return "", nil
				}
				switch sel.Sel.Name {
				case "CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts":
					return sel.Sel.Name, cl
				}
				return "", nil
			}
			str := func(e ast.Expr) string {
				s, err := st.constString(ip, f, e)
				require.NoError(t, err, "%s: a metric's name and labels are constants", st.fset.Position(e.Pos()))
				return s
			}
			seen := map[*ast.CompositeLit]bool{}
			add := func(kind string, cl *ast.CompositeLit, labels ast.Expr) {
				seen[cl] = true
				var parts []string
				fam := family{kind: kind, labels: map[string]bool{}, where: st.fset.Position(cl.Pos()).String()}
				for _, el := range cl.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch kv.Key.(*ast.Ident).Name {
					case "Namespace", "Subsystem", "Name":
						if s := str(kv.Value); s != "" {
							parts = append(parts, s)
						}
					case "ConstLabels":
						lit, ok := kv.Value.(*ast.CompositeLit)
						require.True(t, ok, "%s: ConstLabels is a literal", fam.where)
						for _, e := range lit.Elts {
							fam.labels[str(e.(*ast.KeyValueExpr).Key)] = true
						}
					}
				}
				if lit, ok := labels.(*ast.CompositeLit); ok {
					for _, e := range lit.Elts {
						fam.labels[str(e)] = true
					}
				}
				name := strings.Join(parts, "_")
				require.NotEmpty(t, name, "%s: the metric has a name", fam.where)
				if prev, dup := reg.families[name]; dup {
					require.Equal(t, prev.kind, fam.kind, "%s and %s declare %s with two types", prev.where, fam.where, name)
					for l := range prev.labels {
						fam.labels[l] = true
					}
				}
				reg.families[name] = fam
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind == token.STRING {
						if s, err := strconv.Unquote(n.Value); err == nil {
							reg.literals[s] = true
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok {
							calls[path.Base(imps[x.Name])+"."+sel.Sel.Name] = true
						}
					}
					if len(n.Args) > 0 {
						if kind, cl := opts(n.Args[0]); cl != nil {
							var labels ast.Expr
							if len(n.Args) > 1 {
								labels = n.Args[1]
							}
							add(kind, cl, labels)
						}
					}
				case *ast.CompositeLit:
					if kind, cl := opts(n); cl != nil && !seen[cl] {
						add(kind, cl, nil)
					}
				}
				return true
			})
		}
	}
	for name, lf := range libraryFamilies {
		if calls[lf.call] {
			reg.families[name] = lf.family
		}
	}
	require.NotEmpty(t, reg.families)
	return reg
}

// targetLabels are the labels Prometheus attaches to every series of a
// target, whatever the scrape configuration: the queries may group by
// them.
var targetLabels = map[string]bool{"instance": true, "job": true}

// httpMethods are the method label values (edge.methodLabel) that come
// from net/http's constants, not from a literal of the module.
var httpMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
	"DELETE": true, "OPTIONS": true, "CONNECT": true, "TRACE": true}

type promToken struct {
	kind string // ident, string, punct, number
	text string
}

// lexPromQL splits a PromQL expression into the tokens these checks
// need; range and offset durations stay inside their brackets, which are
// dropped whole.
func lexPromQL(expr string) ([]promToken, error) {
	var out []promToken
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unclosed [ at %d", i)
			}
			i += j + 1
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unclosed string at %d", i)
			}
			s := expr[i+1 : j]
			if c != '`' {
				u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
				if err != nil {
					return nil, fmt.Errorf("string %q: %v", s, err)
				}
				s = u
			}
			out = append(out, promToken{"string", s})
			i = j + 1
		case c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			out = append(out, promToken{"ident", expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			n := promNumber.FindString(expr[i:])
			if n == "" {
				return nil, fmt.Errorf("number at %d", i)
			}
			out = append(out, promToken{"number", n})
			i += len(n)
		default:
			for _, op := range []string{"=~", "!~", "!=", "==", ">=", "<="} {
				if strings.HasPrefix(expr[i:], op) {
					out = append(out, promToken{"punct", op})
					i += len(op)
					goto next
				}
			}
			out = append(out, promToken{"punct", string(c)})
			i++
		next:
		}
	}
	return out, nil
}

// promNumber is a number or a duration (offset 5m, 1h30m).
var promNumber = regexp.MustCompile(`^(?:[0-9]+(?:ms|[smhdwy]))+|^[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?`)

var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true}

var groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

type matcher struct{ label, op, value string }

type selector struct {
	metric   string
	matchers []matcher
}

// parseQuery lists the selectors of expr and the labels it groups or
// matches by.
func parseQuery(expr string) (sels []selector, grouping []string, err error) {
	// Grafana's interval variables only ever stand for a duration.
	expr = regexp.MustCompile(`\$__\w+`).ReplaceAllString(expr, "5m")
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, nil, err
	}
	at := func(i int) promToken {
		if i < len(toks) {
			return toks[i]
		}
		return promToken{}
	}
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		switch {
		case tk.kind == "ident" && groupingKeywords[tk.text]:
			if at(i+1).text != "(" {
				continue // group_left without labels
			}
			i += 2
			for ; i < len(toks) && toks[i].text != ")"; i++ {
				if toks[i].kind == "ident" {
					grouping = append(grouping, toks[i].text)
				}
			}
		case tk.kind == "ident" && promKeywords[strings.ToLower(tk.text)]:
		case tk.kind == "ident" && (at(i+1).text == "(" || at(i+1).text == "by" || at(i+1).text == "without"):
			// A function or an aggregation.
		case tk.kind == "ident" || tk.text == "{":
			s := selector{}
			if tk.kind == "ident" {
				s.metric = tk.text
				i++
			}
			if at(i).text == "{" {
				for i++; i < len(toks) && toks[i].text != "}"; i++ {
					if toks[i].text == "," {
						continue
					}
					if toks[i].kind != "ident" || at(i+1).kind != "punct" || at(i+2).kind != "string" {
						return nil, nil, fmt.Errorf("matcher at %q", toks[i].text)
					}
					s.matchers = append(s.matchers, matcher{toks[i].text, toks[i+1].text, toks[i+2].text})
					i += 2
				}
			} else {
				i--
			}
			if s.metric == "" {
				return nil, nil, fmt.Errorf("a selector without a metric name")
			}
			sels = append(sels, s)
		}
	}
	return sels, grouping, nil
}

// familyOf maps a series name to its family: a histogram's _bucket,
// _sum and _count series belong to it (and _bucket has le).
func (r registered) familyOf(series string) (string, family, bool) {
	if f, ok := r.families[series]; ok {
		return series, f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(series, suffix)
		if !ok {
			continue
		}
		f, ok := r.families[base]
		if !ok || (f.kind != "HistogramOpts" && (f.kind != "SummaryOpts" || suffix == "_bucket")) {
			continue
		}
		if suffix == "_bucket" {
			labels := map[string]bool{"le": true}
			for l := range f.labels {
				labels[l] = true
			}
			f.labels = labels
		}
		return base, f, true
	}
	return "", family{}, false
}

var plainAlternation = regexp.MustCompile(`^[A-Za-z0-9_/:.-]+(\|[A-Za-z0-9_/:.-]+)*$`)

// checkQuery lists every metric, label or label value expr names that
// the code does not register or produce, and the families it uses.
func checkQuery(reg registered, expr string) (used, problems []string, err error) {
	sels, grouping, err := parseQuery(expr)
	if err != nil {
		return nil, nil, err
	}
	if len(sels) == 0 {
		return nil, nil, fmt.Errorf("names no metric")
	}
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	labels := map[string]bool{}
	for l := range targetLabels {
		labels[l] = true
	}
	for _, s := range sels {
		name, fam, ok := reg.familyOf(s.metric)
		if !ok {
			bad("%s is not a metric the code registers", s.metric)
			continue
		}
		used = append(used, name)
		for l := range fam.labels {
			labels[l] = true
		}
		for _, m := range s.matchers {
			if !fam.labels[m.label] {
				bad("%s has no label %s (it has %v)", s.metric, m.label, sortedKeys(fam.labels))
			}
			var values []string
			switch m.op {
			case "=":
				values = []string{m.value}
			case "=~":
				if !plainAlternation.MatchString(m.value) {
					bad("%s=~%q: only plain alternations, whose values this test can check", m.label, m.value)
					continue
				}
				values = strings.Split(m.value, "|")
			}
			for _, v := range values {
				if !reg.literals[v] && (m.label != "method" || !httpMethods[v]) {
					bad("%s{%s=%q}: the code has no such value", s.metric, m.label, v)
				}
			}
		}
	}
	for _, g := range grouping {
		if !labels[g] {
			bad("groups by %s, which none of its metrics has", g)
		}
	}
	return used, problems, nil
}

// requireKnown fails unless checkQuery finds expr clean.
func requireKnown(t *testing.T, reg registered, where, expr string) []string {
	t.Helper()
	used, problems, err := checkQuery(reg, expr)
	require.NoError(t, err, "%s: %s", where, expr)
	for _, p := range problems {
		t.Errorf("%s: %s\n\t%s", where, p, expr)
	}
	return used
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

func readYAML(t *testing.T, root, file string, out any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	require.NoError(t, err)
	j, err := yaml.YAMLToJSONStrict(b)
	require.NoError(t, err, file)
	require.NoError(t, json.Unmarshal(j, out), file)
}

func readDashboard(t *testing.T, root string) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, dashboardFile))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d), "%s is JSON", dashboardFile)
	return d
}

// flatPanels lists the dashboard's panels, those inside rows included.
func flatPanels(ps []dashPanel) []dashPanel {
	var out []dashPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatPanels(p.Panels)...)
	}
	return out
}

// Every metric, label and label value the alert rules and the dashboard
// query is one the code registers or produces: a renamed metric, a
// dropped label or a renamed reason fails here, not on an operator's
// screen. The alerts cover what the deployment promises to watch, each
// with severity and text, and their unit test makes every one fire and
// stay quiet at least once.
func TestObservabilityNamesAreRegistered(t *testing.T) {
	root := moduleRoot(t)
	reg := registeredNames(t, root)
	for _, must := range []string{"shoppingmall_unavailable_total", "shoppingmall_step_permanent_failures_total", "shoppingmall_self_fences_total"} {
		require.Contains(t, reg.families, must, "the source scan finds the families (or the code renamed %s)", must)
	}

	var rules alertRules
	readYAML(t, root, alertsFile, &rules)
	alerts := map[string]bool{}
	usedByAlerts := map[string]bool{}
	for _, g := range rules.Groups {
		require.NotEmpty(t, g.Rules, "group %s", g.Name)
		for _, r := range g.Rules {
			where := alertsFile + " " + r.Alert
			require.NotEmpty(t, r.Alert, "%s: group %s holds alerts only", alertsFile, g.Name)
			require.False(t, alerts[r.Alert], "%s: alert named twice", where)
			alerts[r.Alert] = true
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "%s: severity", where)
			require.NotEmpty(t, r.Annotations["summary"], "%s: summary", where)
			require.NotEmpty(t, r.Annotations["description"], "%s: description", where)
			for _, f := range requireKnown(t, reg, where, r.Expr) {
				usedByAlerts[f] = true
			}
		}
	}
	// What the deployment promises to alert on: OWNER_GONE and shed
	// rates, permanent step failures, self-fences, stuck orders, and
	// the p99s of the latency goals.
	for _, f := range []string{
		"shoppingmall_unavailable_total", "shoppingmall_step_permanent_failures_total",
		"shoppingmall_self_fences_total", "process_start_time_seconds",
		"shoppingmall_orders_started_total", "shoppingmall_orders_terminal_total",
		"shoppingmall_http_request_duration_seconds", "shoppingmall_step_duration_seconds", "shoppingmall_http_shed_seconds",
	} {
		require.True(t, usedByAlerts[f], "an alert watches %s", f)
	}

	var tests ruleTests
	readYAML(t, root, alertsTestFile, &tests)
	require.Equal(t, []string{path.Base(alertsFile)}, tests.RuleFiles, "%s tests %s", alertsTestFile, alertsFile)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, c := range tc.AlertRuleTest {
			require.True(t, alerts[c.Alertname], "%s %q: %s is an alert of %s", alertsTestFile, tc.Name, c.Alertname, alertsFile)
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	for a := range alerts {
		require.True(t, fires[a], "%s makes %s fire", alertsTestFile, a)
		require.True(t, quiet[a], "%s checks %s stays quiet", alertsTestFile, a)
	}

	d := readDashboard(t, root)
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID)
	i := slices.IndexFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	}) bool {
		return v.Name == "datasource"
	})
	require.GreaterOrEqual(t, i, 0, "the dashboard picks its Prometheus through a datasource variable")
	require.Equal(t, "datasource", d.Templating.List[i].Type)
	require.Equal(t, "prometheus", d.Templating.List[i].Query)
	ids := map[int]bool{}
	usedByDashboard := map[string]bool{}
	for _, p := range flatPanels(d.Panels) {
		where := fmt.Sprintf("%s panel %d %q", dashboardFile, p.ID, p.Title)
		require.Positive(t, p.ID, where)
		require.False(t, ids[p.ID], "%s: id used twice", where)
		ids[p.ID] = true
		require.True(t, p.GridPos.W > 0 && p.GridPos.X >= 0 && p.GridPos.X+p.GridPos.W <= 24, "%s: fits the 24-column grid", where)
		if p.Type == "row" {
			continue
		}
		require.NotNil(t, p.Datasource, where)
		require.Equal(t, "${datasource}", p.Datasource.UID, "%s: uses the datasource variable", where)
		require.NotEmpty(t, p.Targets, where)
		for _, tg := range p.Targets {
			for _, f := range requireKnown(t, reg, where+" "+tg.RefID, tg.Expr) {
				usedByDashboard[f] = true
			}
		}
	}
	// What the dashboard promises to show.
	for _, f := range []string{
		"shoppingmall_orders_started_total", "shoppingmall_orders_terminal_total", "shoppingmall_step_duration_seconds",
		"shoppingmall_http_shed_total", "shoppingmall_http_shed_seconds", "shoppingmall_unavailable_total",
		"shoppingmall_grains_hosted", "shoppingmall_activations_total", "shoppingmall_self_fences_total",
		"shoppingmall_redis_round_trip_errors_total", "shoppingmall_http_request_duration_seconds",
	} {
		require.True(t, usedByDashboard[f], "a dashboard panel shows %s", f)
	}
}

// The checks' own reading of PromQL: what they would miss if it were
// wrong.
func TestParseQueryFindsSelectorsAndGrouping(t *testing.T) {
	sels, grouping, err := parseQuery(`histogram_quantile(0.99, sum by (le, step) (rate(a_bucket{x="1",y=~"p|q"}[$__rate_interval])))
		- on (instance) group_left b > 1e3 and c offset 5m`)
	require.NoError(t, err)
	require.Equal(t, []selector{
		{metric: "a_bucket", matchers: []matcher{{"x", "=", "1"}, {"y", "=~", "p|q"}}},
		{metric: "b"}, {metric: "c"},
	}, sels)
	require.Equal(t, []string{"le", "step", "instance"}, grouping)

	reg := registered{
		families: map[string]family{"h": {kind: "HistogramOpts", labels: map[string]bool{"step": true}}, "g": {kind: "GaugeOpts", labels: map[string]bool{}}},
		literals: map[string]bool{"reserve_inventory": true},
	}
	name, f, ok := reg.familyOf("h_bucket")
	require.True(t, ok)
	require.Equal(t, "h", name)
	require.True(t, f.labels["le"])
	_, _, ok = reg.familyOf("g_bucket")
	require.False(t, ok, "a gauge has no buckets")

	for expr, want := range map[string]string{
		`sum(rate(h_count{step="reserve_inventory"}[5m]))`: "",
		`sum(rate(h_total[5m]))`:                           "h_total is not a metric",
		`h_count{stage="reserve_inventory"}`:               "has no label stage",
		`h_count{step="reserve"}`:                          "no such value",
		`sum by (route) (g)`:                               "groups by route",
	} {
		_, problems, err := checkQuery(reg, expr)
		require.NoError(t, err, expr)
		if want == "" {
			require.Empty(t, problems, expr)
		} else {
			require.Len(t, problems, 1, expr)
			require.Contains(t, problems[0], want, expr)
		}
	}
}

// promtool parses every dashboard query as Prometheus would: each
// becomes a recording rule of a scratch rule file that `promtool check
// rules` reads. `make alerts-test` installs promtool; without it this
// test is skipped and says so.
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (make alerts-test installs it): the dashboard's queries were not parsed")
	}
	root := moduleRoot(t)
	d := readDashboard(t, root)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, p := range flatPanels(d.Panels) {
		for _, tg := range p.Targets {
			rules = append(rules, rule{
				Record: fmt.Sprintf("dashboard:panel_%d:%s", p.ID, strings.ToLower(tg.RefID)),
				Expr:   regexp.MustCompile(`\$__\w+`).ReplaceAllString(tg.Expr, "5m"),
			})
		}
	}
	require.NotEmpty(t, rules)
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	require.NoError(t, os.WriteFile(f, b, 0o600))
	out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
	require.NoError(t, err, "promtool check rules on the dashboard's queries:\n%s", out)
	t.Logf("promtool parsed the dashboard's %d queries", len(rules))
}
