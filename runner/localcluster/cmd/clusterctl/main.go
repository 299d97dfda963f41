// Command clusterctl runs a local ShoppingMall cluster in the background:
//
//	clusterctl up     [-run-dir .run] [-workflows 2] [-apis 2] [-self-check] [-fixtures] [-redis-cluster [-redis-cluster-replicas N]] [-redis-ha sentinel] [-archive [-retention D]] [-idle-timeout D]
//	clusterctl down   [-run-dir .run]
//	clusterctl seed   [-run-dir .run] -file seed.json
//	clusterctl status [-run-dir .run]
//
// up builds commerce-api, order-workflow and clusterctl into <run dir>/bin,
// then starts a detached supervisor (clusterctl serve) that starts Redis and
// the nodes through runner/localcluster (-apis API processes api-a, api-b,
// api-c, ... and -workflows workflow processes workflow-a, ...; two of each
// by default), waits for their readiness lines,
// applies the demo seed and records every PID in <run dir>/localcluster.json.
// The supervisor keeps running after up returns and restarts a node that
// exits on its own (a workflow member that fenced itself exits 3) under
// the same name, with backoff, like Kubernetes' restartPolicy Always; it
// rewrites localcluster.json with the new PID each time. down asks it to stop
// the processes it started (by PID) and then makes sure none of the
// recorded PIDs is left.
//
// The APIs always run with -admin: each gets an admin listener on a free
// loopback port and the generated token of <run dir>/admin.token (mode
// 0600); localcluster.json records each admin address as adminUrl and the
// token file as adminTokenFile, and up prints both.
//
// With -redis-cluster Redis is a local 3-master Redis Cluster (each master
// recorded by PID under redisMasters) and every node gets its
// redis+cluster URL; -redis-cluster-replicas N gives each master N
// replicas (recorded under redisExtra) and the nodes -redis-wait-replicas
// 1. With -redis-ha sentinel Redis is a primary, two replicas and three
// sentinels (the others under redisExtra), every node gets a
// redis+sentinel URL and -redis-wait-replicas 1.
//
// It must not import edge or the framework package cluster; it writes to a
// store only to seed actors/commerce.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

const usage = `usage: clusterctl up|down|seed|status [flags]
  up      build, start the cluster in the background, apply the demo seed
  down    stop every process the running cluster started
  seed    -file seed.json: add carts, stock and payment methods to its Redis
  status  print the running cluster's endpoints`

const (
	// upPoll bounds how long up waits for the supervisor to report the
	// cluster ready: the readiness budget itself (30 s) plus Redis start,
	// process start and seeding.
	upPollInterval = 100 * time.Millisecond
	upPollAttempts = 900
	// stopGrace is the local cluster's bound per node from SIGTERM to
	// SIGKILL (localcluster.Config.StopGrace's default).
	stopGrace = 40 * time.Second
)

// downGrace bounds the supervisor's own orderly stop: the APIs in
// parallel, then each workflow draining in turn, then Redis; 150 s for
// the default two workflows.
func downGrace(workflows int) time.Duration {
	return time.Duration(1+max(workflows, 2))*stopGrace + 30*time.Second
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = up(args)
	case "serve":
		err = serve(args)
	case "down":
		err = down(args)
	case "seed":
		err = seed(args)
	case "status":
		err = status(args)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterctl "+cmd+": "+err.Error())
		os.Exit(1)
	}
}

type options struct {
	runDir    string
	goBin     string
	admin     bool
	selfCheck bool
	fixtures  bool
	file      string
	workflows int
	apis      int
	// redisCluster runs a 3-master Redis Cluster instead of one server.
	redisCluster bool
	// redisClusterReplicas gives each master that many replicas.
	redisClusterReplicas int
	// redisHA "sentinel" runs a primary, a replica and three sentinels.
	redisHA string
	// archive runs a PostgreSQL archive and gives every node -archive.
	archive bool
	// retention gives the workflows -retention (with archive).
	retention time.Duration
	// idleTimeout is the workflows' -idle-timeout: 0 never passivates,
	// but with a retention it is retentionIdleTimeout.
	idleTimeout time.Duration
}

// retentionIdleTimeout is the workflows' -idle-timeout with a retention
// and none given: an order is archived once its grain passivated.
const retentionIdleTimeout = 5 * time.Second

func parse(name string, args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&o.runDir, "run-dir", ".run", "run directory (logs, PIDs, state, binaries)")
	fs.StringVar(&o.goBin, "go", "go", "go command used to build the binaries")
	fs.BoolVar(&o.admin, "admin", true, "start the APIs with -admin (always on; kept for old CLUSTER_FLAGS)")
	fs.BoolVar(&o.selfCheck, "self-check", false, "start the APIs with -self-check (runner hooks)")
	fs.BoolVar(&o.fixtures, "fixtures", false, "start the workflows with -fixtures")
	fs.StringVar(&o.file, "file", "", "seed file (commerce.LoadSeed JSON)")
	fs.IntVar(&o.workflows, "workflows", 2, fmt.Sprintf("number of workflow processes (workflow-a, workflow-b, ...), 1 to %d", localcluster.MaxNodesPerRole))
	fs.BoolVar(&o.redisCluster, "redis-cluster", false, "run a local 3-master Redis Cluster instead of one redis-server")
	fs.IntVar(&o.redisClusterReplicas, "redis-cluster-replicas", 0, "replicas per master of the -redis-cluster (the nodes then wait for one per write)")
	fs.BoolVar(&o.archive, "archive", false, "run a PostgreSQL archive (the event store's cold tier, docs/archive.md) under the run dir, and start every node with -archive")
	fs.DurationVar(&o.retention, "retention", 0, "start the workflows with -retention: finished orders move to the -archive after it (docs/archive.md); 0 keeps every order in Redis")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, fmt.Sprintf("the workflows' -idle-timeout; 0 never passivates a grain, except with -retention, where it is %s (an order is archived once its grain passivated)", retentionIdleTimeout))
	fs.StringVar(&o.redisHA, "redis-ha", "", `"sentinel": a primary, two replicas and three sentinels instead of one redis-server (the nodes wait for one replica per write, so one Redis failure stops no write)`)
	fs.IntVar(&o.apis, "apis", 2, fmt.Sprintf("number of API processes (api-a, api-b, ...), 1 to %d", localcluster.MaxNodesPerRole))
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.retention > 0 && o.idleTimeout == 0 {
		o.idleTimeout = retentionIdleTimeout
	}
	for _, n := range []struct {
		flag  string
		count int
	}{{"-workflows", o.workflows}, {"-apis", o.apis}} {
		if n.count < 1 || n.count > localcluster.MaxNodesPerRole {
			return o, fmt.Errorf("%s %d: want 1 to %d", n.flag, n.count, localcluster.MaxNodesPerRole)
		}
	}
	abs, err := filepath.Abs(o.runDir)
	if err != nil {
		return o, err
	}
	o.runDir = abs
	return o, nil
}

func statePath(runDir string) string { return filepath.Join(runDir, "localcluster.json") }

// running returns the state of a cluster whose supervisor still runs.
// A state left by a supervisor that died is cleaned up: whatever of its
// recorded processes still runs is stopped by PID and the file removed.
func running(runDir string) (localcluster.State, bool, error) {
	st, err := localcluster.ReadState(statePath(runDir))
	if errors.Is(err, localcluster.ErrNoState) {
		return localcluster.State{}, false, nil
	}
	if err != nil {
		return localcluster.State{}, false, err
	}
	if localcluster.Alive(st.Supervisor.PID, st.Supervisor.StartTime) {
		return st, true, nil
	}
	fmt.Printf("found a stale %s (supervisor pid %d is gone): cleaning up\n", statePath(runDir), st.Supervisor.PID)
	if err := stopRecorded(st); err != nil {
		return localcluster.State{}, false, err
	}
	if err := os.Remove(statePath(runDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return localcluster.State{}, false, err
	}
	return localcluster.State{}, false, nil
}

func stopRecorded(st localcluster.State) error {
	var errs []error
	for _, p := range st.Processes() {
		if localcluster.Alive(p.PID, p.StartTime) {
			fmt.Printf("stopping leftover %s pid %d\n", p.Name, p.PID)
		}
		if err := localcluster.StopPID(p.PID, p.StartTime, 20*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}

func up(args []string) error {
	o, err := parse("up", args)
	if err != nil {
		return err
	}
	if st, ok, err := running(o.runDir); err != nil {
		return err
	} else if ok {
		fmt.Printf("a cluster is already running from %s (supervisor pid %d); not starting another\n", o.runDir, st.Supervisor.PID)
		printSummary(os.Stdout, st)
		return nil
	}
	bin := filepath.Join(o.runDir, "bin")
	for _, b := range []struct{ out, pkg string }{
		{"commerce-api", "./edge/cmd/commerce-api"},
		{"order-workflow", "./actors/cmd/order-workflow"},
		{"clusterctl", "./runner/localcluster/cmd/clusterctl"},
	} {
		fmt.Printf("building %s\n", b.pkg)
		c := exec.Command(o.goBin, "build", "-o", filepath.Join(bin, b.out), b.pkg)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("build %s: %w", b.pkg, err)
		}
	}

	logPath := filepath.Join(o.runDir, "clusterctl.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	sargs := []string{"serve", "-run-dir", o.runDir, "-workflows", strconv.Itoa(o.workflows), "-apis", strconv.Itoa(o.apis)}
	if o.admin {
		sargs = append(sargs, "-admin")
	}
	if o.selfCheck {
		sargs = append(sargs, "-self-check")
	}
	if o.fixtures {
		sargs = append(sargs, "-fixtures")
	}
	if o.redisCluster {
		sargs = append(sargs, "-redis-cluster", "-redis-cluster-replicas", strconv.Itoa(o.redisClusterReplicas))
	}
	if o.redisHA != "" {
		sargs = append(sargs, "-redis-ha", o.redisHA)
	}
	if o.archive {
		sargs = append(sargs, "-archive")
	}
	if o.retention > 0 {
		sargs = append(sargs, "-retention", o.retention.String())
	}
	if o.idleTimeout > 0 {
		sargs = append(sargs, "-idle-timeout", o.idleTimeout.String())
	}
	sup := exec.Command(filepath.Join(bin, "clusterctl"), sargs...)
	sup.Stdout, sup.Stderr = logf, logf
	sup.SysProcAttr = localcluster.DetachedProcAttr()
	err = sup.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sup.Wait() }()
	fmt.Printf("supervisor pid %d started; waiting for readiness (log %s)\n", sup.Process.Pid, logPath)

	for range upPollAttempts {
		select {
		case err := <-exited:
			return fmt.Errorf("the supervisor exited (%v) before the cluster was ready; %s:\n%s", err, logPath, localcluster.Tail(logPath, 30))
		case <-time.After(upPollInterval):
		}
		st, err := localcluster.ReadState(statePath(o.runDir))
		if err == nil && st.Supervisor.PID == sup.Process.Pid {
			fmt.Println()
			printSummary(os.Stdout, st)
			return nil
		}
	}
	_ = localcluster.StopPID(sup.Process.Pid, 0, downGrace(o.workflows))
	return fmt.Errorf("the cluster was not ready in time; %s:\n%s", logPath, localcluster.Tail(logPath, 30))
}

// serve is the detached supervisor: it owns the cluster's processes until
// it is told to stop.
func serve(args []string) error {
	o, err := parse("serve", args)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) {
		fmt.Printf(time.Now().Format(time.RFC3339)+" "+format+"\n", a...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	bin := filepath.Join(o.runDir, "bin")
	// The state file names the current PIDs: after a supervisor restart
	// too, so that status and down find the new process.
	var (
		stateMu sync.Mutex
		c       *localcluster.Cluster
		written bool
	)
	// writeState writes the state file; rewriteState rewrites it after a
	// restart, once the cluster is ready and it was first written.
	writeState := func() error {
		stateMu.Lock()
		defer stateMu.Unlock()
		st := c.State()
		st.Supervisor = localcluster.SelfProcess("supervisor")
		if err := localcluster.WriteState(statePath(o.runDir), st); err != nil {
			return err
		}
		written = true
		return nil
	}
	rewriteState := func() error {
		stateMu.Lock()
		first := !written
		stateMu.Unlock()
		if first {
			return nil
		}
		return writeState()
	}
	c, err = localcluster.Start(ctx, localcluster.Config{
		RunDir:               o.runDir,
		APIBin:               filepath.Join(bin, "commerce-api"),
		WorkflowBin:          filepath.Join(bin, "order-workflow"),
		RedisPersist:         true,
		SelfCheck:            o.selfCheck,
		Admin:                true,
		Fixtures:             o.fixtures,
		Workflows:            o.workflows,
		APIs:                 o.apis,
		RedisCluster:         o.redisCluster,
		RedisClusterReplicas: o.redisClusterReplicas,
		RedisHA:              o.redisHA,
		Archive:              o.archive,
		Retention:            o.retention,
		WorkflowIdleTimeout:  o.idleTimeout,
		Env:                  localcluster.ChildEnv(os.Environ()),
		Logf:                 logf,
		OnRestart: func(name string, pid int) {
			if err := rewriteState(); err != nil {
				logf("state after restarting %s: %v", name, err)
			}
		},
	})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping")
		if err := c.Stop(); err != nil {
			logf("stop: %v", err)
		}
		os.Remove(statePath(o.runDir))
		logf("stopped")
	}()
	if err := applySeed(ctx, c.RedisURL(), commerce.DemoSeed(), logf); err != nil {
		return fmt.Errorf("demo seed: %w", err)
	}
	logf("demo seed applied")
	if err := writeState(); err != nil {
		return err
	}
	logf("ready; state in %s", statePath(o.runDir))
	<-ctx.Done()
	return nil
}

// applySeed writes the seed to url's Redis (commerce's
// ApplySeedRetrying): a Redis restarted on an existing run dir answers
// LOADING while it reads its append-only file, and one failed attempt
// must not end the supervisor.
func applySeed(ctx context.Context, url string, s commerce.Seed, logf func(string, ...any)) error {
	rc, err := redisurl.NewClient(url, redisurl.Options{})
	if err != nil {
		return err
	}
	defer rc.Close()
	store, err := commerce.NewRedis(commerce.Config{Client: rc})
	if err != nil {
		return err
	}
	return store.ApplySeedRetrying(ctx, s, logf)
}

func down(args []string) error {
	o, err := parse("down", args)
	if err != nil {
		return err
	}
	st, err := localcluster.ReadState(statePath(o.runDir))
	if errors.Is(err, localcluster.ErrNoState) {
		fmt.Printf("no cluster is running from %s\n", o.runDir)
		return nil
	}
	if err != nil {
		return err
	}
	if localcluster.Alive(st.Supervisor.PID, st.Supervisor.StartTime) {
		fmt.Printf("stopping the supervisor pid %d (it stops the processes it started)\n", st.Supervisor.PID)
		if err := localcluster.StopPID(st.Supervisor.PID, st.Supervisor.StartTime, downGrace(workflowCount(st))); err != nil {
			fmt.Fprintf(os.Stderr, "supervisor: %v\n", err)
		}
	}
	// Whatever the supervisor could not stop is stopped here, by the PIDs
	// the state file recorded and nothing else.
	if err := stopRecorded(st); err != nil {
		return err
	}
	var left []string
	for _, p := range st.Processes() {
		if localcluster.Alive(p.PID, p.StartTime) {
			left = append(left, fmt.Sprintf("%s pid %d", p.Name, p.PID))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("still running: %s", strings.Join(left, ", "))
	}
	if err := os.Remove(statePath(o.runDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var pids []string
	for _, p := range st.Processes() {
		pids = append(pids, fmt.Sprintf("%s=%d", p.Name, p.PID))
	}
	fmt.Printf("cluster stopped (%s); logs stay in %s\n", strings.Join(pids, " "), o.runDir)
	return nil
}

func seed(args []string) error {
	o, err := parse("seed", args)
	if err != nil {
		return err
	}
	if o.file == "" {
		return errors.New("-file is required (make seed SEED=file.json)")
	}
	st, ok, err := running(o.runDir)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no cluster is running from %s: run make cluster-up first", o.runDir)
	}
	f, err := os.Open(o.file)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := commerce.LoadSeed(f)
	if err != nil {
		return err
	}
	seedCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := applySeed(seedCtx, st.Redis.URL, s, func(format string, a ...any) { fmt.Printf(format+"\n", a...) }); err != nil {
		return err
	}
	fmt.Printf("seeded %d carts, %d SKUs, %d payment methods from %s into %s\n", len(s.Carts), len(s.Stock), len(s.Methods), o.file, st.Redis.URL)
	return nil
}

func status(args []string) error {
	o, err := parse("status", args)
	if err != nil {
		return err
	}
	st, ok, err := running(o.runDir)
	if err != nil {
		return err
	}
	if !ok {
		fmt.Printf("no cluster is running from %s\n", o.runDir)
		return nil
	}
	printSummary(os.Stdout, st)
	return nil
}

func printSummary(w io.Writer, st localcluster.State) {
	fmt.Fprintf(w, "ShoppingMall cluster (run dir %s, supervisor pid %d)\n", st.RunDir, st.Supervisor.PID)
	var api string
	for _, n := range st.Nodes {
		if n.Role == localcluster.RoleAPI {
			if api == "" {
				api = n.URL
			}
			fmt.Fprintf(w, "  %-11s %-30s pid %-7d log %s\n", n.Name, n.URL, n.PID, n.Log)
			if n.AdminURL != "" {
				fmt.Fprintf(w, "  %-11s %-30s bearer token in %s\n", "", "admin "+n.AdminURL, st.AdminTokenFile)
			}
		} else {
			// A workflow has no public HTTP, only its operations listener.
			fmt.Fprintf(w, "  %-11s %-30s pid %-7d log %s\n", n.Name, "ops "+n.OpsURL, n.PID, n.Log)
		}
		if n.MetricsURL != "" {
			fmt.Fprintf(w, "  %-11s %s\n", "", "metrics "+n.MetricsURL+"/metrics")
		}
	}
	if len(st.RedisMasters) > 0 {
		fmt.Fprintf(w, "  %-11s %s\n", "redis", st.Redis.URL)
		for _, m := range st.RedisMasters {
			fmt.Fprintf(w, "  %-11s %-30s pid %-7d log %s\n", m.Name, m.URL, m.PID, m.Log)
		}
	} else {
		fmt.Fprintf(w, "  %-11s %-30s pid %-7d log %s\n", "redis", st.Redis.URL, st.Redis.PID, st.Redis.Log)
	}
	for _, m := range st.RedisExtra {
		fmt.Fprintf(w, "  %-11s %-30s pid %-7d log %s\n", m.Name, m.URL, m.PID, m.Log)
	}
	if a := st.Archive; a.PID != 0 {
		fmt.Fprintf(w, "  %-11s %s pid %d log %s\n", "archive", a.URL, a.PID, a.Log)
	}
	fmt.Fprintf(w, "\nProbes: GET /healthz and /readyz on each API and on each workflow's ops address.\n")
	fmt.Fprintf(w, "Metrics: GET /metrics on each node's metrics address; profiles: /debug/pprof/ on each API's admin and each workflow's ops address, with the bearer token.\n")
	fmt.Fprintf(w, "\nDemo data (commerce.DemoSeed):\n")
	fmt.Fprintf(w, "  carts            %s (ample stock), %s (sold out)\n", commerce.DemoCartOK, commerce.DemoCartNoStock)
	fmt.Fprintf(w, "  payment methods  %s (approves), %s (declines: %q)\n", commerce.DemoMethodOK, commerce.DemoMethodDeclined, commerce.DemoDeclineReason)
	fmt.Fprintf(w, "  shipping address any string, e.g. addr-demo-1\n")
	key := "demo-" + randomHex(4)
	body := fmt.Sprintf(`{"cartId":"%s","shippingAddressId":"addr-demo-1","paymentMethodId":"%s","idempotencyKey":"%s"}`,
		commerce.DemoCartOK, commerce.DemoMethodOK, key)
	fmt.Fprintf(w, "\nTry it (POST /orders, then GET the order):\n")
	fmt.Fprintf(w, "  ORDER=$(curl -s -X POST %s/orders -H 'Content-Type: application/json' -d '%s' | sed -E 's/.*\"orderId\":\"([^\"]+)\".*/\\1/'); echo \"$ORDER\"\n", api, body)
	fmt.Fprintf(w, "  curl -s %s/orders/$ORDER\n", api)
	fmt.Fprintf(w, "\nOr with the CLI (place, then wait for the outcome; also order get|wait|continue ID):\n")
	fmt.Fprintf(w, "  %s order place -api %s -cart %s -address addr-demo-1 -method %s -wait\n",
		filepath.Join(st.RunDir, "bin", "commerce-api"), api, commerce.DemoCartOK, commerce.DemoMethodOK)
	if admin := firstAdmin(st); admin != "" && st.AdminTokenFile != "" {
		fmt.Fprintf(w, "\nAdmin (loopback only, bearer token from %s):\n", st.AdminTokenFile)
		fmt.Fprintf(w, "  curl -s -H \"Authorization: Bearer $(cat %s)\" '%s/admin/orders/stuck?olderThan=1m'\n", st.AdminTokenFile, admin)
		fmt.Fprintf(w, "  SHOPPINGMALL_ADMIN_TOKEN=$(cat %s) %s admin stuck -api %s\n", st.AdminTokenFile, filepath.Join(st.RunDir, "bin", "commerce-api"), admin)
	}
	fmt.Fprintf(w, "\nAdd data: make seed SEED=file.json    Stop: make cluster-down\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprintf("%x", time.Now().UnixNano())
	}
	return hex.EncodeToString(b)
}

// workflowCount is how many workflow nodes the state records.
func workflowCount(st localcluster.State) int {
	n := 0
	for _, p := range st.Nodes {
		if p.Role == localcluster.RoleWorkflow {
			n++
		}
	}
	return n
}

// firstAdmin is the first API's admin address in the state.
func firstAdmin(st localcluster.State) string {
	for _, n := range st.Nodes {
		if n.Role == localcluster.RoleAPI && n.AdminURL != "" {
			return n.AdminURL
		}
	}
	return ""
}
