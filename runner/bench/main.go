// Command bench is `make bench`: it starts its own local cluster (Redis,
// api-a, api-b, workflow-a, workflow-b, through runner/localcluster), seeds a
// run-specific catalogue, drives a closed-loop HTTP load through the public
// API only (each worker starts an order, then waits for its outcome with
// GET /orders/{id}?waitFor=terminal: no polling), and reports throughput,
// latencies, Redis round trips and commands per order, CPU per order per
// process, and the throughput Redis alone would allow for the same
// per-order command mix (the ceiling).
//
// Results go to the terminal and to <run-dir>/bench-results.json, with a
// plot in <run-dir>/bench-results.png.
//
// It is a measuring tool, not a test: nothing in `make test` runs it. It
// reads what an operator reads: client-side Redis figures from each
// process's Prometheus /metrics, Redis' own from INFO commandstats, and
// each process's CPU time from the OS (procfs), which needs nothing from
// the processes, so a binary of an older commit can be measured too. It
// talks to the cluster over HTTP and uses Redis directly only to seed, to
// read INFO and to run the ceiling load; it must not import gin,
// protoactor, edge, actors/node, the framework package cluster, the
// workflow or the grain packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

type options struct {
	runDir          string
	apiBin          string
	workflowBin     string
	concurrency     int
	duration        time.Duration
	orders          int
	warmup          int
	poll            time.Duration
	pollTimeout     time.Duration
	inventoryPct    int
	paymentPct      int
	ceilingDuration time.Duration
	replaySamples   int
}

func main() {
	var o options
	flag.StringVar(&o.runDir, "run-dir", ".run/bench", "run directory: logs, results")
	flag.StringVar(&o.apiBin, "api-bin", "", "built commerce-api (default: go build into <run-dir>/bin)")
	flag.StringVar(&o.workflowBin, "workflow-bin", "", "built order-workflow (default: go build into <run-dir>/bin)")
	flag.IntVar(&o.concurrency, "concurrency", 64, "closed-loop workers, each with one order in flight")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "measured load time (ignored when -orders > 0)")
	flag.IntVar(&o.orders, "orders", 0, "measured orders; 0 = run for -duration")
	flag.IntVar(&o.warmup, "warmup", 256, "orders run before measuring and left out of every figure")
	flag.DurationVar(&o.poll, "poll", 5*time.Millisecond, "pause before asking again after a failed wait, and the GET /orders/{id} interval against an API without the wait")
	flag.DurationVar(&o.pollTimeout, "poll-timeout", 30*time.Second, "give up on an order not terminal after this long (each wait is at most 30 s)")
	flag.IntVar(&o.inventoryPct, "inventory-fail-pct", 5, "percent of orders whose cart holds a SKU without stock")
	flag.IntVar(&o.paymentPct, "payment-fail-pct", 5, "percent of orders paid with a declining method")
	flag.DurationVar(&o.ceilingDuration, "ceiling-duration", 10*time.Second, "time the Redis-only ceiling load runs")
	flag.IntVar(&o.replaySamples, "replay-samples", 200, "terminal orders whose stream is read back to time a replay read")
	flag.Parse()
	if o.concurrency <= 0 || o.inventoryPct < 0 || o.paymentPct < 0 || o.inventoryPct+o.paymentPct > 100 {
		fmt.Fprintln(os.Stderr, "bench: invalid -concurrency or mix percentages")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("[bench] "+format+"\n", args...)
}

func run(ctx context.Context, o options) (err error) {
	dir, err := filepath.Abs(o.runDir)
	if err != nil {
		return err
	}
	// A previous run's logs would be read as this run's.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if o.apiBin == "" || o.workflowBin == "" {
		if o.apiBin, o.workflowBin, err = build(ctx, filepath.Join(dir, "bin")); err != nil {
			return err
		}
	}
	env := localcluster.ChildEnv(os.Environ())
	logf("starting cluster in %s", dir)
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: dir, APIBin: o.apiBin, WorkflowBin: o.workflowBin, Env: env,
		StopGrace: 15 * time.Second,
		Logf:      func(f string, a ...any) { logf(f, a...) },
	})
	if err != nil {
		return err
	}
	defer func() {
		// The figures are read by now and the cluster is throwaway: a
		// graceful stop would only add a drain that moves every live
		// order (thousands, no idle timeout) and API leaves that wait on
		// those members, so every node is killed and Redis stopped.
		logf("stopping cluster (nodes killed: the run's figures are already read)")
		for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
			if kerr := c.Kill(n); kerr != nil {
				logf("kill %s: %v", n, kerr)
			}
		}
		if serr := c.Stop(); serr != nil {
			logf("stop: %v", serr)
		}
	}()
	ropt, err := redis.ParseURL(c.RedisURL())
	if err != nil {
		return err
	}
	ropt.PoolSize = o.concurrency + 8
	rdb := redis.NewClient(ropt)
	defer rdb.Close()

	runID := fmt.Sprintf("b%x", time.Now().UnixNano()&0xffffffffff)
	ids, err := seed(ctx, rdb, runID)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	apis := []string{c.APIURL(localcluster.APIA), c.APIURL(localcluster.APIB)}
	gen := newLoad(loadConfig{
		APIs: apis, Concurrency: o.concurrency, Poll: o.poll, PollTimeout: o.pollTimeout,
		RunID: runID, IDs: ids, InventoryPct: o.inventoryPct, PaymentPct: o.paymentPct,
	})

	if o.warmup > 0 {
		logf("warm-up: %d orders (not measured)", o.warmup)
		w := gen.run(ctx, "warmup", 0, o.warmup, quiet)
		if w.errors() == len(w.Results) {
			return fmt.Errorf("warm-up: every order failed, first error: %s", w.firstError())
		}
	}

	procs := map[string]proc{}
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		procs[n] = proc{PID: c.PID(n), MetricsURL: c.MetricsURL(n)}
	}
	before, err := snapshot(ctx, rdb, procs, c.RedisPID())
	if err != nil {
		return err
	}
	mode := fmt.Sprintf("for %s", o.duration)
	if o.orders > 0 {
		mode = fmt.Sprintf("%d orders", o.orders)
	}
	logf("measuring: %s, concurrency %d, mix %d%% success / %d%% inventory failure / %d%% payment failure, poll %s",
		mode, o.concurrency, 100-o.inventoryPct-o.paymentPct, o.inventoryPct, o.paymentPct, o.poll)
	res := gen.run(ctx, "load", o.duration, o.orders, reportProgress)
	after, err := snapshot(ctx, rdb, procs, c.RedisPID())
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	rep := buildReport(o, res, before, after)
	rep.RunDir = dir
	rep.RunID = runID
	rep.Replay = replayRead(ctx, rdb, res, o.replaySamples)
	if rep.Orders.Terminal > 0 {
		logf("ceiling: the per-order Redis command mix alone, concurrency %d, for %s", o.concurrency, o.ceilingDuration)
		ceil, err := runCeiling(ctx, rdb, rep.Mix, o.concurrency, o.ceilingDuration)
		if err != nil {
			logf("ceiling failed: %v", err)
			rep.Notes = append(rep.Notes, "ceiling failed: "+err.Error())
		} else {
			rep.Ceiling = ceil
			if ceil.OrdersPerSec > 0 {
				rep.Ceiling.MeasuredOverCeiling = rep.Throughput.OrdersPerSec / ceil.OrdersPerSec
			}
		}
	}
	printReport(os.Stdout, rep)
	jsonPath := filepath.Join(dir, "bench-results.json")
	if err := writeJSON(jsonPath, rep); err != nil {
		return err
	}
	pngPath := filepath.Join(dir, "bench-results.png")
	if err := plotResults(pngPath, res); err != nil {
		logf("plot: %v", err)
	}
	logf("results: %s and %s", jsonPath, pngPath)
	if rep.Orders.Terminal == 0 {
		return errors.New("no order reached a terminal status")
	}
	return nil
}

// build compiles both mains into binDir with the go tool found in PATH.
func build(ctx context.Context, binDir string) (api, wf string, err error) {
	api, wf = filepath.Join(binDir, "commerce-api"), filepath.Join(binDir, "order-workflow")
	for _, b := range []struct{ out, pkg string }{{api, "./edge/cmd/commerce-api"}, {wf, "./actors/cmd/order-workflow"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		logf("go build -o %s %s", b.out, b.pkg)
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("build %s: %w", b.pkg, err)
		}
	}
	return api, wf, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
