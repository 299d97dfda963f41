package deploy

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// buildScript is the build command line the Dockerfile runs and this test
// runs too.
const buildScript = "scripts/deploy/build.sh"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// moduleRoot is where build.sh and the Dockerfile's build context start.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	mod := strings.TrimSpace(string(out))
	require.NotEmpty(t, mod)
	require.NotEqual(t, os.DevNull, mod, "not inside the module")
	return filepath.Dir(mod)
}

// dockerfile is what the test needs of scripts/deploy/Dockerfile.
type dockerfile struct {
	// buildRun is the RUN line that calls build.sh, split into words.
	buildRun []string
	// files holds, per stage, the paths the stage's image contains that
	// the Dockerfile put there (its own COPYs and those of the stage it
	// starts FROM).
	files map[string][]string
	// fromOut maps each executable copied out of the build output
	// directory to its path in the image.
	fromOut map[string]string
	// entrypoint is each stage's ENTRYPOINT, if any.
	entrypoint map[string][]string
}

func readDockerfile(t *testing.T, root string) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "scripts/deploy/Dockerfile"))
	require.NoError(t, err)
	d := dockerfile{files: map[string][]string{}, fromOut: map[string]string{}, entrypoint: map[string][]string{}}
	stage := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			require.Len(t, f, 4, "every stage is named: %q", sc.Text())
			require.Equal(t, "AS", strings.ToUpper(f[2]))
			stage = f[3]
			d.files[stage] = append([]string(nil), d.files[f[1]]...)
		case "RUN":
			if strings.Contains(sc.Text(), buildScript) {
				require.Nil(t, d.buildRun, "one RUN line builds")
				d.buildRun = f[1:]
			}
		case "COPY":
			var from string
			var args []string
			for _, a := range f[1:] {
				if v, ok := strings.CutPrefix(a, "--from="); ok {
					from = v
				} else {
					args = append(args, a)
				}
			}
			require.GreaterOrEqual(t, len(args), 2, "COPY src... dst: %q", sc.Text())
			dst := args[len(args)-1]
			d.files[stage] = append(d.files[stage], dst)
			if from != "" && len(d.buildRun) > 0 && path.Dir(args[0]) == d.buildRun[len(d.buildRun)-1] {
				require.Len(t, args, 2, "one executable per COPY out of the build: %q", sc.Text())
				d.fromOut[path.Base(args[0])] = dst
			}
		case "ENTRYPOINT":
			var ep []string
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(sc.Text(), f[0]))), &ep), "exec-form ENTRYPOINT")
			d.entrypoint[stage] = ep
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, d.buildRun, "the Dockerfile runs %s", buildScript)
	return d
}

// build runs the Dockerfile's build line once per test binary, with its
// output directory moved to a temporary one, and returns that directory.
func build(t *testing.T) string {
	t.Helper()
	root := moduleRoot(t)
	d := readDockerfile(t, root)
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "deploy-build")
		if buildErr != nil {
			return
		}
		args := append(append([]string(nil), d.buildRun[1:len(d.buildRun)-1]...), buildDir)
		cmd := exec.Command(d.buildRun[0], args...)
		cmd.Dir = root
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%s %s: %v\n%s", d.buildRun[0], strings.Join(args, " "), err, out)
			return
		}
		t.Logf("%s %s took %s", d.buildRun[0], strings.Join(args, " "), time.Since(began).Round(time.Millisecond))
	})
	require.NoError(t, buildErr)
	return buildDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// The Dockerfile's build line yields static executables built with the
// k8s provider and without cgo: no program interpreter, no shared library,
// so they run on an empty base image. Every image's entrypoint and every
// executable it copies come out of that build.
func TestDockerfileBuildYieldsStaticExecutables(t *testing.T) {
	root := moduleRoot(t)
	d := readDockerfile(t, root)
	dir := build(t)
	require.NotEmpty(t, d.fromOut)
	for name := range d.fromOut {
		p := filepath.Join(dir, name)
		f, err := elf.Open(p)
		require.NoError(t, err, "%s is an ELF executable", name)
		for _, prog := range f.Progs {
			require.NotEqual(t, elf.PT_INTERP, prog.Type, "%s asks for a program interpreter", name)
			require.NotEqual(t, elf.PT_DYNAMIC, prog.Type, "%s is dynamically linked", name)
		}
		require.Nil(t, f.Section(".symtab"), "%s is stripped (-s), to keep the image small", name)
		needed, err := f.DynString(elf.DT_NEEDED)
		require.NoError(t, err)
		require.Empty(t, needed, "%s needs shared libraries", name)
		require.NoError(t, f.Close())

		info, err := buildinfo.ReadFile(p)
		require.NoError(t, err)
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		require.Equal(t, "0", settings["CGO_ENABLED"], "%s: built without cgo", name)
		require.Equal(t, "k8s", settings["-tags"], "%s: built with the k8s provider", name)
		st, err := os.Stat(p)
		require.NoError(t, err)
		t.Logf("%s: static, %.1f MiB, tags %q, CGO_ENABLED=%s, %s", name, float64(st.Size())/(1<<20), settings["-tags"], settings["CGO_ENABLED"], info.GoVersion)
	}
	for stage, ep := range d.entrypoint {
		require.NotEmpty(t, ep, "stage %s", stage)
		require.Contains(t, d.files[stage], ep[0], "stage %s: its entrypoint is copied into it", stage)
		require.Contains(t, d.fromOut, path.Base(ep[0]), "stage %s: its entrypoint comes from the build", stage)
	}
	require.Len(t, d.entrypoint, 2, "one image per process")
	for _, want := range []string{"commerce-api", "order-workflow"} {
		require.Equal(t, []string{"/" + want}, d.entrypoint[want], "target %s runs %s", want, want)
	}
}

// manifests is every object of scripts/deploy/k8s, typed.
type manifests struct {
	namespaces      []*corev1.Namespace
	serviceAccounts []*corev1.ServiceAccount
	secrets         []*corev1.Secret
	services        []*corev1.Service
	deployments     []*appsv1.Deployment
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
	pdbs            []*policyv1.PodDisruptionBudget
	jobs            []*batchv1.Job
	// namespaced lists every namespaced object's kind/name and namespace.
	namespaced map[string]string
}

// decodeStrict decodes one YAML document into out: duplicate keys and
// fields the type does not have fail.
func decodeStrict(doc []byte, out any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func readManifests(t *testing.T, root string) manifests {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "scripts/deploy/k8s/*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	m := manifests{namespaced: map[string]string{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i, doc := range docSep.Split(string(b), -1) {
			where := fmt.Sprintf("%s document %d", filepath.Base(p), i+1)
			j, err := yaml.YAMLToJSON([]byte(doc))
			require.NoError(t, err, where)
			if string(j) == "null" {
				continue // comments only
			}
			var tm metav1.TypeMeta
			require.NoError(t, json.Unmarshal(j, &tm), where)
			var obj interface {
				GetName() string
				GetNamespace() string
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				o := &corev1.Namespace{}
				m.namespaces, obj = append(m.namespaces, o), o
			case "v1 ServiceAccount":
				o := &corev1.ServiceAccount{}
				m.serviceAccounts, obj = append(m.serviceAccounts, o), o
			case "v1 Secret":
				o := &corev1.Secret{}
				m.secrets, obj = append(m.secrets, o), o
			case "v1 Service":
				o := &corev1.Service{}
				m.services, obj = append(m.services, o), o
			case "apps/v1 Deployment":
				o := &appsv1.Deployment{}
				m.deployments, obj = append(m.deployments, o), o
			case "rbac.authorization.k8s.io/v1 Role":
				o := &rbacv1.Role{}
				m.roles, obj = append(m.roles, o), o
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				o := &rbacv1.RoleBinding{}
				m.roleBindings, obj = append(m.roleBindings, o), o
			case "policy/v1 PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, o), o
			case "batch/v1 Job":
				o := &batchv1.Job{}
				m.jobs, obj = append(m.jobs, o), o
			default:
				t.Fatalf("%s: %s %s is not a kind this test knows; teach it before using it", where, tm.APIVersion, tm.Kind)
			}
			require.NoError(t, decodeStrict([]byte(doc), obj), where)
			require.NotEmpty(t, obj.GetName(), where)
			if tm.Kind != "Namespace" {
				key := tm.Kind + "/" + obj.GetName()
				require.NotContains(t, m.namespaced, key, "%s: duplicate", where)
				m.namespaced[key] = obj.GetNamespace()
			}
		}
	}
	return m
}

func (m manifests) serviceAccount(name string) bool {
	return slices.ContainsFunc(m.serviceAccounts, func(s *corev1.ServiceAccount) bool { return s.Name == name })
}

func (m manifests) secretHas(name, key string) bool {
	for _, s := range m.secrets {
		if s.Name != name {
			continue
		}
		_, inData := s.Data[key]
		_, inString := s.StringData[key]
		return inData || inString
	}
	return false
}

// deploymentsSelectedBy lists the Deployments whose pods sel selects.
func (m manifests) deploymentsSelectedBy(t *testing.T, sel labels.Selector) []*appsv1.Deployment {
	t.Helper()
	var out []*appsv1.Deployment
	for _, d := range m.deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// binaryFlags lists the flags a built executable (or its subcommand, the
// leading args) accepts, from its usage.
func binaryFlags(t *testing.T, bin string, args ...string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, append(args, "-h")...).CombinedOutput() // -h exits non-zero
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	require.Contains(t, flags, "redis", "%s -h lists its flags:\n%s", bin, out)
	return flags
}

// envFlag maps SHOPPINGMALL_<FLAG> to the flag it sets (procflags).
func envFlag(name string) (string, bool) {
	f, ok := strings.CutPrefix(name, "SHOPPINGMALL_")
	return strings.ReplaceAll(strings.ToLower(f), "_", "-"), ok
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// listenPort is the port of a listen address ("host:port" or a bare port)
// and whether it is reachable from outside the pod (not loopback).
func listenPort(t *testing.T, v string) (int, bool) {
	t.Helper()
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		host, port = "", v
	}
	n, err := strconv.Atoi(port)
	require.NoError(t, err, "listen address %q", v)
	ip := net.ParseIP(host)
	return n, host != "localhost" && (ip == nil || !ip.IsLoopback())
}

// Every manifest decodes strictly into its typed Kubernetes object (an
// unknown or misspelt field fails), and the objects fit together: one
// namespace, selectors that select the pods, Service target ports, probe
// ports that are container ports a flag listens on outside loopback,
// scrape annotations naming the metrics listener's port and path, the
// service account and its RBAC (what protoactor's k8s provider does with
// pods), Secret keys, preStop executables in the image, every
// SHOPPINGMALL_ variable a flag of the binary the image runs, and a grace
// period that covers the preStop wait and the drain.
func TestManifestsDecodeStrictlyAndFitTogether(t *testing.T) {
	root := moduleRoot(t)
	m := readManifests(t, root)
	d := readDockerfile(t, root)
	dir := build(t)
	src := parseModule(t, root)
	metricsPath, err := src.constOf(src.module+"/cluster/telemetry", "MetricsPath")
	require.NoError(t, err, "the metrics listener's path, from the code")

	require.Len(t, m.namespaces, 1)
	ns := m.namespaces[0].Name
	for obj, got := range m.namespaced {
		require.Equal(t, ns, got, "%s is in namespace %s", obj, ns)
	}

	// RBAC: the k8s provider gets and patches its own pod and lists and
	// watches the cluster's pods.
	require.NotEmpty(t, m.roleBindings)
	for _, rb := range m.roleBindings {
		require.Equal(t, rbacv1.GroupName, rb.RoleRef.APIGroup, rb.Name)
		require.Equal(t, "Role", rb.RoleRef.Kind, rb.Name)
		i := slices.IndexFunc(m.roles, func(r *rbacv1.Role) bool { return r.Name == rb.RoleRef.Name })
		require.GreaterOrEqual(t, i, 0, "RoleBinding %s: Role %s exists", rb.Name, rb.RoleRef.Name)
		granted := map[string]bool{}
		for _, rule := range m.roles[i].Rules {
			if slices.Contains(rule.APIGroups, "") && slices.Contains(rule.Resources, "pods") {
				for _, v := range rule.Verbs {
					granted[v] = true
				}
			}
		}
		for _, v := range []string{"get", "list", "watch", "patch"} {
			require.True(t, granted[v], "Role %s grants %s on pods", m.roles[i].Name, v)
		}
		require.NotEmpty(t, rb.Subjects)
		for _, s := range rb.Subjects {
			require.Equal(t, rbacv1.ServiceAccountKind, s.Kind, rb.Name)
			require.Equal(t, ns, s.Namespace, rb.Name)
			require.True(t, m.serviceAccount(s.Name), "RoleBinding %s: ServiceAccount %s exists", rb.Name, s.Name)
		}
	}
	bound := func(sa string) bool {
		for _, rb := range m.roleBindings {
			for _, s := range rb.Subjects {
				if s.Name == sa {
					return true
				}
			}
		}
		return false
	}

	// portsOf maps each Deployment's container ports by name and number.
	type port struct {
		number   int32
		external bool // a flag listens on it outside loopback
	}
	portsOf := map[string]map[string]port{}
	require.Len(t, m.deployments, 2)
	for _, dep := range m.deployments {
		where := "Deployment " + dep.Name
		require.NotNil(t, dep.Spec.Selector, where)
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		require.NoError(t, err, where)
		require.False(t, sel.Empty(), where)
		require.True(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)), "%s: its selector matches its pod labels", where)
		require.Len(t, m.deploymentsSelectedBy(t, sel), 1, "%s: its selector selects its own pods only", where)
		pod := dep.Spec.Template.Spec
		require.NotEmpty(t, pod.ServiceAccountName, where)
		require.True(t, m.serviceAccount(pod.ServiceAccountName), "%s: ServiceAccount %s exists", where, pod.ServiceAccountName)
		require.True(t, bound(pod.ServiceAccountName), "%s: ServiceAccount %s is bound to the provider's Role", where, pod.ServiceAccountName)
		require.True(t, pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken, "%s: the provider needs the token", where)
		require.Len(t, pod.Containers, 1, where)
		c := pod.Containers[0]
		where += " container " + c.Name

		// The image is a Dockerfile target; its entrypoint is the binary
		// whose flags the variables set.
		repo, _, _ := strings.Cut(c.Image, ":")
		target := path.Base(repo)
		ep, ok := d.entrypoint[target]
		require.True(t, ok, "%s: image %s names a Dockerfile target", where, c.Image)
		require.Empty(t, c.Command, "%s: runs the image's entrypoint", where)
		flags := binaryFlags(t, filepath.Join(dir, path.Base(ep[0])))

		env := map[string]string{}
		for _, e := range c.Env {
			require.NotContains(t, env, e.Name, "%s: %s set twice", where, e.Name)
			for _, ref := range envRef.FindAllStringSubmatch(e.Value, -1) {
				require.Contains(t, env, ref[1], "%s: %s uses $(%s), defined before it", where, e.Name, ref[1])
			}
			if f, ok := envFlag(e.Name); ok {
				require.True(t, flags[f], "%s: %s sets -%s, a flag of %s", where, e.Name, f, ep[0])
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				r := e.ValueFrom.SecretKeyRef
				require.True(t, m.secretHas(r.Name, r.Key), "%s: %s from Secret %s key %s, which exists", where, e.Name, r.Name, r.Key)
			}
			env[e.Name] = e.Value
		}
		require.Equal(t, "k8s", env["SHOPPINGMALL_PROVIDER"], "%s: the k8s membership provider", where)
		// The Go runtime's soft memory limit sits at about 90 % of the
		// container's hard one: the collector works harder near it,
		// instead of the kernel killing the process in a burst.
		limit := c.Resources.Limits.Memory()
		require.False(t, limit.IsZero(), "%s: a memory limit", where)
		require.Contains(t, env, "GOMEMLIMIT", "%s: GOMEMLIMIT is set", where)
		soft, err := parseGoMemLimit(env["GOMEMLIMIT"])
		require.NoError(t, err, "%s: GOMEMLIMIT", where)
		ratio := float64(soft) / float64(limit.Value())
		require.InDelta(t, 0.9, ratio, 0.025, "%s: GOMEMLIMIT %s is about 90%% of limits.memory %s (%.1f%%)", where, env["GOMEMLIMIT"], limit.String(), 100*ratio)
		require.NotNil(t, findEnv(c.Env, "SHOPPINGMALL_REDIS").ValueFrom.SecretKeyRef, "%s: the Redis URL and its credentials come from a Secret", where)
		// A production order store must keep what it acknowledged:
		// the process checks its Redis masters (actors/node/durable.go).
		require.Equal(t, "true", env["SHOPPINGMALL_REQUIRE_DURABLE_STORE"], "%s: -require-durable-store is on", where)
		require.Equal(t, "1", env["SHOPPINGMALL_REDIS_WAIT_REPLICAS"], "%s: a write waits for one replica", where)
		if flags["order-id-secret"] {
			require.NotNil(t, findEnv(c.Env, "SHOPPINGMALL_ORDER_ID_SECRET").ValueFrom.SecretKeyRef, "%s: the OrderId secret comes from a Secret", where)
		}
		if flags["admin-token"] {
			require.NotNil(t, findEnv(c.Env, "SHOPPINGMALL_ADMIN_TOKEN").ValueFrom.SecretKeyRef, "%s: the admin token comes from a Secret", where)
		}
		// The cluster link binds the pod address, the one the provider
		// tells the other members (the pod IP), on the labelled port.
		require.Equal(t, "$(POD_IP)", env["SHOPPINGMALL_BIND"], where)
		podIP := findEnv(c.Env, "POD_IP")
		require.NotNil(t, podIP.ValueFrom, where)
		require.Equal(t, "status.podIP", podIP.ValueFrom.FieldRef.FieldPath, where)

		// Which flag listens on which port.
		listens := map[int32]bool{}
		for _, name := range []string{"SHOPPINGMALL_HTTP", "SHOPPINGMALL_OPS_HTTP", "SHOPPINGMALL_METRICS_HTTP", "SHOPPINGMALL_PORT"} {
			if v, ok := env[name]; ok {
				n, external := listenPort(t, strings.ReplaceAll(v, "$(POD_IP)", "10.0.0.1"))
				listens[int32(n)] = external
			}
		}
		ports := map[string]port{}
		for _, p := range c.Ports {
			external, ok := listens[p.ContainerPort]
			require.True(t, ok, "%s: a flag listens on container port %s (%d)", where, p.Name, p.ContainerPort)
			require.NotEmpty(t, p.Name, where)
			ports[p.Name] = port{p.ContainerPort, external}
			ports[strconv.Itoa(int(p.ContainerPort))] = ports[p.Name]
		}
		portsOf[dep.Name] = ports

		// Scraping: Prometheus' pod discovery reads the pod's
		// prometheus.io annotations; they name the port and path the
		// metrics listener serves, on a container port outside
		// loopback.
		ann := dep.Spec.Template.Annotations
		require.Equal(t, "true", ann["prometheus.io/scrape"], "%s: the pod is scraped", where)
		require.Equal(t, metricsPath, ann["prometheus.io/path"], "%s: prometheus.io/path is where the metrics listener serves", where)
		require.Contains(t, env, "SHOPPINGMALL_METRICS_HTTP", "%s: the metrics listener has a fixed address", where)
		mp, external := listenPort(t, strings.ReplaceAll(env["SHOPPINGMALL_METRICS_HTTP"], "$(POD_IP)", "10.0.0.1"))
		require.True(t, external, "%s: the metrics listener is not bound to loopback", where)
		require.Equal(t, strconv.Itoa(mp), ann["prometheus.io/port"], "%s: prometheus.io/port is the metrics listener's", where)
		require.Contains(t, ports, ann["prometheus.io/port"], "%s: prometheus.io/port is a container port", where)

		// Probes: /readyz and /healthz on a port a flag listens on where
		// the kubelet reaches it.
		for _, pr := range []struct {
			name, path string
			p          *corev1.Probe
		}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
			require.NotNil(t, pr.p, "%s: %s probe", where, pr.name)
			require.NotNil(t, pr.p.HTTPGet, "%s: %s probe is an HTTP GET", where, pr.name)
			require.Equal(t, pr.path, pr.p.HTTPGet.Path, "%s: %s probe", where, pr.name)
			pp, ok := ports[pr.p.HTTPGet.Port.String()]
			require.True(t, ok, "%s: %s probe port %s is a container port", where, pr.name, pr.p.HTTPGet.Port.String())
			require.True(t, pp.external, "%s: %s probe port %s is not bound to loopback", where, pr.name, pr.p.HTTPGet.Port.String())
		}

		// Stopping: the grace period covers the preStop wait and the
		// process's own bound (the workflow's drain, the API's shutdown).
		require.NotNil(t, c.Lifecycle, where)
		require.NotNil(t, c.Lifecycle.PreStop, where)
		require.NotNil(t, c.Lifecycle.PreStop.Exec, "%s: preStop runs the image's prestop", where)
		cmd := c.Lifecycle.PreStop.Exec.Command
		require.Len(t, cmd, 2, where)
		require.Contains(t, d.files[target], cmd[0], "%s: preStop's %s is in the image", where, cmd[0])
		require.Contains(t, d.fromOut, path.Base(cmd[0]), "%s: preStop's %s comes from the build", where, cmd[0])
		wait, err := time.ParseDuration(cmd[1])
		require.NoError(t, err, where)
		var bound time.Duration
		for _, name := range []string{"SHOPPINGMALL_DRAIN_TIMEOUT", "SHOPPINGMALL_SHUTDOWN_TIMEOUT"} {
			if v, ok := env[name]; ok {
				b, err := time.ParseDuration(v)
				require.NoError(t, err, "%s: %s", where, name)
				bound = max(bound, b)
			}
		}
		require.Positive(t, bound, "%s: the manifest states the process's stop bound", where)
		require.NotNil(t, pod.TerminationGracePeriodSeconds, where)
		grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
		require.GreaterOrEqual(t, grace, wait+bound, "%s: grace period %s covers preStop %s + %s", where, grace, wait, bound)
		t.Logf("%s: image %s, probes on %s, preStop %s + stop bound %s <= grace %s", dep.Name, c.Image,
			c.ReadinessProbe.HTTPGet.Port.String(), wait, bound, grace)
	}
	require.Contains(t, portsOf, "commerce-api")
	require.Contains(t, portsOf, "order-workflow")
	wf := m.deployments[slices.IndexFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == "order-workflow" })]
	require.Equal(t, intstr.FromString("ops"), wf.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Port, "order-workflow's probes are on its operations listener")

	// Services select one Deployment's pods, on ports it has.
	require.NotEmpty(t, m.services)
	for _, s := range m.services {
		where := "Service " + s.Name
		require.NotEmpty(t, s.Spec.Selector, where)
		deps := m.deploymentsSelectedBy(t, labels.SelectorFromSet(s.Spec.Selector))
		require.Len(t, deps, 1, "%s selects one Deployment's pods", where)
		for _, p := range s.Spec.Ports {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			_, ok := portsOf[deps[0].Name][tp.String()]
			require.True(t, ok, "%s: target port %s is a container port of %s", where, tp.String(), deps[0].Name)
		}
	}

	// PodDisruptionBudgets select a Deployment's pods and allow evictions.
	require.NotEmpty(t, m.pdbs)
	for _, p := range m.pdbs {
		where := "PodDisruptionBudget " + p.Name
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		require.NoError(t, err, where)
		require.False(t, sel.Empty(), where)
		deps := m.deploymentsSelectedBy(t, sel)
		require.Len(t, deps, 1, "%s selects one Deployment's pods", where)
		replicas := int32(1)
		if deps[0].Spec.Replicas != nil {
			replicas = *deps[0].Spec.Replicas
		}
		switch {
		case p.Spec.MinAvailable != nil:
			require.Equal(t, intstr.Int, p.Spec.MinAvailable.Type, where)
			require.Less(t, p.Spec.MinAvailable.IntVal, replicas, "%s leaves room for an eviction", where)
		case p.Spec.MaxUnavailable != nil:
			require.Equal(t, intstr.Int, p.Spec.MaxUnavailable.Type, where)
			require.Positive(t, p.Spec.MaxUnavailable.IntVal, "%s leaves room for an eviction", where)
		default:
			t.Fatalf("%s: neither minAvailable nor maxUnavailable", where)
		}
	}
}

var goMemLimit = regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`)

// parseGoMemLimit reads GOMEMLIMIT as the Go runtime does: a byte count
// with an optional binary unit suffix. "off" is no limit, which fails.
func parseGoMemLimit(v string) (int64, error) {
	m := goMemLimit.FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("%q is not a byte count with an optional B, KiB, MiB, GiB or TiB suffix", v)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, nil
}

func findEnv(env []corev1.EnvVar, name string) corev1.EnvVar {
	for _, e := range env {
		if e.Name == name {
			return e
		}
	}
	return corev1.EnvVar{ValueFrom: &corev1.EnvVarSource{}}
}
