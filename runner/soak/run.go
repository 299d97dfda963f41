package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/soak/check"
)

// seedIDs names the run's catalogue.
type seedIDs struct {
	CartLimited, CartAmple, CartNoStock string
	MethodOK, MethodDeclined            string
	Stock                               map[string]int64
}

// limitedStock runs out within a short soak: each limited order holds 2.
const limitedStock = 200

func seedCatalogue(ctx context.Context, rdb redis.UniversalClient, run string) (seedIDs, error) {
	limited, ample, mug, none := "sku-"+run+"-limited", "sku-"+run+"-ample", "sku-"+run+"-mug", "sku-"+run+"-soldout"
	ids := seedIDs{
		CartLimited: "cart-" + run + "-limited", CartAmple: "cart-" + run + "-ample", CartNoStock: "cart-" + run + "-nostock",
		MethodOK: "pm-" + run + "-ok", MethodDeclined: "pm-" + run + "-declined",
		Stock: map[string]int64{limited: limitedStock, ample: 1_000_000, mug: 1_000_000, none: 0},
	}
	s := commerce.Seed{
		Carts: []commerce.Cart{
			{CartID: ids.CartLimited, Lines: []*contracts.OrderLine{{Sku: mug, Quantity: 1}, {Sku: limited, Quantity: 2}}, Amount: 2*1990 + 890, Currency: "EUR"},
			{CartID: ids.CartAmple, Lines: []*contracts.OrderLine{{Sku: ample, Quantity: 1}, {Sku: mug, Quantity: 2}}, Amount: 1990 + 2*890, Currency: "EUR"},
			{CartID: ids.CartNoStock, Lines: []*contracts.OrderLine{{Sku: mug, Quantity: 1}, {Sku: none, Quantity: 1}}, Amount: 890 + 4990, Currency: "EUR"},
		},
		Stock: ids.Stock,
		Methods: []commerce.PaymentMethod{
			{MethodID: ids.MethodOK, Approve: true},
			{MethodID: ids.MethodDeclined, Approve: false, Reason: "card declined"},
		},
	}
	cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
	if err != nil {
		return ids, err
	}
	return ids, cs.ApplySeed(ctx, s)
}

// Results is soak-results.json.
type Results struct {
	Seed            uint64         `json:"seed"`
	Duration        string         `json:"duration"`
	RedisHA         string         `json:"redisHa,omitempty"`
	RunDir          string         `json:"runDir"`
	Starts          int            `json:"startAttempts"`
	Keys            int            `json:"keysAcknowledged"`
	Orders          int            `json:"ordersInStore"`
	Acknowledged    int            `json:"ordersAcknowledged"`
	Terminal        int            `json:"acknowledgedTerminal"`
	Unanswered      []string       `json:"unansweredKeys,omitempty"`
	FaultsInjected  map[string]int `json:"faultsInjected"`
	FaultsEffective map[string]int `json:"faultsEffective"`
	Faults          []Fault        `json:"faults"`
	Invariants      []check.Result `json:"invariants"`
	LastFaultToAll  string         `json:"lastFaultToAllTerminal"`
	ClientErrors    map[string]int `json:"clientErrors"`
	Missing         []string       `json:"missing,omitempty"`
	Operator        []string       `json:"operator,omitempty"`
	// Restarts: each node's supervisor restarts, by how the old
	// incarnation ended (a self-fence, a rejoin, a drain, a kill).
	Restarts map[string][]string `json:"restarts,omitempty"`
	// Failovers: for each Sentinel failover, when the first new order was
	// acknowledged after the primary's SIGKILL.
	Failovers []string `json:"failovers,omitempty"`
	// Problems are fault outcomes the system must not show (a partition
	// that evicted a live member, and with -strict a fault that did not
	// take effect or an order that needed the operator); any fails the
	// soak.
	Problems []string `json:"problems,omitempty"`
	OK       bool     `json:"ok"`
}

func run(ctx context.Context, o options) (bool, error) {
	dir, err := filepath.Abs(o.runDir)
	if err != nil {
		return false, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	sched := schedule(o.seed, o.duration)
	if len(o.only) > 0 {
		// Drawn over a run long enough to hold every kind, then kept
		// alone and brought forward (onlyFirstOf).
		sched = schedule(o.seed, max(o.duration, coverEveryKind))
	}
	if o.redisHA != "" {
		for i := range sched {
			if sched[i].Kind == faultRedisKill {
				sched[i].Kind, sched[i].Target = faultRedisFailover, "redis primary"
			}
		}
	}
	if len(o.only) > 0 {
		sched = onlyFirstOf(sched, o.only)
		if o.redisClusterReplicas > 0 {
			sched = []Fault{{N: 1, At: scheduleLead, Kind: faultMasterKill, Target: "redis cluster master 1", Hold: 2 * time.Second}}
		}
		if o.redisHA != "" && slices.Contains(o.only, faultRedisLagging) {
			sched = append(sched, Fault{N: len(sched) + 1, At: scheduleLead + time.Duration(len(sched))*scheduleGap,
				Kind: faultRedisLagging, Target: "redis replicas, then primary", Hold: 2 * time.Second})
		}
	}
	logf("seed %d (rerun: SOAK_FLAGS='-duration %s -seed %d'); %d faults scheduled:", o.seed, o.duration, o.seed, len(sched))
	if !o.faults {
		sched = nil
	}
	for _, f := range sched {
		logf("  %s", f)
	}
	if o.apiBin == "" || o.workflowBin == "" {
		if o.apiBin, o.workflowBin, err = build(ctx, filepath.Join(dir, "bin")); err != nil {
			return false, err
		}
	}
	// The partition's cgroups exist before the nodes start in them, and
	// go (every cut healed) after the cluster has stopped: deferred
	// first, it runs last, on every return, an interrupt's included.
	pnet, noPartition := newPartitionNet()
	defer closePartitionNet(pnet)
	if pnet == nil {
		logf("partition fault skipped: %s", noPartition)
	}
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: dir, APIBin: o.apiBin, WorkflowBin: o.workflowBin, Env: localcluster.ChildEnv(os.Environ()),
		// appendfsync always: the soak kills redis-server and holds every
		// acknowledged order to exist afterwards, which everysec does not
		// promise (Redis postpones the AOF write behind a slow fsync and
		// replies meanwhile).
		Workflows: len(workflowNodes), RedisPersist: true, RedisAppendFsync: "always", Admin: true, StopGrace: 10 * time.Second, RequestTimeout: 5 * time.Second,
		RedisHA: o.redisHA, RedisCluster: o.redisClusterReplicas > 0, RedisClusterReplicas: o.redisClusterReplicas,
		Logf:   func(f string, a ...any) { logf(f, a...) },
		Cgroup: cgroupHook(pnet),
	})
	if err != nil {
		return false, err
	}
	defer func() {
		logf("stopping cluster")
		for _, n := range append(append([]string{}, localcluster.APINodes...), c.Workflows()...) {
			_ = c.Kill(n)
		}
		if err := c.Stop(); err != nil {
			logf("stop: %v", err)
		}
	}()
	rdb, err := redisurl.NewClient(c.RedisURL(), redisurl.Options{})
	if err != nil {
		return false, err
	}
	defer rdb.Close()
	runID := fmt.Sprintf("s%d", o.seed)
	ids, err := seedCatalogue(ctx, rdb, runID)
	if err != nil {
		return false, fmt.Errorf("seed: %w", err)
	}

	hc := &http.Client{Timeout: 60 * time.Second}
	clog := newClientLog()
	start := time.Now()
	loadEnd := start.Add(o.duration)
	ld := &load{log: clog, ids: ids, runID: runID, retryBy: loadEnd.Add(o.settle)}
	for _, n := range localcluster.APINodes {
		ld.apis = append(ld.apis, &client.API{BaseURL: c.APIURL(n), HTTP: hc})
		ld.names = append(ld.names, n)
	}
	loc, err := location.NewRedis(location.Config{Client: rdb})
	if err != nil {
		return false, err
	}
	fl := &faulter{c: c, loc: loc, log: clog, ld: ld, http: hc, seed: o.seed}
	fl.partition, fl.noPartition = newPartitioner(c, pnet, noPartition)

	stopLoad := make(chan struct{})
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() { defer loadWG.Done(); ld.run(ctx, o.workers, stopLoad, o.seed) }()
	progressDone := make(chan struct{})
	go progress(clog, fl, start, progressDone)

	fl.run(ctx, start, sched)
	if w := time.Until(loadEnd); w > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(w):
		}
	}
	close(stopLoad)
	faults, lastFault := fl.done()
	if lastFault.IsZero() {
		lastFault = time.Now()
	}
	logf("load stopped; quiet period: the operator takes over gone members and resumes stuck orders")

	// The operator: every gone member's orders, then the stuck-order resume,
	// repeated until every acknowledged order is terminal or the budget ends.
	var operator []string
	settleBy := time.Now().Add(o.settle)
	var pending []string
	allTerminalAt := time.Time{}
	for round := 0; ; round++ {
		if round%5 == 0 && !o.strict {
			operator = append(operator, operatorPass(ctx, fl)...)
		}
		if round == 0 {
			// Workers, and the burst's retriers, finish their last key
			// first.
			loadWG.Wait()
			fl.bg.Wait()
		}
		if round == 0 {
			pending = clog.ackedOrders()
		}
		// A terminal order stays terminal: only the rest are asked again.
		pending = nonTerminal(ctx, ld, pending, o.workers)
		if len(pending) == 0 {
			allTerminalAt = time.Now()
			break
		}
		if time.Now().After(settleBy) || ctx.Err() != nil {
			break
		}
		logf("quiet: %d acknowledged orders not terminal yet", len(pending))
		time.Sleep(time.Second)
	}
	close(progressDone)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}

	// Effects judged once every answer is in.
	for i := range faults {
		if faults[i].Kind == faultRedisLagging && faults[i].Injected {
			// Effective once a replica was promoted (judged when it ran)
			// and writes fell short while the replicas lagged, before
			// the primary's kill.
			from := time.UnixMilli(faults[i].InjectedAtUnixMs)
			n := clog.storeUnavailableBetween(from, from.Add(redisLag))
			faults[i].Detail = append(faults[i].Detail, fmt.Sprintf("%d STORE_UNAVAILABLE answers while the replicas lagged", n))
			faults[i].Effective = faults[i].Effective && n > 0
		}
		if faults[i].Kind == faultRedisKill && faults[i].Injected {
			from := time.UnixMilli(faults[i].InjectedAtUnixMs)
			to := time.UnixMilli(faults[i].EndedAtUnixMs).Add(10 * time.Second)
			n := clog.storeUnavailableBetween(from, to)
			faults[i].Detail = append(faults[i].Detail, fmt.Sprintf("%d STORE_UNAVAILABLE answers", n))
			faults[i].Effective = n > 0
		}
		if faults[i].Kind == faultStoreStall && faults[i].Injected {
			fl.stallEffect(&faults[i])
		}
	}

	h, missing, err := collect(ctx, rdb, ids, clog, faults, o.seed)
	if err != nil {
		return false, fmt.Errorf("collect history: %w", err)
	}
	histPath := filepath.Join(dir, "history.json")
	if err := h.Save(histPath); err != nil {
		return false, err
	}
	rep := check.Check(h)

	starts, _, errs := clog.snapshot()
	res := Results{
		Seed: o.seed, Duration: o.duration.String(), RedisHA: o.redisHA, RunDir: dir, Starts: starts, Orders: len(h.Orders),
		FaultsInjected: map[string]int{}, FaultsEffective: map[string]int{}, Faults: faults,
		Invariants: rep.Results, ClientErrors: errs, Missing: missing, Operator: operator,
	}
	clog.mu.Lock()
	res.Keys, res.Unanswered = len(clog.acks), clog.unanswered
	clog.mu.Unlock()
	acked := clog.ackedOrders()
	res.Acknowledged = len(acked)
	res.Terminal = len(acked) - len(pending)
	for _, f := range faults {
		if f.Injected {
			res.FaultsInjected[f.Kind]++
		}
		if f.Effective {
			res.FaultsEffective[f.Kind]++
		}
	}
	if allTerminalAt.IsZero() {
		res.LastFaultToAll = "not all terminal within " + o.settle.String()
	} else {
		res.LastFaultToAll = allTerminalAt.Sub(lastFault).Round(time.Millisecond).String()
	}
	res.Problems = partitionProblems(faults)
	res.Problems = append(res.Problems, failoverProblems(faults)...)
	var followed []string
	res.Failovers, followed = failoverFigures(faults, clog, localcluster.APINodes)
	if o.strict {
		res.Problems = append(res.Problems, followed...)
		res.Problems = append(res.Problems, strictProblems(o.only, sched, faults, len(pending))...)
	}
	res.Restarts = map[string][]string{}
	for _, n := range append(append([]string{}, localcluster.APINodes...), c.Workflows()...) {
		for _, r := range c.Restarts(n) {
			res.Restarts[n] = append(res.Restarts[n], r.Exit)
		}
	}
	res.OK = rep.OK() && len(pending) == 0 && len(res.Problems) == 0
	if err := jsonfile.Write(filepath.Join(dir, "soak-results.json"), res); err != nil {
		return false, err
	}
	printSummary(res, rep)
	if !rep.OK() {
		printOffenders(rep, h)
	}
	if len(pending) > 0 {
		logf("FAIL: %d acknowledged orders not terminal: %s", len(pending), strings.Join(first(pending, 20), " "))
	}
	logf("results: %s, history: %s", filepath.Join(dir, "soak-results.json"), histPath)
	return res.OK, nil
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// operatorPass takes over every gone member's orders, then resumes stuck
// orders (with takeover) on an API's admin listener.
func operatorPass(ctx context.Context, fl *faulter) []string {
	var out []string
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	gone, err := fl.loc.Gone(cctx)
	cancel()
	if err != nil {
		out = append(out, "gone members: "+err.Error())
	}
	for _, id := range sortedKeys(gone) {
		_, d := fl.takeover(ctx, id, takeNone)
		out = append(out, d)
	}
	cctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	st, b, err := fl.admin(cctx, http.MethodPost, "/admin/orders/stuck/resume?olderThan=0s&takeover=true", "")
	cancel()
	var rep struct {
		Orders []json.RawMessage `json:"orders"`
	}
	_ = json.Unmarshal(b, &rep)
	out = append(out, fmt.Sprintf("stuck resume: HTTP %d, %d orders, err %v", st, len(rep.Orders), err))
	for _, l := range out {
		logf("operator: %s", l)
	}
	return out
}

// nonTerminal asks the public API for each order's status, workers at a
// time, and returns those not Confirmed or Failed, in the given order.
func nonTerminal(ctx context.Context, ld *load, ids []string, workers int) []string {
	terminal := make([]bool, len(ids))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				terminal[i] = isTerminal(ld.call(ctx, "get", i%len(ld.apis), ids[i]))
			}
		}()
	}
	for i := range ids {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	var out []string
	for i, id := range ids {
		if !terminal[i] {
			out = append(out, id)
		}
	}
	return out
}

func progress(l *clientLog, fl *faulter, start time.Time, done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		starts, acks, errs := l.snapshot()
		fl.mu.Lock()
		nf := len(fl.faults)
		fl.mu.Unlock()
		var e []string
		for _, k := range sortedKeys(errs) {
			e = append(e, fmt.Sprintf("%s=%d", k, errs[k]))
		}
		logf("progress +%s starts=%d acked=%d faults=%d errors{%s}", time.Since(start).Round(time.Second), starts, acks, nf, strings.Join(e, " "))
	}
}

func printSummary(r Results, rep check.Report) {
	fmt.Println()
	fmt.Printf("SOAK SUMMARY seed=%d duration=%s\n", r.Seed, r.Duration)
	fmt.Printf("  %-34s %d\n", "start attempts", r.Starts)
	fmt.Printf("  %-34s %d\n", "keys acknowledged", r.Keys)
	fmt.Printf("  %-34s %d (%d terminal)\n", "orders acknowledged", r.Acknowledged, r.Terminal)
	fmt.Printf("  %-34s %d\n", "orders in the store", r.Orders)
	fmt.Printf("  %-34s %d\n", "keys without a final answer", len(r.Unanswered))
	fmt.Printf("  %-34s %s\n", "last fault → all terminal", r.LastFaultToAll)
	for _, f := range r.Failovers {
		fmt.Printf("  %-34s %s\n", "failover", f)
	}
	fmt.Printf("  %-22s %9s %9s\n", "fault", "injected", "effective")
	for _, k := range faultKinds {
		if k == faultRedisKill && r.RedisHA != "" {
			k = faultRedisFailover
		}
		fmt.Printf("  %-22s %9d %9d\n", k, r.FaultsInjected[k], r.FaultsEffective[k])
	}
	for _, k := range []string{faultRedisLagging, faultMasterKill} {
		if n := r.FaultsInjected[k]; n > 0 {
			fmt.Printf("  %-22s %9d %9d\n", k, n, r.FaultsEffective[k])
		}
	}
	fmt.Printf("  %-60s %s\n", "invariant", "violations")
	for _, inv := range rep.Results {
		fmt.Printf("  %-60s %d\n", inv.Name, inv.Violations)
	}
	fmt.Println("  client errors by code:")
	for _, k := range sortedKeys(r.ClientErrors) {
		fmt.Printf("    %-40s %d\n", k, r.ClientErrors[k])
	}
	fmt.Println("  supervisor restarts by node:")
	for _, n := range sortedKeys(r.Restarts) {
		fmt.Printf("    %-20s %s\n", n, strings.Join(r.Restarts[n], ", "))
	}
	for _, m := range r.Missing {
		fmt.Printf("  missing: %s\n", m)
	}
	for _, p := range r.Problems {
		fmt.Printf("  PROBLEM: %s\n", p)
	}
	verdict := "PASS"
	if !r.OK {
		verdict = "FAIL"
	}
	fmt.Printf("SOAK %s\n\n", verdict)
}

func printOffenders(rep check.Report, h *check.History) {
	for _, inv := range rep.Results {
		for i, o := range inv.Offenders {
			if i >= 20 {
				fmt.Printf("  ... %d more\n", len(inv.Offenders)-i)
				break
			}
			fmt.Printf("VIOLATION %s: order=%s key=%s sku=%s: %s\n", inv.Name, o.OrderID, o.Key, o.SKU, o.Reason)
		}
	}
	for i, id := range rep.OffendingOrders() {
		if i >= 10 {
			break
		}
		fmt.Printf("order %s events:\n", id)
		if rec := h.Orders[id]; rec != nil {
			for _, e := range rec.Stream {
				fmt.Printf("  v%d %s gen=%d epoch=%d cmd=%s %s\n", e.Version, e.EventType, e.FenceGeneration, e.FenceEpoch, e.SourceCommandID, e.Data)
			}
			for _, ow := range rec.Ownership {
				fmt.Printf("  own %s member=%s gen=%d at=%d\n", ow.Kind, ow.Member, ow.Generation, ow.AtUnixMs)
			}
		} else {
			fmt.Println("  (no stream)")
		}
	}
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

// onlyFirstOf keeps the first fault of each kind in kinds, numbered
// anew and spaced as a schedule's are (the first after scheduleLead, one
// every scheduleGap), and drops every other.
func onlyFirstOf(sched []Fault, kinds []string) []Fault {
	var out []Fault
	seen := map[string]bool{}
	for _, f := range sched {
		if slices.Contains(kinds, f.Kind) && !seen[f.Kind] {
			seen[f.Kind] = true
			f.N = len(out) + 1
			f.At = scheduleLead + time.Duration(len(out))*scheduleGap
			out = append(out, f)
		}
	}
	return out
}

// strictProblems are -strict's verdicts: a kind asked for but never
// scheduled (the run was too short for it), a fault that was not
// injected or had no effect, and acknowledged orders that did not finish
// by themselves (no operator pass ran).
func strictProblems(only []string, sched, faults []Fault, notTerminal int) []string {
	var out []string
	if len(sched) == 0 {
		out = append(out, "strict: no fault was scheduled")
	}
	for _, k := range only {
		if !slices.ContainsFunc(sched, func(f Fault) bool { return f.Kind == k }) {
			out = append(out, fmt.Sprintf("strict: no %s fault was scheduled (is -duration long enough, or -redis-ha set for redis-failover?)", k))
		}
	}
	for _, f := range faults {
		switch {
		case !f.Injected:
			out = append(out, fmt.Sprintf("strict: fault %s was not injected", f))
		case !f.Effective && !isFailover(f.Kind):
			// A failover without effect is failoverProblems', strict or not.
			out = append(out, fmt.Sprintf("strict: fault %s took no effect", f))
		}
	}
	if notTerminal > 0 {
		out = append(out, fmt.Sprintf("strict: %d acknowledged orders did not finish without an operator", notTerminal))
	}
	return out
}

// failoverFigures says, for each failover injected (Sentinel, lagging
// or a Redis Cluster master's), how long after the SIGKILL each API
// acknowledged its first new order (a 201 to a start sent after the
// kill): an API that did had followed the promoted replica, and so had
// the workflow member that recorded the start. An API that never did is
// a problem.
func failoverFigures(faults []Fault, clog *clientLog, apis []string) (figures, problems []string) {
	for _, f := range faults {
		if !isFailover(f.Kind) || !f.Injected {
			continue
		}
		killed := time.UnixMilli(f.InjectedAtUnixMs)
		first := clog.firstCreatedAfter(killed)
		for _, api := range apis {
			at, ok := first[api]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s #%d: %s acknowledged no new order after the SIGKILL", f.Kind, f.N, api))
				continue
			}
			took := at.Sub(killed).Round(time.Millisecond)
			figures = append(figures, fmt.Sprintf("#%d %s %s: first new order acknowledged %s after the SIGKILL", f.N, f.Kind, api, took))
			logf("FIGURE %s under load: %s acknowledged its first new order %s after the SIGKILL", f.Kind, api, took)
		}
	}
	return figures, problems
}

// failoverProblems: a failover that was injected but did not happen (no
// replica promoted, or a lagging one whose writes never fell short)
// proves nothing, so, strict or not, the run fails and says so.
func failoverProblems(faults []Fault) []string {
	var out []string
	for _, f := range faults {
		if isFailover(f.Kind) && f.Injected && !f.Effective {
			out = append(out, fmt.Sprintf("fault %s took no effect: %s", f, strings.Join(f.Detail, "; ")))
		}
	}
	return out
}

// isFailover: the fault kinds that promote a replica.
func isFailover(kind string) bool {
	return kind == faultRedisFailover || kind == faultRedisLagging || kind == faultMasterKill
}
