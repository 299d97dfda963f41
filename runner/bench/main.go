// Command bench is `make bench`: it starts its own local cluster (Redis,
// api-a, api-b, workflow-a, workflow-b, through runner/localcluster), seeds a
// run-specific catalogue, drives a closed-loop HTTP load through the public
// API only (each worker starts an order, then waits for its outcome with
// GET /orders/{id}?waitFor=terminal: no polling), and reports throughput,
// latencies, Redis round trips and commands per order, CPU per order per
// process, and the throughput Redis alone would allow for the same
// per-order command mix (the ceiling).
//
// After the closed loop, which finds the peak, an open-loop phase offers
// orders at a fixed rate (by default half that peak) on a timeline fixed
// in advance and takes each latency from the order's scheduled start, so
// that a stall counts for every order due during it (coordinated
// omission corrected); StartOrder and start→terminal p50/p99/p99.9 come
// from HdrHistograms (openloop.go).
//
// Last, the overload phase (overload.go) offers 3× that peak for
// -overload, then half of it for -overload-tail, POSTs only, from a fixed
// pool of workers; after -overload-settle it reads every acknowledged
// order's status and reports goodput, stranded orders, shed answers (with
// the APIs' own shed histogram when they expose it), self-fences, restarts
// and each process's highest RSS, with their goals. Then, each on
// clusters of their own, the retention phase (retention.go: the archive)
// and the fan-out phase (fanout.go: one cluster per API count at one
// open-loop rate, whether an order costs more with more APIs).
//
// With -baseline <commit> it first builds that commit's binaries and
// measures them the same way, then the working tree, and prints both
// side by side with ratios (baseline.go, compare.go).
//
// Results go to the terminal and to <run-dir>/bench-results.json, with a
// plot in <run-dir>/bench-results.png; a baseline's in
// <run-dir>/baseline/, the comparison in <run-dir>/bench-compare.json.
//
// It is a measuring tool, not a test: nothing in `make test` runs it. It
// reads what an operator reads: client-side Redis figures from each
// process's Prometheus /metrics (or, for a binary from before /metrics,
// its -stats-file dump), Redis' own from INFO commandstats, and each
// process's CPU time from the OS (procfs), which needs nothing from the
// processes, so a binary of an older commit can be measured too. It
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
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
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
	// The open-loop phase: rate 0 is half the closed-loop throughput.
	openLoop            bool
	openLoopRate        float64
	openLoopDuration    time.Duration
	openLoopMaxInFlight int
	// baseline is a commit whose binaries are measured first.
	baseline string
	// bothOrders, with baseline, adds a reversed pass: the working tree,
	// then the baseline again (compare.go's bothOrders).
	bothOrders bool
	// redisCluster runs the cluster's stores on a 3-master Redis Cluster.
	redisCluster bool
	// peer holds the Restate comparison's flags (peers.go).
	peer peerOptions
	// profileDir, when set, receives each node's CPU profile of the closed loop (profile.go).
	profileDir string
	// idleWindow is how long the cluster is measured at rest before the
	// load (background.go); 0 skips it.
	idleWindow time.Duration
	// idleTimeout is the workflows' -idle-timeout: short, so that the
	// orders measured are also passivated while measured.
	idleTimeout time.Duration
	// The overload phase (overload.go): a burst of 0 skips it.
	overload            time.Duration
	overloadTail        time.Duration
	overloadSettle      time.Duration
	overloadMaxInFlight int
	overloadMaxOrders   int64
	overloadGenerator   string
	// The retention phase (retention.go): 0 orders skips it.
	retention       time.Duration
	retentionOrders int
	// The fan-out phase (fanout.go): a rate of 0 skips it.
	fanoutRate     float64
	fanoutDuration time.Duration
	fanoutAPIs     string
	fanoutLoadAPIs int
}

// openLoopDefaultShare is the open-loop rate as a share of the measured
// closed-loop peak when -open-loop-rate is 0: loaded, yet below the knee,
// where latency still says something about the design rather than the
// queue.
const openLoopDefaultShare = 0.5

func main() {
	if len(os.Args) > 1 && os.Args[1] == wrapperArg {
		os.Exit(execFiltered(os.Args[2:]))
	}
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.runDir, "run-dir", ".run/bench", "run directory: logs, results")
	fs.StringVar(&o.apiBin, "api-bin", "", "built commerce-api (default: go build into <run-dir>/bin)")
	fs.StringVar(&o.workflowBin, "workflow-bin", "", "built order-workflow (default: go build into <run-dir>/bin)")
	fs.IntVar(&o.concurrency, "concurrency", 64, "closed-loop workers, each with one order in flight")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured load time (ignored when -orders > 0)")
	fs.IntVar(&o.orders, "orders", 0, "measured orders; 0 = run for -duration")
	fs.IntVar(&o.warmup, "warmup", 256, "orders run before measuring and left out of every figure")
	fs.DurationVar(&o.poll, "poll", 5*time.Millisecond, "pause before asking again after a failed wait, and the GET /orders/{id} interval against an API without the wait")
	fs.DurationVar(&o.pollTimeout, "poll-timeout", 30*time.Second, "give up on an order not terminal after this long (each wait is at most 30 s)")
	fs.IntVar(&o.inventoryPct, "inventory-fail-pct", 5, "percent of orders whose cart holds a SKU without stock")
	fs.IntVar(&o.paymentPct, "payment-fail-pct", 5, "percent of orders paid with a declining method")
	fs.DurationVar(&o.ceilingDuration, "ceiling-duration", 10*time.Second, "time the Redis-only ceiling load runs")
	fs.IntVar(&o.replaySamples, "replay-samples", 200, "terminal orders whose stream is read back to time a replay read")
	fs.BoolVar(&o.openLoop, "open-loop", true, "run the open-loop phase after the closed-loop one")
	fs.Float64Var(&o.openLoopRate, "open-loop-rate", 0, "open-loop arrival rate, orders/s (0 = 50% of the closed-loop throughput; with -baseline, the baseline's rate for both runs)")
	fs.DurationVar(&o.openLoopDuration, "open-loop-duration", 30*time.Second, "length of the open-loop timeline (30 s at 250 orders/s leaves some 75 orders above the p99, 7 above the p99.9)")
	fs.IntVar(&o.openLoopMaxInFlight, "open-loop-max-inflight", 1024, "most open-loop orders in flight; beyond, orders are sent late (and measured from their due time)")
	fs.StringVar(&o.profileDir, "profile-dir", "", "fetch a CPU profile from every node during the closed loop into this directory (<node>.pprof, <node>.top.txt; a baseline's under DIR/baseline)")
	fs.BoolVar(&o.redisCluster, "redis-cluster", false, "run the stores on a local 3-master Redis Cluster (Redis CPU and commandstats summed over the masters; fails on any CROSSSLOT reply)")
	fs.StringVar(&o.baseline, "baseline", "", "commit (or other revision) whose binaries are built and measured first, for a side-by-side comparison")
	fs.BoolVar(&o.bothOrders, "both-orders", false, "with -baseline: after baseline then working tree, measure the working tree then the baseline again, and report the geometric mean of the two passes' ratios and the position effect (bench-compare-both.json)")
	fs.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "before the load, measure the cluster at rest this long (no order in flight): its Redis commands and each process's CPU per second, counted apart from the orders' figures (0 = skip it; the commands goal then has no data)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 2*time.Second, "the workflows' -idle-timeout: each order's grain passivates (releasing its Location record) this long after its last message, inside the measured phase; the phases after the closed loop start once its grains passivated (0 = never passivate, as the local cluster does)")
	fs.DurationVar(&o.overload, "overload", 60*time.Second, "overload phase, last: an open loop at 3x the closed-loop peak for this long, then -overload-tail at half the peak (0 = skip it; never with -peers)")
	fs.DurationVar(&o.overloadTail, "overload-tail", 30*time.Second, "the overload phase's tail at half the peak, after the burst (0 = none)")
	fs.DurationVar(&o.overloadSettle, "overload-settle", 30*time.Second, "after the overload phase, how long acknowledged orders have to reach a terminal status before each one's status is read")
	fs.IntVar(&o.overloadMaxInFlight, "overload-max-inflight", 1024, "the overload generator's workers: most POSTs in flight; an order due while none is idle is not sent (counted apart)")
	fs.Int64Var(&o.overloadMaxOrders, "overload-max-orders", 500000, "most orders the overload timeline may hold; a longer one is refused")
	fs.IntVar(&o.retentionOrders, "retention-orders", 10000, "the retention phase, last, on a cluster of its own with the archive: a closed loop of this many orders, their keys and bytes in Redis while hot and once archived, and the archiver's throughput (0 = skip it; the working tree only, never with -peers)")
	fs.DurationVar(&o.retention, "retention", 30*time.Second, "the retention phase's -retention: longer than its load, so that the archival runs on an otherwise idle cluster")
	fs.Float64Var(&o.fanoutRate, "fanout-rate", 200, "the fan-out phase, last, on clusters of their own: this open-loop rate, orders/s, offered to one cluster per -fanout-apis count, CPU time and system calls per order compared (0 = skip it; the working tree only, never with -peers)")
	fs.DurationVar(&o.fanoutDuration, "fanout-duration", 20*time.Second, "the fan-out phase's open loop per API count")
	fs.StringVar(&o.fanoutAPIs, "fanout-apis", "2,6", "the fan-out phase's API counts, increasing; the goal compares the last with the first")
	fs.IntVar(&o.fanoutLoadAPIs, "fanout-load-apis", 0, "the fan-out phase's open loop goes through this many of the APIs only, at most the first count (0 = all of them): the cost of the other APIs' mere presence, apart from that of spreading the load")
	fs.StringVar(&o.overloadGenerator, "overload-generator", generatorOurs, "the overload phase's load generator: ours (a hand-written HTTP/1.1 poster that drops an order due while no worker is idle) or vegeta (vegeta's attacker over net/http, which sends such an order late)")
	o.peer.register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	return o, o.peer.validate()
}

func (o options) validate() error {
	switch {
	case o.concurrency <= 0 || o.inventoryPct < 0 || o.paymentPct < 0 || o.inventoryPct+o.paymentPct > 100:
		return errors.New("invalid -concurrency or mix percentages")
	case o.openLoopRate < 0:
		return errors.New("-open-loop-rate must be >= 0")
	case o.openLoop && o.openLoopDuration <= 0:
		return errors.New("-open-loop-duration must be > 0")
	case o.idleTimeout < 0 || o.idleWindow < 0:
		return errors.New("-idle-timeout and -idle-window must be >= 0")
	case o.openLoopMaxInFlight <= 0:
		return errors.New("-open-loop-max-inflight must be > 0")
	case o.overload < 0 || o.overloadTail < 0 || o.overloadSettle < 0:
		return errors.New("-overload, -overload-tail and -overload-settle must be >= 0")
	case o.overload > 0 && (o.overloadMaxInFlight <= 0 || o.overloadMaxOrders <= 0):
		return errors.New("-overload-max-inflight and -overload-max-orders must be > 0")
	case o.overloadGenerator != generatorOurs && o.overloadGenerator != generatorVegeta:
		return fmt.Errorf("-overload-generator %q: want %s or %s", o.overloadGenerator, generatorOurs, generatorVegeta)
	case o.baseline != "" && strings.HasPrefix(o.baseline, "-"):
		return fmt.Errorf("-baseline %q is not a revision", o.baseline)
	case o.bothOrders && o.baseline == "":
		return errors.New("-both-orders needs -baseline")
	case (o.apiBin == "") != (o.workflowBin == ""):
		return errors.New("-api-bin and -workflow-bin go together")
	case o.retentionOrders < 0 || (o.retentionOrders > 0 && o.retention <= 0):
		return errors.New("-retention-orders must be >= 0, and -retention > 0 with it")
	case o.fanoutRate < 0 || (o.fanoutRate > 0 && o.fanoutDuration <= 0):
		return errors.New("-fanout-rate must be >= 0, and -fanout-duration > 0 with it")
	}
	if o.fanoutRate > 0 {
		counts, err := parseAPICounts(o.fanoutAPIs)
		if err != nil {
			return err
		}
		if o.fanoutLoadAPIs < 0 || o.fanoutLoadAPIs > counts[0] {
			return fmt.Errorf("-fanout-load-apis %d: from 0 to the first -fanout-apis count, %d", o.fanoutLoadAPIs, counts[0])
		}
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Printf("[bench] "+format+"\n", args...)
}

// target is one set of binaries to measure, with its own cluster in dir.
type target struct {
	// Label names it in the output: "working tree" or "baseline <commit>".
	Label  string
	Commit string
	Dir    string
	APIBin string
	WfBin  string
	// Env is added to every node's environment.
	Env []string
	// StatsFile, when set, is the nodes' -stats-file pattern: a binary
	// without /metrics that has it dumps its round trips on SIGUSR1.
	StatsFile string
	// Notes go into the target's report.
	Notes []string
	// RedisPersist and RedisAppendFsync are localcluster's: Redis with an
	// append-only file and its fsync policy.
	RedisPersist     bool
	RedisAppendFsync string
	// RedisHA is localcluster's: "sentinel" runs Redis as a primary, a
	// replica and three sentinels, every write waiting for the replica.
	RedisHA string
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
	if o.peer.active() {
		return runPeers(ctx, o, dir)
	}
	var (
		base *report
		bt   target
	)
	if o.baseline != "" {
		if bt, err = buildBaseline(ctx, o.baseline, filepath.Join(dir, "baseline")); err != nil {
			return fmt.Errorf("baseline %s: %w", o.baseline, err)
		}
		bt.RedisPersist, bt.RedisAppendFsync = redisDurability(o.peer.redisDurability)
		logf("=== baseline %s: measured first ===", bt.Commit)
		if base, err = measure(ctx, o, bt, nil); err != nil {
			return fmt.Errorf("baseline %s: %w", o.baseline, err)
		}
	}
	cur := target{Label: "working tree", Dir: dir, APIBin: o.apiBin, WfBin: o.workflowBin}
	cur.RedisPersist, cur.RedisAppendFsync = redisDurability(o.peer.redisDurability)
	if cur.APIBin == "" {
		if cur.APIBin, cur.WfBin, err = build(ctx, filepath.Join(dir, "bin")); err != nil {
			return err
		}
	}
	if base != nil {
		logf("=== working tree ===")
	}
	rep, err := measure(ctx, o, cur, base)
	if err != nil {
		return err
	}
	if base != nil {
		cmp := compare(base, rep)
		printComparison(os.Stdout, cmp)
		path := filepath.Join(dir, "bench-compare.json")
		if err := jsonfile.Write(path, cmp); err != nil {
			return err
		}
		logf("comparison: %s (baseline results in %s)", path, filepath.Join(base.RunDir, "bench-results.json"))
		if o.bothOrders {
			if err := reversedPass(ctx, o, dir, cur, bt, base, cmp); err != nil {
				return err
			}
		}
	}
	if o.retentionOrders > 0 {
		if _, err := measureRetention(ctx, o, cur); err != nil {
			return fmt.Errorf("retention phase: %w", err)
		}
	}
	if o.fanoutRate > 0 {
		if _, err := measureFanout(ctx, o, cur); err != nil {
			return fmt.Errorf("fan-out phase: %w", err)
		}
	}
	return nil
}

// reversedPass measures the working tree, then the baseline, each with a
// cluster of its own under dir/reversed, at the first baseline's open-loop
// rate, and reports both passes' ratios with their geometric mean: a
// position effect (the run made second doing better or worse whatever its
// binaries) cancels out of it.
func reversedPass(ctx context.Context, o options, dir string, cur, bt target, first *report, firstCmp comparison) error {
	o.profileDir = "" // the first pass's profiles stay as they are
	cur.Dir = filepath.Join(dir, "reversed")
	cur.Label += " (reversed pass)"
	bt.Dir = filepath.Join(dir, "reversed", "baseline")
	bt.Label += " (reversed pass)"
	logf("=== reversed pass: working tree first ===")
	rep, err := measure(ctx, o, cur, first)
	if err != nil {
		return err
	}
	logf("=== reversed pass: baseline %s ===", bt.Commit)
	base, err := measure(ctx, o, bt, first)
	if err != nil {
		return fmt.Errorf("baseline %s: %w", o.baseline, err)
	}
	both := bothOrders(firstCmp, compare(base, rep))
	printBothOrders(os.Stdout, both)
	path := filepath.Join(dir, "bench-compare-both.json")
	if err := jsonfile.Write(path, both); err != nil {
		return err
	}
	logf("both orders: %s", path)
	return nil
}

// measure starts a cluster of t's binaries in t.Dir and runs every phase
// against it: warm-up, the closed loop (the figures and the ceiling mix),
// the open loop, the ceiling, the overload phase. base, when set, is the baseline's report:
// its open-loop rate is reused so both runs are offered the same load.
func measure(ctx context.Context, o options, t target, base *report) (rep *report, err error) {
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return nil, err
	}
	logf("starting cluster in %s", t.Dir)
	m, err := startMeasured(ctx, o, t, t.Dir, "b", nil)
	if err != nil {
		return nil, err
	}
	defer m.close()
	c, rdb, gen, runID, apis := m.c, m.rdb, m.gen, m.runID, m.apis

	if o.warmup > 0 {
		logf("warm-up: %d orders (not measured)", o.warmup)
		w := gen.run(ctx, "warmup", 0, o.warmup, quiet)
		if w.errors() == len(w.Results) {
			return nil, fmt.Errorf("warm-up: every order failed, first error: %s", w.firstError())
		}
	}

	procs := map[string]proc{}
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		procs[n] = proc{PID: c.PID(n), MetricsURL: c.MetricsURL(n), StatsPath: statsPath(t.StatsFile, n)}
	}
	var (
		bg     *background
		before snap
	)
	if o.idleWindow > 0 {
		// The cluster at rest: no order in flight, the warm-up's grains
		// passivated, for the length of the window.
		if err := settlePassivations(ctx, workflowMetrics(c), o.idleTimeout, passivationSettle, "idle window"); err != nil {
			return nil, err
		}
		idle, err := snapshot(ctx, rdb, procs, c.RedisPIDs()...)
		if err != nil {
			return nil, err
		}
		logf("idle window: %s with no order in flight", o.idleWindow)
		select {
		case <-time.After(o.idleWindow):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// The window's end is the load's start: one snapshot is both.
		if before, err = snapshot(ctx, rdb, procs, c.RedisPIDs()...); err != nil {
			return nil, err
		}
		bg = measureBackground(idle, before)
	} else if before, err = snapshot(ctx, rdb, procs, c.RedisPIDs()...); err != nil {
		return nil, err
	}
	mode := fmt.Sprintf("for %s", o.duration)
	if o.orders > 0 {
		mode = fmt.Sprintf("%d orders", o.orders)
	}
	logf("measuring: %s, concurrency %d, mix %d%% success / %d%% inventory failure / %d%% payment failure, poll %s",
		mode, o.concurrency, 100-o.inventoryPct-o.paymentPct, o.inventoryPct, o.paymentPct, o.poll)
	profileDir := o.profileDir
	if t.Commit != "" && profileDir != "" {
		profileDir = filepath.Join(profileDir, "baseline")
	}
	prof := startProfiles(ctx, profileDir, c, o.duration)
	defer prof.writeTops(ctx)
	res := gen.run(ctx, "load", o.duration, o.orders, reportProgress)
	prof.wait()
	after, err := snapshot(ctx, rdb, procs, c.RedisPIDs()...)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	rep = buildReport(o, res, before, after)
	rep.setBackground(bg)
	rep.RunDir = t.Dir
	rep.RunID = runID
	rep.Target.Label, rep.Target.Commit = t.Label, t.Commit
	rep.Target.APIBin, rep.Target.WorkflowBin = t.APIBin, t.WfBin
	rep.GetMode = gen.waitMode()
	rep.Notes = append(rep.Notes, t.Notes...)
	if t.Commit != "" {
		var logs []string
		for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
			logs = append(logs, c.LogPath(n))
		}
		rep.Notes = append(rep.Notes, droppedFlags(logs)...)
	}
	if rep.GetMode == "poll" {
		rep.Notes = append(rep.Notes, "the APIs have no GET ?waitFor=terminal: outcomes were polled every "+o.poll.String())
	}
	rep.Replay = replayRead(ctx, rdb, res, o.replaySamples)
	rep.RedisPerOrder = terminalFootprint(ctx, rdb, res)
	if o.idleTimeout > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("grains passivate %s after their last message (-idle-timeout): the figures include the passivation of about as many orders as were measured", o.idleTimeout))
	}

	if o.openLoop {
		if err := settlePassivations(ctx, workflowMetrics(c), o.idleTimeout, passivationSettle, "open loop"); err != nil {
			return nil, err
		}
		rate, source := openLoopRate(o, rep, base)
		if rate <= 0 {
			rep.Notes = append(rep.Notes, "open loop skipped: "+source)
		} else {
			cfg := openLoopConfig{Rate: rate, Duration: o.openLoopDuration, MaxInFlight: o.openLoopMaxInFlight, SendGrace: o.pollTimeout}
			logf("open loop: %.1f orders/s (%s) for %s, at most %d in flight", rate, source, o.openLoopDuration, o.openLoopMaxInFlight)
			latErr := startRedisLatency(ctx, rdb)
			stopPSI := make(chan struct{})
			psi := samplePSI(stopPSI)
			rq := startRunQueue(runQueuePIDs(procs, c.RedisPIDs()))
			phaseStart := time.Now()
			ol := gen.openLoop(ctx, cfg, reportProgress)
			runQueue := rq.done()
			close(stopPSI)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rep.OpenLoop = buildOpenLoop(cfg, source, rep.Throughput.OrdersPerSec, ol)
			tail := buildTail(ol.Results, phaseStart, cfg.Duration, <-psi)
			if latErr == nil {
				tail.Redis, latErr = readRedisLatency(ctx, rdb, phaseStart)
			}
			if latErr != nil {
				tail.RedisErr = latErr.Error()
			}
			tail.Stages = readStages(ctx, rdb, ol.Results, phaseStart)
			tail.RunQueue = runQueue
			rep.OpenLoop.Tail = tail
			if err := writeOrdersCSV(filepath.Join(t.Dir, "openloop-orders.csv"), ol.Results); err != nil {
				logf("open loop: orders CSV: %v", err)
			}
		}
	}

	if rep.Orders.Terminal > 0 {
		if err := settlePassivations(ctx, workflowMetrics(c), o.idleTimeout, passivationSettle, "ceiling"); err != nil {
			return nil, err
		}
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
	if o.overload > 0 && !o.peer.active() && rep.Throughput.OrdersPerSec > 0 {
		// Last: it may leave members fenced or restarted, which no
		// figure above may see.
		if err := settlePassivations(ctx, workflowMetrics(c), o.idleTimeout, passivationSettle, "overload phase"); err != nil {
			return nil, err
		}
		cfg := overloadConfig{Burst: o.overload, Tail: o.overloadTail, Settle: o.overloadSettle,
			Workers: o.overloadMaxInFlight, MaxOrders: o.overloadMaxOrders, Generator: o.overloadGenerator}
		ov, err := gen.runOverloadPhase(ctx, cfg, rep.Throughput.OrdersPerSec, clusterForOverload(c, apis))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			logf("overload phase skipped: %v", err)
			rep.Notes = append(rep.Notes, "overload phase skipped: "+err.Error())
		}
		rep.Overload = ov
	}
	notes, err := redisClusterNotes(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("redis cluster: %w", err)
	}
	rep.Notes = append(rep.Notes, notes...)
	printReport(os.Stdout, rep)
	jsonPath := filepath.Join(t.Dir, "bench-results.json")
	if err := jsonfile.Write(jsonPath, rep); err != nil {
		return nil, err
	}
	pngPath := filepath.Join(t.Dir, "bench-results.png")
	if err := plotResults(pngPath, res); err != nil {
		logf("plot: %v", err)
	}
	logf("results: %s and %s", jsonPath, pngPath)
	if rep.Orders.Terminal == 0 {
		return nil, errors.New("no order reached a terminal status")
	}
	return rep, nil
}

// openLoopRate picks the phase's rate: -open-loop-rate if set; else the
// baseline's rate when there is one (the same offered load for both
// runs, so their latencies compare); else half this run's closed-loop
// throughput. 0 means the phase cannot run, and source says why.
func openLoopRate(o options, rep, base *report) (rate float64, source string) {
	switch {
	case o.openLoopRate > 0:
		return o.openLoopRate, "-open-loop-rate"
	case base != nil && base.OpenLoop != nil && base.OpenLoop.RatePerSec > 0:
		return base.OpenLoop.RatePerSec, fmt.Sprintf("the baseline's rate, %.0f%% of this run's closed-loop %.1f orders/s",
			100*base.OpenLoop.RatePerSec/max(rep.Throughput.OrdersPerSec, 1e-9), rep.Throughput.OrdersPerSec)
	case rep.Throughput.OrdersPerSec > 0:
		return openLoopDefaultShare * rep.Throughput.OrdersPerSec,
			fmt.Sprintf("%.0f%% of the closed-loop %.1f orders/s", 100*openLoopDefaultShare, rep.Throughput.OrdersPerSec)
	}
	return 0, "no closed-loop throughput to take a rate from"
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

// passivationSettle bounds the wait for the last grains' passivations
// past the idle timeout (each is a receive timeout, then one Location
// write).
const passivationSettle = 10 * time.Second

// settlePassivations lets the grains of the phase that just ended
// passivate before the next phase starts: their releases would otherwise
// land in the open loop's first seconds, a burst of work the arrival
// rate does not account for, or beside the Redis-alone ceiling. It waits
// until the grains-hosted gauges at metricsURLs (the workflows') read 0,
// for at most idle+bound; a binary without the gauge gets idle and a
// second.
func settlePassivations(ctx context.Context, metricsURLs []string, idle, bound time.Duration, next string) error {
	if idle <= 0 {
		return nil
	}
	logf("waiting for the last orders' grains to passivate before the %s", next)
	start := time.Now()
	deadline := start.Add(idle + bound)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		hosted, known := 0.0, true
		for _, u := range metricsURLs {
			m, err := scrapeMetrics(ctx, u)
			if err != nil || m[metricGrainsHosted] == nil {
				known = false
				break
			}
			hosted += m.sum(metricGrainsHosted, nil)
		}
		switch {
		case known && hosted == 0:
			logf("grains passivated after %s", time.Since(start).Round(10*time.Millisecond))
			return nil
		case !known && time.Since(start) > idle+time.Second:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%.0f grains still hosted %s after the %s began to wait (idle timeout %s)", hosted, time.Since(start).Round(time.Second), next, idle)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// workflowMetrics lists the workflow nodes' metrics base URLs.
func workflowMetrics(c *localcluster.Cluster) []string {
	var urls []string
	for _, n := range c.Workflows() {
		urls = append(urls, c.MetricsURL(n))
	}
	return urls
}

// killCluster ends a measured cluster. The figures are read by now and
// the cluster is throwaway: a graceful stop would only add a drain that
// moves every live order (thousands without an idle timeout) and API
// leaves that wait on those members, so every node is killed and Redis
// (and PostgreSQL) stopped.
func killCluster(c *localcluster.Cluster) {
	logf("stopping cluster (nodes killed: the run's figures are already read)")
	for _, n := range append(c.APIs(), c.Workflows()...) {
		if kerr := c.Kill(n); kerr != nil {
			logf("kill %s: %v", n, kerr)
		}
	}
	if serr := c.Stop(); serr != nil {
		logf("stop: %v", serr)
	}
}

// measured is a cluster of a target's binaries with what a phase drives
// it with: a Redis client, a run-specific catalogue seeded first, and a
// load spread over every API.
type measured struct {
	c     *localcluster.Cluster
	rdb   redis.UniversalClient
	gen   *load
	runID string
	apis  []string
}

// startMeasured starts a cluster of t's binaries in dir, with edit's
// changes to its Config (nil: none), and seeds it; the catalogue's run id
// starts with tag. close ends it.
func startMeasured(ctx context.Context, o options, t target, dir, tag string, edit func(*localcluster.Config)) (*measured, error) {
	cfg := localcluster.Config{
		RunDir: dir, APIBin: t.APIBin, WorkflowBin: t.WfBin, Env: append(localcluster.ChildEnv(os.Environ()), t.Env...),
		RedisPersist: t.RedisPersist, RedisAppendFsync: t.RedisAppendFsync, RedisHA: t.RedisHA,
		RedisCluster:        o.redisCluster,
		WorkflowIdleTimeout: o.idleTimeout,
		StopGrace:           15 * time.Second,
		Logf:                func(f string, a ...any) { logf(f, a...) },
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m := &measured{c: c, runID: fmt.Sprintf("%s%x", tag, time.Now().UnixNano()&0xffffffffff)}
	if m.rdb, err = redisurl.NewClient(c.RedisURL(), redisurl.Options{PoolSize: o.concurrency + 8}); err != nil {
		killCluster(c)
		return nil, err
	}
	ids, err := seed(ctx, m.rdb, m.runID)
	if err != nil {
		m.close()
		return nil, fmt.Errorf("seed: %w", err)
	}
	for _, n := range c.APIs() {
		m.apis = append(m.apis, c.APIURL(n))
	}
	m.gen = newLoad(loadConfig{
		APIs: m.apis, Concurrency: o.concurrency, Poll: o.poll, PollTimeout: o.pollTimeout,
		RunID: m.runID, IDs: ids, InventoryPct: o.inventoryPct, PaymentPct: o.paymentPct,
	})
	return m, nil
}

func (m *measured) close() {
	_ = m.rdb.Close()
	killCluster(m.c)
}
