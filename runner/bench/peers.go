package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// `make bench-peers` (-peers): the same order workflow on ShoppingMall and
// on Restate, back to back on this machine, with the same mix, load
// generator, phases and latency method: ours with Redis' AOF at
// appendfsync everysec, ours again at appendfsync always (Restate's log
// fsyncs its writes: like with like), ours on a primary and a replica
// with every write waiting for the replica (WAIT 1: durability by
// replication), then Restate (peers_restate.go).
// The table, the ratios and the goals go to the terminal and to
// <run-dir>/bench-peers.json; every target's own report to its directory.

// Targets of -target.
const (
	targetOurs    = "ours"
	targetRestate = "restate"
)

// Redis durability modes of -redis-durability.
const (
	durabilityNone     = "none"
	durabilityEverysec = "everysec"
	durabilityAlways   = "always"
)

// peerOptions are the flags of the peer comparison.
type peerOptions struct {
	// peers runs ours (everysec), ours (always) and Restate back to back.
	peers bool
	// target is what a run without -peers measures: ours or restate.
	target string
	// smoke runs a handful of orders through Restate and checks them.
	smoke          bool
	smokeOrders    int
	restateServer  string
	restatePeerDir string
	// redisDurability is how ours' Redis persists in a plain run.
	redisDurability string
	// goalRatio is the throughput ratio over Restate the issue asks for.
	goalRatio float64
}

func (p *peerOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.peers, "peers", false, "compare with Restate: ours (AOF everysec), ours (AOF always), then Restate, back to back; bench-peers.json")
	fs.StringVar(&p.target, "target", targetOurs, "what to measure without -peers: ours, or restate (restate-server + runner/peers/restate)")
	fs.BoolVar(&p.smoke, "smoke", false, "run -smoke-orders orders of the mix through Restate, check each status and that every effect happened once, and exit")
	fs.IntVar(&p.smokeOrders, "smoke-orders", 20, "orders of -smoke")
	fs.StringVar(&p.restateServer, "restate-server", "", "restate-server executable (default: restate-server in PATH); `make bench-peers` installs it from npm")
	fs.StringVar(&p.restatePeerDir, "restate-peer-dir", "runner/peers/restate", "the Restate peer's Go module, built with the go tool")
	fs.StringVar(&p.redisDurability, "redis-durability", durabilityNone, "ours' Redis persistence without -peers: none, everysec (AOF, appendfsync everysec) or always (AOF, appendfsync always)")
	fs.Float64Var(&p.goalRatio, "peers-goal-ratio", 3, "goal: ours' throughput over Restate's")
}

func (p peerOptions) validate() error {
	switch {
	case p.target != targetOurs && p.target != targetRestate:
		return fmt.Errorf("-target %q is not %s or %s", p.target, targetOurs, targetRestate)
	case p.redisDurability != durabilityNone && p.redisDurability != durabilityEverysec && p.redisDurability != durabilityAlways:
		return fmt.Errorf("-redis-durability %q is not none, everysec or always", p.redisDurability)
	case p.smoke && p.smokeOrders <= 0:
		return errors.New("-smoke-orders must be > 0")
	}
	return nil
}

// active says whether the run is the peers' (runPeers) rather than a
// plain `make bench`.
func (p peerOptions) active() bool { return p.peers || p.smoke || p.target == targetRestate }

// redisDurability is a target's Redis persistence for localcluster.
func redisDurability(mode string) (persist bool, appendFsync string) {
	switch mode {
	case durabilityEverysec:
		return true, "everysec"
	case durabilityAlways:
		return true, "always"
	}
	return false, ""
}

// Durability of each row, stated in the table and the JSON.
const (
	durabilityOursEverysec = "Redis AOF, appendfsync everysec (Redis' default): a step is written to the AOF before it is answered " +
		"unless a background fsync is still running, when Redis postpones the write (up to 2 s) and answers anyway; " +
		"fsynced about once a second; a killed redis-server or a machine crash can lose up to ~2 s of acknowledged steps"
	durabilityOursAlways = "Redis AOF, appendfsync always: the AOF is fsynced before Redis answers a write, " +
		"so no acknowledged step is lost even to a machine crash"
	durabilityOursReplicated = "Redis AOF, appendfsync everysec, on a primary and one replica behind three sentinels " +
		"(make cluster-up REDIS_HA=sentinel): every write is acknowledged only once the replica holds it (WAIT 1 on the " +
		"write's own connection), so an acknowledged step survives a crash of the primary's machine and a failover to the " +
		"replica; losing both at once can lose what the replica had not fsynced (~1 s)"
	durabilityRestate = "restate-server " + restateVersion + " at its defaults (restate-server --dump-config), one node: every journal " +
		"entry (the invocation, each restate.Run result, each state change) is appended to Bifrost's replicated loglet " +
		"(default-provider replicated, default-replication 1) on the node's own log-server, whose RocksDB WAL fsync is on " +
		"(log-server rocksdb-disable-wal-fsync = false); partition state (RocksDB) is rebuilt from that log. " +
		"The peer's inventory and payment modules keep their records in Redis with AOF everysec, like ours"
)

// peerRow is one system's figures in the comparison.
type peerRow struct {
	Label      string `json:"label"`
	System     string `json:"system"`
	Durability string `json:"durability"`
	RunDir     string `json:"runDir"`
	// Closed loop: the peak.
	Orders struct {
		Terminal   int    `json:"terminal"`
		Confirmed  int    `json:"confirmed"`
		Failed     int    `json:"failed"`
		Errors     int    `json:"errors"`
		Unexpected int    `json:"unexpected"`
		FirstError string `json:"firstError,omitempty"`
	} `json:"orders"`
	ThroughputPerSec      float64 `json:"throughputPerSec"`
	ClosedStartOrderMs    pct     `json:"closedLoopStartOrderMs"`
	ClosedStartToTermMs   pct     `json:"closedLoopStartToTerminalMs"`
	OpenLoopRatePerSec    float64 `json:"openLoopRatePerSec"`
	OpenLoopStartOrderMs  *hdrPct `json:"openLoopStartOrderMs,omitempty"`
	OpenLoopStartToTermMs *hdrPct `json:"openLoopStartToTerminalMs,omitempty"`
	OpenLoopErrors        int     `json:"openLoopErrors"`
	OpenLoopUnexpected    int     `json:"openLoopUnexpected"`
	// CPUMsPerOrder sums every process of the system, Redis included,
	// the load generator excluded; CPUByProcess splits it.
	CPUMsPerOrder float64            `json:"cpuMsPerOrder"`
	CPUByProcess  map[string]float64 `json:"cpuMsPerOrderByProcess"`
	// ForkCPUByProcess is the part of CPUByProcess spent by reaped
	// children (Redis' AOF rewrites and snapshots).
	ForkCPUByProcess map[string]float64 `json:"forkCpuMsPerOrderByProcess,omitempty"`
	// StealPct and OpenLoopStealPct are the machine's steal during each
	// phase, in percent: rows measured under different steal compare
	// less well than their ratio says.
	StealPct         *float64 `json:"stealPct,omitempty"`
	OpenLoopStealPct *float64 `json:"openLoopStealPct,omitempty"`
	// Effects is the check that each order's module effects happened
	// once (Restate rows; ours proves it in its own tests).
	Effects *effectsCheck `json:"effects,omitempty"`
}

func rowFromReport(label, system, durability string, r *report) peerRow {
	row := peerRow{Label: label, System: system, Durability: durability, RunDir: r.RunDir}
	row.Orders.Terminal, row.Orders.Confirmed, row.Orders.Failed = r.Orders.Terminal, r.Orders.Confirmed, r.Orders.Failed
	row.Orders.Errors, row.Orders.Unexpected, row.Orders.FirstError = r.Orders.Errors, r.Orders.Unexpected, r.Orders.FirstError
	row.ThroughputPerSec = r.Throughput.OrdersPerSec
	row.ClosedStartOrderMs, row.ClosedStartToTermMs = r.StartOrderMs, r.StartToTerminalMs
	row.StealPct, row.OpenLoopStealPct = closedLoopSteal(r), openLoopSteal(r)
	if ol := r.OpenLoop; ol != nil {
		row.OpenLoopRatePerSec = ol.RatePerSec
		so, e2e := ol.StartOrderMs, ol.StartToTerminalMs
		row.OpenLoopStartOrderMs, row.OpenLoopStartToTermMs = &so, &e2e
		row.OpenLoopErrors, row.OpenLoopUnexpected = ol.Counts.Errors, ol.Counts.Unexpected
		if row.Orders.FirstError == "" {
			row.Orders.FirstError = ol.Counts.FirstError
		}
	}
	row.CPUByProcess = map[string]float64{}
	for n, v := range r.CPUPerOrderMs {
		if n == runnerCPU {
			continue
		}
		row.CPUByProcess[n] = v
		row.CPUMsPerOrder += v
	}
	row.ForkCPUByProcess = r.ForkCPUPerOrderMs
	return row
}

// ok says whether every order of the row ended as its path must.
func (r peerRow) ok() bool {
	return r.Orders.Terminal > 0 && r.Orders.Errors == 0 && r.Orders.Unexpected == 0 &&
		r.OpenLoopErrors == 0 && r.OpenLoopUnexpected == 0 && (r.Effects == nil || r.Effects.OK())
}

// peerGoal is one goal of the issue, its figure and the verdict.
type peerGoal struct {
	Goal   string  `json:"goal"`
	Figure float64 `json:"figure"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	// Verdict is "met", "not met" or "no data".
	Verdict string `json:"verdict"`
}

// peerRatio is one of ours over Restate's, per figure.
type peerRatio struct {
	Ours                   string   `json:"ours"`
	Throughput             float64  `json:"throughputOursOverRestate"`
	CPUPerOrder            float64  `json:"cpuPerOrderOursOverRestate"`
	OpenStartOrderP99      *float64 `json:"openLoopStartOrderP99OursOverRestate,omitempty"`
	OpenStartToTerminalP99 *float64 `json:"openLoopStartToTerminalP99OursOverRestate,omitempty"`
}

// peersResult is bench-peers.json.
type peersResult struct {
	Date    string `json:"date"`
	Machine struct {
		CPUs   int    `json:"cpus"`
		GOOS   string `json:"goos"`
		GOARCH string `json:"goarch"`
		Kernel string `json:"kernel,omitempty"`
		Model  string `json:"cpuModel,omitempty"`
	} `json:"machine"`
	Config struct {
		Concurrency     int     `json:"concurrency"`
		DurationSec     float64 `json:"durationSec"`
		WarmupOrders    int     `json:"warmupOrders"`
		MixSuccessPct   int     `json:"mixSuccessPct"`
		MixInventoryPct int     `json:"mixInventoryFailurePct"`
		MixPaymentPct   int     `json:"mixPaymentFailurePct"`
		OpenLoopSec     float64 `json:"openLoopDurationSec"`
		OpenLoopShare   float64 `json:"openLoopShareOfOwnPeak"`
	} `json:"config"`
	Method string      `json:"method"`
	Rows   []peerRow   `json:"rows"`
	Ratios []peerRatio `json:"ratios"`
	Goals  []peerGoal  `json:"goals"`
	Notes  []string    `json:"notes,omitempty"`
}

const peersMethod = "Each system runs in turn on this machine with the same seed, mix and load generator (runner/bench): a warm-up, " +
	"a closed loop of -concurrency workers for the peak (each order started, then its outcome awaited without polling: our " +
	"GET ?waitFor=terminal, Restate's attach), then an open loop at half of that system's own peak on a fixed timeline, " +
	"latencies from each order's due time in HdrHistograms (coordinated omission corrected). StartOrder is ours' POST /orders " +
	"(201 once the start is recorded) and Restate's /send (202 once the invocation is in its log). CPU per order is user+system " +
	"time from procfs over the closed loop, summed over every process of the system (ours: the APIs, the workflows and Redis; " +
	"Restate: restate-server, the Go service and the modules' Redis), over orders that reached a terminal status."

// runPeers is the -peers, -target restate and -smoke run.
func runPeers(ctx context.Context, o options, dir string) error {
	if o.peer.smoke {
		return restateSmoke(ctx, o, filepath.Join(dir, "smoke"))
	}
	var rows []peerRow
	if o.peer.peers {
		api, wf, err := build(ctx, filepath.Join(dir, "bin"))
		if err != nil {
			return err
		}
		for _, v := range []struct{ sub, label, mode, durability, ha string }{
			{"ours-everysec", "ShoppingMall (AOF everysec)", durabilityEverysec, durabilityOursEverysec, ""},
			{"ours-always", "ShoppingMall (AOF always)", durabilityAlways, durabilityOursAlways, ""},
			{"ours-replicated", "ShoppingMall (AOF everysec, 1 replica, WAIT 1)", durabilityEverysec, durabilityOursReplicated, localcluster.RedisHASentinel},
		} {
			logf("=== %s ===", v.label)
			persist, fsync := redisDurability(v.mode)
			t := target{Label: v.label, Dir: filepath.Join(dir, v.sub), APIBin: api, WfBin: wf,
				RedisPersist: persist, RedisAppendFsync: fsync, RedisHA: v.ha}
			rep, err := measure(ctx, o, t, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", v.label, err)
			}
			rows = append(rows, rowFromReport(v.label, "shoppingmall", v.durability, rep))
		}
	}
	label := "Restate " + restateVersion
	logf("=== %s ===", label)
	rep, eff, err := measureRestate(ctx, o, filepath.Join(dir, "restate"))
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	row := rowFromReport(label, "restate", durabilityRestate, rep)
	row.Effects = eff
	rows = append(rows, row)

	res := buildPeers(o, rows)
	printPeers(os.Stdout, res)
	path := filepath.Join(dir, "bench-peers.json")
	if err := jsonfile.Write(path, res); err != nil {
		return err
	}
	logf("peer comparison: %s", path)
	var bad []string
	for _, r := range res.Rows {
		if !r.ok() {
			bad = append(bad, fmt.Sprintf("%s: %d closed-loop errors, %d unexpected; %d open-loop errors, %d unexpected; first error %q%s",
				r.Label, r.Orders.Errors, r.Orders.Unexpected, r.OpenLoopErrors, r.OpenLoopUnexpected, r.Orders.FirstError, r.Effects.summary()))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("not every order reached the terminal status its path must end in:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// buildPeers adds the ratios (each row of ours over Restate's) and the
// goals to the rows.
func buildPeers(o options, rows []peerRow) peersResult {
	var res peersResult
	res.Date = time.Now().UTC().Format(time.RFC3339)
	res.Machine.CPUs, res.Machine.GOOS, res.Machine.GOARCH = runtime.NumCPU(), runtime.GOOS, runtime.GOARCH
	res.Machine.Kernel = firstLine("/proc/sys/kernel/osrelease")
	res.Machine.Model = cpuModel()
	res.Config.Concurrency, res.Config.DurationSec, res.Config.WarmupOrders = o.concurrency, o.duration.Seconds(), o.warmup
	res.Config.MixSuccessPct, res.Config.MixInventoryPct, res.Config.MixPaymentPct = 100-o.inventoryPct-o.paymentPct, o.inventoryPct, o.paymentPct
	res.Config.OpenLoopSec, res.Config.OpenLoopShare = o.openLoopDuration.Seconds(), openLoopDefaultShare
	if o.openLoopRate > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("-open-loop-rate %.1f: every system's open loop ran at that rate, not at half its own peak", o.openLoopRate))
	}
	res.Method = peersMethod
	res.Rows = rows
	var peer *peerRow
	for i := range rows {
		if rows[i].System == "restate" {
			peer = &rows[i]
		}
	}
	if peer == nil {
		return res
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	p99 := func(h *hdrPct) (float64, bool) {
		if h == nil || h.N == 0 {
			return 0, false
		}
		return h.P99, true
	}
	for _, r := range rows {
		if r.System == "restate" {
			continue
		}
		ratio := peerRatio{Ours: r.Label, Throughput: div(r.ThroughputPerSec, peer.ThroughputPerSec), CPUPerOrder: div(r.CPUMsPerOrder, peer.CPUMsPerOrder)}
		goals := []peerGoal{{
			Goal:   fmt.Sprintf("%s: closed-loop throughput >= %.0fx Restate's", r.Label, o.peer.goalRatio),
			Figure: ratio.Throughput, Unit: "x", Met: peer.ThroughputPerSec > 0 && ratio.Throughput >= o.peer.goalRatio,
		}}
		for _, m := range []struct {
			name      string
			ours, rst *hdrPct
			dst       **float64
		}{
			{"open-loop StartOrder p99", r.OpenLoopStartOrderMs, peer.OpenLoopStartOrderMs, &ratio.OpenStartOrderP99},
			{"open-loop start->terminal p99", r.OpenLoopStartToTermMs, peer.OpenLoopStartToTermMs, &ratio.OpenStartToTerminalP99},
		} {
			g := peerGoal{Goal: fmt.Sprintf("%s: %s <= Restate's", r.Label, m.name), Unit: "ours/Restate"}
			a, okA := p99(m.ours)
			b, okB := p99(m.rst)
			if okA && okB && b > 0 {
				v := a / b
				*m.dst = &v
				g.Figure, g.Met = v, a <= b
			} else {
				g.Verdict = "no data"
			}
			goals = append(goals, g)
		}
		for i := range goals {
			if goals[i].Verdict == "" {
				goals[i].Verdict = map[bool]string{true: "met", false: "not met"}[goals[i].Met]
			}
		}
		res.Ratios = append(res.Ratios, ratio)
		res.Goals = append(res.Goals, goals...)
	}
	return res
}

func printPeers(w io.Writer, res peersResult) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "=== Peers: the same order workflow, back to back on this machine (%d cpus, %s) ===\n", res.Machine.CPUs, res.Date)
	fmt.Fprintf(w, "mix %d%% success / %d%% inventory failure / %d%% payment failure; closed loop %d workers for %.0f s; open loop at %.0f%% of each system's own peak for %.0f s\n",
		res.Config.MixSuccessPct, res.Config.MixInventoryPct, res.Config.MixPaymentPct, res.Config.Concurrency, res.Config.DurationSec,
		100*res.Config.OpenLoopShare, res.Config.OpenLoopSec)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "system\tthroughput/s\topen-loop rate/s\tStartOrder p99 ms\tstart->terminal p99 ms\tCPU ms/order\tsteal % (closed / open)\torders ok")
	for _, r := range res.Rows {
		so, e2e := "n/a", "n/a"
		if r.OpenLoopStartOrderMs != nil {
			so = fmt.Sprintf("%.2f", r.OpenLoopStartOrderMs.P99)
		}
		if r.OpenLoopStartToTermMs != nil {
			e2e = fmt.Sprintf("%.2f", r.OpenLoopStartToTermMs.P99)
		}
		okText := "yes"
		if !r.ok() {
			okText = "NO"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%s\t%s\t%.3f\t%s / %s\t%s (%d terminal)\n", r.Label, r.ThroughputPerSec, r.OpenLoopRatePerSec, so, e2e, r.CPUMsPerOrder,
			pctOrNA(r.StealPct), pctOrNA(r.OpenLoopStealPct), okText, r.Orders.Terminal)
	}
	tw.Flush()
	for _, r := range res.Rows {
		var parts []string
		for _, n := range sortedKeys(r.CPUByProcess) {
			parts = append(parts, fmt.Sprintf("%s %.3f", n, r.CPUByProcess[n]))
		}
		fmt.Fprintf(w, "CPU ms/order, %s: %s\n", r.Label, strings.Join(parts, ", "))
		if len(r.ForkCPUByProcess) > 0 {
			parts = parts[:0]
			for _, n := range sortedKeys(r.ForkCPUByProcess) {
				parts = append(parts, fmt.Sprintf("%s %.3f", n, r.ForkCPUByProcess[n]))
			}
			fmt.Fprintf(w, "  of it, forked children (AOF rewrites, snapshots): %s\n", strings.Join(parts, ", "))
		}
	}
	for _, q := range res.Ratios {
		line := fmt.Sprintf("ratio %s / Restate: throughput %.2fx, CPU per order %.2fx", q.Ours, q.Throughput, q.CPUPerOrder)
		if q.OpenStartOrderP99 != nil {
			line += fmt.Sprintf(", StartOrder p99 %.2fx", *q.OpenStartOrderP99)
		}
		if q.OpenStartToTerminalP99 != nil {
			line += fmt.Sprintf(", start->terminal p99 %.2fx", *q.OpenStartToTerminalP99)
		}
		fmt.Fprintln(w, line)
	}
	for _, g := range res.Goals {
		fmt.Fprintf(w, "goal: %s: %.2f %s [%s]\n", g.Goal, g.Figure, g.Unit, g.Verdict)
	}
	for _, r := range res.Rows {
		fmt.Fprintf(w, "durability, %s: %s\n", r.Label, r.Durability)
		if r.Effects != nil {
			fmt.Fprintf(w, "effects, %s: %s\n", r.Label, r.Effects.text())
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	fmt.Fprintln(w)
}

// measureRestate runs the phases of measure against the Restate peer.
func measureRestate(ctx context.Context, o options, dir string) (*report, *effectsCheck, error) {
	st, gen, rdb, runID, err := startRestateLoad(ctx, o, dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		logf("restate peer: stopping (by PID)")
		rdb.Close()
		st.stop()
	}()
	var all []orderResult
	if o.warmup > 0 {
		logf("warm-up: %d orders (not measured)", o.warmup)
		w := gen.run(ctx, "warmup", 0, o.warmup, quiet)
		if w.errors() == len(w.Results) {
			return nil, nil, fmt.Errorf("warm-up: every order failed, first error: %s", w.firstError())
		}
		all = append(all, w.Results...)
	}
	before, err := restateSnapshot(ctx, rdb, st)
	if err != nil {
		return nil, nil, err
	}
	logf("measuring: for %s, concurrency %d, mix %d%% success / %d%% inventory failure / %d%% payment failure",
		o.duration, o.concurrency, 100-o.inventoryPct-o.paymentPct, o.inventoryPct, o.paymentPct)
	res := gen.run(ctx, "load", o.duration, o.orders, reportProgress)
	after, err := restateSnapshot(ctx, rdb, st)
	if err != nil {
		return nil, nil, err
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	all = append(all, res.Results...)
	rep := buildReport(o, res, before, after)
	rep.RunDir, rep.RunID = dir, runID
	rep.Target.Label = "restate " + restateVersion
	rep.GetMode = "attach"
	rep.Activation.Method = "n/a for Restate"
	if o.openLoop {
		rate, source := openLoopRate(o, rep, nil)
		if rate > 0 {
			cfg := openLoopConfig{Rate: rate, Duration: o.openLoopDuration, MaxInFlight: o.openLoopMaxInFlight, SendGrace: o.pollTimeout}
			logf("open loop: %.1f orders/s (%s) for %s, at most %d in flight", rate, source, o.openLoopDuration, o.openLoopMaxInFlight)
			ol := gen.openLoop(ctx, cfg, reportProgress)
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			rep.OpenLoop = buildOpenLoop(cfg, source, rep.Throughput.OrdersPerSec, ol)
			all = append(all, ol.Results...)
		}
	}
	eff := checkEffects(ctx, rdb, all)
	logf("restate peer: effects: %s", eff.text())
	if err := jsonfile.Write(filepath.Join(dir, "bench-results.json"), rep); err != nil {
		return nil, nil, err
	}
	return rep, &eff, nil
}

// startRestateLoad starts the Restate peer, seeds its Redis and runs one
// probe order through it (the ingress learns a new deployment a moment
// after the admin API answers).
func startRestateLoad(ctx context.Context, o options, dir string) (*restateStack, *load, redis.UniversalClient, string, error) {
	st, err := startRestate(ctx, o, dir)
	if err != nil {
		return nil, nil, nil, "", err
	}
	rdb, err := redisurl.NewClient(st.redis.URL(), redisurl.Options{PoolSize: o.concurrency + 8})
	if err != nil {
		st.stop()
		return nil, nil, nil, "", err
	}
	fail := func(err error) (*restateStack, *load, redis.UniversalClient, string, error) {
		rdb.Close()
		st.stop()
		return nil, nil, nil, "", err
	}
	runID := fmt.Sprintf("r%x", time.Now().UnixNano()&0xffffffffff)
	ids, err := seed(ctx, rdb, runID)
	if err != nil {
		return fail(fmt.Errorf("seed: %w", err))
	}
	gen := newLoad(loadConfig{
		APIs: []string{st.ingress}, Concurrency: o.concurrency, Poll: o.poll, PollTimeout: o.pollTimeout,
		RunID: runID, IDs: ids, InventoryPct: o.inventoryPct, PaymentPct: o.paymentPct,
	})
	rc := &restateClient{ingress: st.ingress, client: gen.client}
	gen.peer = rc.one
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Order 0 (an inventory failure, pathOf) is outside every phase:
		// they number theirs from 1.
		r := rc.one(ctx, gen, 0, time.Now(), time.Time{})
		if r.terminal() && (r.Path == pathSuccess) == (r.Status == "Confirmed") {
			logf("restate peer: probe order %s (%s) %s in %.1f ms", r.OrderID, r.Path, r.Status, ms(r.E2E))
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("probe order: %s (status %q; logs in %s)", r.Err, r.Status, dir))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return st, gen, rdb, runID, nil
}

// restateSnapshot reads what buildReport needs of a Restate run: CPU
// from procfs by process, and Redis' INFO commandstats.
func restateSnapshot(ctx context.Context, rdb redis.UniversalClient, st *restateStack) (snap, error) {
	s := snap{At: time.Now(), Metrics: map[string]scraped{}, CPU: map[string]float64{}, ChildCPU: map[string]float64{}}
	s.Machine, _ = machineTimes()
	for name, pid := range st.pids() {
		cpu, children, err := systemCPUSeconds(pid)
		if err != nil {
			return s, fmt.Errorf("%s cpu: %w", name, err)
		}
		s.CPU[name] = cpu
		s.ChildCPU[name] = children
	}
	if cpu, err := cpuSeconds(0); err == nil {
		s.CPU[runnerCPU] = cpu
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, fmt.Errorf("INFO commandstats: %w", err)
	}
	s.Cmdstats = parseCommandstats(info)
	return s, nil
}

// effectsCheck is what the modules recorded for the orders of a run,
// read back by id: every order's effects once, none on a path that must
// not reach them.
type effectsCheck struct {
	Orders int `json:"orders"`
	// Bad lists the orders whose records do not match their path (the
	// first few).
	Bad      []string `json:"bad,omitempty"`
	BadCount int      `json:"badCount"`
	Skipped  int      `json:"skipped"`
}

// OK says every checked order's effects happened once.
func (e *effectsCheck) OK() bool { return e != nil && e.BadCount == 0 && e.Orders > 0 }

func (e *effectsCheck) text() string {
	if e == nil {
		return "not checked"
	}
	s := fmt.Sprintf("%d orders checked against the modules' records: %d wrong", e.Orders, e.BadCount)
	if e.Skipped > 0 {
		s += fmt.Sprintf(" (%d not terminal, not checked)", e.Skipped)
	}
	if len(e.Bad) > 0 {
		s += "; first: " + strings.Join(e.Bad, "; ")
	}
	return s
}

func (e *effectsCheck) summary() string {
	if e == nil || e.OK() {
		return ""
	}
	return "; effects: " + e.text()
}

// checkEffects reads each terminal order's module records under its
// deterministic ids: one Reserve; then, on the success path, one
// Authorize with the amount captured; on the payment-failure path, one
// declined Authorize and one Release; on the inventory-failure path, a
// rejected reservation and no payment at all.
func checkEffects(ctx context.Context, rdb redis.UniversalClient, results []orderResult) effectsCheck {
	var e effectsCheck
	store, err := commerce.NewRedis(commerce.Config{Client: rdb})
	if err != nil {
		e.BadCount, e.Bad = 1, []string{err.Error()}
		return e
	}
	inv, pay := store.Inventory(), store.Payment()
	bad := func(id, format string, a ...any) {
		e.BadCount++
		if len(e.Bad) < 5 {
			e.Bad = append(e.Bad, id+": "+fmt.Sprintf(format, a...))
		}
	}
	for _, r := range results {
		if !r.terminal() || r.OrderID == "" {
			e.Skipped++
			continue
		}
		e.Orders++
		rsv, err := inv.Reservation(ctx, order.ReservationID(r.OrderID))
		if err != nil {
			bad(r.OrderID, "reservation: %v", err)
			continue
		}
		if rsv.ReserveCalls != 1 {
			bad(r.OrderID, "%d Reserve calls", rsv.ReserveCalls)
		}
		auth, aerr := pay.Authorization(ctx, order.PaymentID(r.OrderID))
		switch r.Path {
		case pathInventory:
			if rsv.Reserve.GetAccepted() || !errors.Is(aerr, commerce.ErrNotFound) || rsv.ReleaseCalls != 0 {
				bad(r.OrderID, "inventory-failure path: reserve accepted=%v, authorization err=%v, %d releases", rsv.Reserve.GetAccepted(), aerr, rsv.ReleaseCalls)
			}
		case pathPayment:
			if aerr != nil || auth.Calls != 1 || auth.Result.GetAccepted() || auth.Captured != 0 || rsv.ReleaseCalls != 1 {
				bad(r.OrderID, "payment-failure path: authorization %+v err=%v, %d releases", auth, aerr, rsv.ReleaseCalls)
			}
		default:
			if aerr != nil || auth.Calls != 1 || !auth.Result.GetAccepted() || auth.Captured <= 0 || rsv.ReleaseCalls != 0 {
				bad(r.OrderID, "success path: authorization %+v err=%v, %d releases", auth, aerr, rsv.ReleaseCalls)
			}
		}
	}
	return e
}

// restateSmoke runs a handful of orders of the mix through the Restate
// peer and checks each status and each effect: the peer's end-to-end
// check, without the measurement.
func restateSmoke(ctx context.Context, o options, dir string) error {
	st, gen, rdb, _, err := startRestateLoad(ctx, o, dir)
	if err != nil {
		return err
	}
	defer func() {
		rdb.Close()
		st.stop()
	}()
	res := gen.run(ctx, "smoke", 0, o.peer.smokeOrders, quiet)
	paths := map[string]int{}
	unexpected := 0
	for _, r := range res.Results {
		paths[r.Path]++
		if r.terminal() && (r.Path == pathSuccess) != (r.Status == "Confirmed") {
			unexpected++
		}
	}
	eff := checkEffects(ctx, rdb, res.Results)
	logf("restate smoke: %d orders (%v): %d errors (first %q), %d unexpected statuses; effects: %s",
		len(res.Results), paths, res.errors(), res.firstError(), unexpected, eff.text())
	if res.errors() > 0 || unexpected > 0 || !eff.OK() || eff.Orders != o.peer.smokeOrders {
		return errors.New("restate smoke failed")
	}
	fmt.Println("restate-peer smoke: ok")
	return nil
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func pctOrNA(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", *v)
}
