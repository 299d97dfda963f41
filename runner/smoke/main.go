// Command smoke is the ShoppingMall smoke runner (docs/contract.md,
// "Smoke run"), one command for steps 1–7:
//
//  1. build commerce-api, order-workflow and the client;
//  2. start a private Redis (every store; with -redis-cluster a local
//     3-master Redis Cluster) and seed run-specific data: a
//     cart with ample stock, a cart whose stock cannot cover it and a
//     declining payment method, apart from the success path's own;
//  3. start api-a, api-b (-self-check -admin, each with an admin listener
//     on loopback and the cluster's generated admin token) and workflow-a,
//     workflow-b (-fixtures) through runner/localcluster;
//  4. wait, bounded, for the readiness lines in each API log
//     (docs/contract.md, "Readiness lines");
//  5. prepare the fixtures through the runner-only hooks, write the
//     fixtures file, run the client once and require its
//     shoppingmall=completed line; then collect the server evidence through
//     the hooks and each node's own log;
//  6. print shoppingmall-placement=completed when every row passed;
//  7. otherwise print the cause and the last confirmed state, exit 1.
//
// It is the only caller of /self-check/* and /admin/*. Every identifier it
// sends to a hook is one this run produced. scripts/smoke.sh and
// scripts/smoke.ps1 only call `go run ./runner/smoke`; the polling budget
// (every 100 ms, at most 300 looks) lives here.
//
// Server facts come only through the hooks and the node logs: it must not
// import edge, eventstore, readmodel, actors/workflow, actors/grain or the
// framework package cluster. It touches a store once, to seed
// actors/commerce before any process starts.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

const (
	clientMarker    = "shoppingmall=completed"
	placementMarker = "shoppingmall-placement=completed"
)

func main() {
	runDir := flag.String("run-dir", ".run/smoke", "directory for binaries, logs and fixtures of the runs")
	goBin := flag.String("go", "go", "go command used to build")
	redisCluster := flag.Bool("redis-cluster", false, "run the stores on a local 3-master Redis Cluster; the run then also fails on any CROSSSLOT reply")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &runner{out: os.Stdout, goBin: *goBin, poll: localcluster.DefaultPoll,
		hc: &http.Client{Timeout: 30 * time.Second}, redisCluster: *redisCluster}
	err := r.run(ctx, *runDir)
	if err != nil {
		r.logf("FAILED: %v", err)
		last := r.last
		if last == "" {
			last = "(none)"
		}
		r.logf("last confirmed state: %s", last)
		if r.dir != "" {
			r.logf("logs: %s", r.dir)
		}
		os.Exit(1)
	}
	fmt.Fprintln(r.out, placementMarker)
}

type runner struct {
	out   io.Writer
	goBin string
	hc    *http.Client
	poll  localcluster.Poll
	// redisCluster runs the stores on a 3-master Redis Cluster.
	redisCluster bool

	dir    string // this run's directory
	binDir string
	runID  string

	cl  *localcluster.Cluster
	pub []*client.API // public order API of api-a, api-b
	hk  []*hooks      // hooks of api-a, api-b

	seed    commerce.Seed
	catalog client.Catalog
	address string
	fx      client.Fixtures
	res     client.Results

	// last is the last confirmed state or evidence, for a failure report.
	last string

	relocated relocRecord
	killed    killRecord
	closed    closeRecord
	// orders is every OrderId this run produced, for log matching.
	orders map[string]bool
}

func (r *runner) logf(format string, a ...any) {
	fmt.Fprintf(r.out, "smoke: "+format+"\n", a...)
}

func (r *runner) run(ctx context.Context, base string) error {
	base, err := filepath.Abs(base)
	if err != nil {
		return err
	}
	r.runID = "smk" + randomHex(4)
	r.orders = map[string]bool{}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	// Earlier runs' directories go (only names this runner creates), except
	// one whose processes still run: its pids directory is not empty.
	if old, _ := filepath.Glob(filepath.Join(base, "run-*")); len(old) > 0 {
		for _, d := range old {
			if pids, _ := os.ReadDir(filepath.Join(d, "pids")); len(pids) == 0 {
				os.RemoveAll(d)
			}
		}
	}
	r.dir = filepath.Join(base, "run-"+r.runID)
	r.binDir = filepath.Join(r.dir, "bin")
	r.logf("run %s in %s", r.runID, r.dir)

	// 1. Build.
	if err := r.build(ctx); err != nil {
		return fmt.Errorf("build: %w", err)
	}

	// 2–4. Redis and seed, four processes, bounded readiness.
	r.prepareSeed()
	r.cl, err = localcluster.Start(ctx, localcluster.Config{
		RunDir:       r.dir,
		APIBin:       filepath.Join(r.binDir, "commerce-api"),
		WorkflowBin:  filepath.Join(r.binDir, "order-workflow"),
		SelfCheck:    true,
		Admin:        true,
		Fixtures:     true,
		RedisCluster: r.redisCluster,
		Env:          localcluster.ChildEnv(os.Environ()),
		Poll:         r.poll,
		Logf:         func(f string, a ...any) { r.logf(f, a...) },
		BeforeNodes:  r.applySeed,
	})
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	defer func() {
		r.logf("stopping the cluster")
		if err := r.cl.Stop(); err != nil {
			r.logf("stop: %v", err)
		}
	}()
	r.logf("ready: %s and %s announced kind=http and kind=object-route for %s and %s",
		localcluster.APIA, localcluster.APIB, localcluster.WorkflowA, localcluster.WorkflowB)
	// The hooks live on each API's admin listener, behind the cluster's
	// admin token: both are read from the cluster's state, as an operator
	// reads them from localcluster.json and admin.token.
	st := r.cl.State()
	token, err := localcluster.ReadAdminToken(filepath.Dir(st.AdminTokenFile))
	if err != nil {
		return err
	}
	for _, api := range localcluster.APINodes {
		n, ok := st.Node(api)
		if !ok || n.AdminURL == "" {
			return fmt.Errorf("the cluster state names no admin address for %s", api)
		}
		r.pub = append(r.pub, &client.API{BaseURL: r.cl.APIURL(api), HTTP: r.hc})
		r.hk = append(r.hk, &hooks{base: n.AdminURL, token: token, hc: r.hc})
	}

	// 5a. Fixtures through the hooks.
	if err := r.prepareFixtures(ctx); err != nil {
		return fmt.Errorf("fixtures: %w", err)
	}
	// 5b. The client, once.
	if err := r.runClient(ctx); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	// 5c. Server evidence.
	if err := r.checkEvidence(ctx); err != nil {
		return fmt.Errorf("evidence: %w", err)
	}
	if err := r.checkRedisCluster(ctx); err != nil {
		return fmt.Errorf("redis cluster: %w", err)
	}
	return nil
}

func (r *runner) build(ctx context.Context) error {
	for _, b := range []struct{ out, pkg string }{
		{"commerce-api", "./edge/cmd/commerce-api"},
		{"order-workflow", "./actors/cmd/order-workflow"},
		{"shoppingmall-client", "./runner/client/cmd/shoppingmall-client"},
	} {
		r.logf("build %s", b.pkg)
		c := exec.CommandContext(ctx, r.goBin, "build", "-o", filepath.Join(r.binDir, b.out), b.pkg)
		c.Stdout, c.Stderr = r.out, r.out
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s: %w", b.pkg, err)
		}
	}
	return nil
}

// prepareSeed builds this run's own data: every id carries the run id, so
// nothing of an earlier run or of the demo catalogue is reused.
func (r *runner) prepareSeed() {
	id := r.runID
	shirt, mug, rare := "sku-"+id+"-shirt", "sku-"+id+"-mug", "sku-"+id+"-rare"
	r.catalog = client.Catalog{
		SuccessCartID:           "cart-" + id + "-ok",
		SuccessAmount:           2*1990 + 890,
		Currency:                "EUR",
		InsufficientStockCartID: "cart-" + id + "-short",
		ApprovingMethodID:       "pm-" + id + "-ok",
		DecliningMethodID:       "pm-" + id + "-declined",
		DeclineReason:           "card declined",
	}
	r.address = "addr-" + id
	r.seed = commerce.Seed{
		Carts: []commerce.Cart{
			{CartID: r.catalog.SuccessCartID, Lines: []*contracts.OrderLine{{Sku: shirt, Quantity: 2}, {Sku: mug, Quantity: 1}},
				Amount: r.catalog.SuccessAmount, Currency: "EUR"},
			{CartID: r.catalog.InsufficientStockCartID, Lines: []*contracts.OrderLine{{Sku: rare, Quantity: 3}},
				Amount: 3 * 2500, Currency: "EUR"},
		},
		// Three of rare are asked for and one is left: insufficient stock,
		// not an unknown SKU.
		Stock: map[string]int64{shirt: 1_000_000, mug: 1_000_000, rare: 1},
		Methods: []commerce.PaymentMethod{
			{MethodID: r.catalog.ApprovingMethodID, Approve: true},
			{MethodID: r.catalog.DecliningMethodID, Approve: false, Reason: r.catalog.DeclineReason},
		},
	}
}

func (r *runner) applySeed(ctx context.Context, url string) error {
	rc, err := redisurl.NewClient(url, redisurl.Options{})
	if err != nil {
		return err
	}
	defer rc.Close()
	cs, err := commerce.NewRedis(commerce.Config{Client: rc})
	if err != nil {
		return err
	}
	if err := cs.ApplySeedRetrying(ctx, r.seed, r.logf); err != nil {
		return err
	}
	r.logf("seeded carts %s (ample stock), %s (stock 1 of 3), methods %s (approves), %s (declines)",
		r.catalog.SuccessCartID, r.catalog.InsufficientStockCartID, r.catalog.ApprovingMethodID, r.catalog.DecliningMethodID)
	return nil
}

// runClient writes the fixtures file, runs the client once and requires
// the client's marker line in its output; its exit code alone proves
// nothing.
func (r *runner) runClient(ctx context.Context) error {
	path := filepath.Join(r.dir, "fixtures.json")
	r.fx.ResultsPath = filepath.Join(r.dir, "client-results.json")
	if err := jsonfile.Write(path, r.fx); err != nil {
		return err
	}
	logPath := filepath.Join(r.dir, "client.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	var out strings.Builder
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(r.binDir, "shoppingmall-client"), "-fixtures", path)
	w := io.MultiWriter(r.out, logf, &out)
	c.Stdout, c.Stderr = w, w
	r.logf("client: %s -fixtures %s", c.Path, path)
	runErr := c.Run()
	completed := false
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.TrimSuffix(l, "\r") == clientMarker {
			completed = true
		}
	}
	if !completed {
		return fmt.Errorf("the client did not print %s (exit: %v); its output is in %s", clientMarker, runErr, logPath)
	}
	if runErr != nil {
		return fmt.Errorf("the client printed %s but exited with %v", clientMarker, runErr)
	}
	r.res, err = client.LoadResults(r.fx.ResultsPath)
	if err != nil {
		return err
	}
	for _, id := range r.res.Orders {
		r.orders[id] = true
	}
	for _, id := range r.res.Concurrent {
		r.orders[id] = true
	}
	r.logf("client printed %s", clientMarker)
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

var errFixture = errors.New("fixture not as prepared")
