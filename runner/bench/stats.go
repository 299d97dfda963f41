package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// runnerCPU names this process (load generator) in the CPU figures.
const runnerCPU = "bench-runner"

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	Calls int64
	Usec  int64
}

// proc is one process the bench started: its PID for the OS's CPU
// figures, its metrics listener for the rest.
type proc struct {
	PID        int
	MetricsURL string
	// StatsPath is the process's -stats-file (binaries from before
	// /metrics that have that flag); empty when it has none.
	StatsPath string
}

// snap is everything read before and after the measured load, each from
// where an operator reads it.
type snap struct {
	At time.Time
	// Metrics is each process's /metrics scrape (client-side Redis round
	// trips and commands, by store).
	Metrics map[string]scraped
	// CPU is user+system time from the OS (procfs), by node, "redis-server"
	// and the bench itself; a node's and Redis' include the children
	// they reaped (systemCPUSeconds), the bench's does not.
	CPU map[string]float64
	// ChildCPU is the part of CPU that reaped children spent (Redis' AOF
	// rewrites and snapshots), by the same names.
	ChildCPU map[string]float64
	// IO is each process's read- and write-family system calls
	// (/proc/<pid>/io syscr + syscw), by node and "redis-server": every
	// socket read and write, so every hop an order makes, counted by the
	// kernel and free of the CPU figures' noise.
	IO map[string]uint64
	// Machine is the whole machine's CPU time, for the share the
	// hypervisor took (steal) while the load ran.
	Machine  machineCPU
	Cmdstats map[string]cmdStat
	Missing  []string
	// Dumped names the processes whose Redis counters came from a
	// -stats-file dump instead of /metrics.
	Dumped []string
}

// snapshot reads the figures; redisPIDs are every redis-server (the
// masters of a Redis Cluster), whose CPU is summed under "redis-server",
// and a cluster's commandstats are summed over its masters.
func snapshot(ctx context.Context, rdb redis.UniversalClient, procs map[string]proc, redisPIDs ...int) (snap, error) {
	s := snap{At: time.Now(), Metrics: map[string]scraped{}, CPU: map[string]float64{}, ChildCPU: map[string]float64{}, IO: map[string]uint64{}}
	for _, name := range sortedKeys(procs) {
		p := procs[name]
		m, err := scrapeMetrics(ctx, p.MetricsURL)
		if err != nil && p.StatsPath != "" {
			// A binary from before /metrics: its own dump, on SIGUSR1.
			var st statsDump
			if st, err = signalDump(ctx, p.PID, p.StatsPath); err == nil {
				m = scrapedFromDump(st.RedisRoundTrips)
				s.Dumped = append(s.Dumped, name)
			}
		}
		if err != nil {
			s.Missing = append(s.Missing, fmt.Sprintf("%s metrics: %v", name, err))
		} else {
			s.Metrics[name] = m
		}
		cpu, children, err := systemCPUSeconds(p.PID)
		if err != nil {
			s.Missing = append(s.Missing, fmt.Sprintf("%s cpu: %v", name, err))
		} else {
			s.CPU[name] = cpu
			s.ChildCPU[name] = children
		}
		if n, err := ioSyscalls(p.PID); err == nil {
			s.IO[name] = n
		}
	}
	for _, pid := range redisPIDs {
		if cpu, children, err := systemCPUSeconds(pid); err == nil {
			s.CPU["redis-server"] += cpu
			s.ChildCPU["redis-server"] += children
		}
		if n, err := ioSyscalls(pid); err == nil {
			s.IO["redis-server"] += n
		}
	}
	s.Machine, _ = machineTimes()
	// The load generator shares the machine: its cost is shown, apart.
	if cpu, err := cpuSeconds(0); err == nil {
		s.CPU[runnerCPU] = cpu
	}
	var mu sync.Mutex
	s.Cmdstats = map[string]cmdStat{}
	err := redisNodes(ctx, rdb, func(ctx context.Context, node string, m redis.UniversalClient) error {
		info, err := m.Info(ctx, "commandstats").Result()
		if err != nil {
			return fmt.Errorf("INFO commandstats %s: %w", node, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for name, st := range parseCommandstats(info) {
			sum := s.Cmdstats[name]
			sum.Calls += st.Calls
			sum.Usec += st.Usec
			s.Cmdstats[name] = sum
		}
		return nil
	})
	return s, err
}

// parseCommandstats reads lines like
// cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=0
// Subcommands keep Redis' own names (client|setinfo).
func parseCommandstats(info string) map[string]cmdStat {
	out := map[string]cmdStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// percentiles in milliseconds.
type pct struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

// percentiles reads ds through the bench's latency histogram
// (newLatencyHistogram): each figure is the highest value equivalent to
// the recorded one at its precision (under 0.1 %), so it never
// understates.
func percentiles(ds []time.Duration) pct {
	if len(ds) == 0 {
		return pct{}
	}
	h := newLatencyHistogram()
	for _, d := range ds {
		recordLatency(h, d)
	}
	usToMs := func(us int64) float64 { return float64(us) / 1000 }
	return pct{P50: usToMs(h.ValueAtQuantile(50)), P95: usToMs(h.ValueAtQuantile(95)), P99: usToMs(h.ValueAtQuantile(99)),
		Max: usToMs(h.Max()), N: len(ds)}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Commands that are the bench's own or the clients' connection set-up,
// never part of an order.
var notOrderCommands = map[string]bool{
	"info": true, "hello": true, "client|setinfo": true, "client|setname": true, "auth": true, "select": true,
	"config|get": true, "config|set": true, "script|load": true, "ping": true,
	// A Redis Cluster client's own: the slot map it loads, and the
	// ASKING that precedes a command it was redirected with ASK.
	"cluster|slots": true, "cluster|shards": true, "cluster|nodes": true, "command": true, "command|docs": true,
	"command|info": true, "asking": true, "readonly": true,
}

var scriptCommands = map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "fcall": true}

// The per-node figures that are not command names.
const (
	keyRoundTrips = "total"
	keyCommands   = "commands"
	keyPipelines  = "pipelines"
)

// pollCommand is what the API sends for each read of GET /orders/{id}, a
// wait's included: the read model is read with one HMGET
// (readmodel.Redis.Get). Starting an order never reads the read model on
// the API side, so every API HMGET is a GET's.
const pollCommand = "hmget"

type report struct {
	RunID  string `json:"runId"`
	RunDir string `json:"runDir"`
	// Target is what was measured: the working tree or a baseline commit.
	Target struct {
		Label       string `json:"label"`
		Commit      string `json:"commit,omitempty"`
		APIBin      string `json:"apiBin"`
		WorkflowBin string `json:"workflowBin"`
	} `json:"target"`
	// GetMode is how outcomes were awaited: "wait" (GET ?waitFor=terminal)
	// or "poll" (an API without the wait).
	GetMode string `json:"getMode"`
	Config  struct {
		Concurrency      int     `json:"concurrency"`
		DurationSec      float64 `json:"durationSec,omitempty"`
		Orders           int     `json:"orders,omitempty"`
		WarmupOrders     int     `json:"warmupOrders"`
		PollMs           float64 `json:"pollMs"`
		MixSuccessPct    int     `json:"mixSuccessPct"`
		MixInventoryPct  int     `json:"mixInventoryFailurePct"`
		MixPaymentPct    int     `json:"mixPaymentFailurePct"`
		CPUs             int     `json:"cpus"`
		RedisServerLocal bool    `json:"redisServerLocal"`
	} `json:"config"`
	Orders struct {
		Finished  int            `json:"finished"`
		Terminal  int            `json:"terminal"`
		Confirmed int            `json:"confirmed"`
		Failed    int            `json:"failed"`
		Errors    int            `json:"errors"`
		ByPath    map[string]int `json:"byPath"`
		// Unexpected counts terminal orders whose status is not the one
		// their path must end in.
		Unexpected int    `json:"unexpected"`
		FirstError string `json:"firstError,omitempty"`
	} `json:"orders"`
	Throughput struct {
		OrdersPerSec float64 `json:"ordersPerSec"`
		ElapsedSec   float64 `json:"elapsedSec"`
		PerSecond    []int   `json:"terminalPerSecond"`
	} `json:"throughput"`
	StartOrderMs      pct            `json:"startOrderMs"`
	StartToTerminalMs pct            `json:"startToTerminalMs"`
	ByPathE2EMs       map[string]pct `json:"startToTerminalMsByPath"`
	// Polls are plain GETs sent while waiting for an outcome: 0 against an
	// API with the bounded wait. Waits are the GET ?waitFor=terminal
	// requests.
	Polls struct {
		Total    int64   `json:"total"`
		PerOrder float64 `json:"perOrder"`
	} `json:"polls"`
	Waits struct {
		Total    int64   `json:"total"`
		PerOrder float64 `json:"perOrder"`
	} `json:"waits"`
	ClientRoundTrips struct {
		Source string `json:"source"`
		// All processes, all round trips, per terminal order.
		PerOrder float64 `json:"perOrder"`
		// Workflow processes.
		WorkflowPerOrder float64 `json:"workflowPerOrder"`
		// API processes without the poll reads: the StartOrder path.
		APIStartPerOrder float64 `json:"apiStartPerOrder"`
		// API read-model reads for GET /orders/{id} (waits and polls).
		APIPollPerOrder float64 `json:"apiPollPerOrder"`
		// APIPerPoll is those reads per GET request (wait or poll).
		APIPerPoll float64 `json:"apiPerPoll"`
		// ByNode: per order, by command name, and the round trips
		// ("total"), commands and pipelines.
		ByNode map[string]map[string]float64 `json:"byNode"`
		// ByStore: round trips per order by store, all processes.
		ByStore map[string]float64 `json:"byStore"`
	} `json:"clientRoundTrips"`
	RedisCommands struct {
		Source   string             `json:"source"`
		PerOrder float64            `json:"perOrder"`
		ByName   map[string]float64 `json:"byName"`
		// UsecPerOrder is Redis' own time in those commands.
		UsecPerOrder float64 `json:"usecPerOrder"`
		// WaitPerOrder is the WAIT and WAITAOF among them: replication
		// acknowledgements (-redis-wait-replicas), counted apart.
		WaitPerOrder float64 `json:"waitPerOrder"`
		// BackgroundPerOrder is the cluster at rest (Background) over the
		// load's length, per order, WAIT left out: counted apart.
		BackgroundPerOrder float64 `json:"backgroundPerOrder"`
		// ForOrdersPerOrder is PerOrder less WAIT and background: the
		// orders' own commands, the goal's figure.
		ForOrdersPerOrder float64 `json:"forOrdersPerOrder"`
	} `json:"redisCommands"`
	// Background is the cluster at rest before the load (-idle-window).
	Background *background `json:"background,omitempty"`
	// Goals judge the run's figures (issue 58); the bench asserts none.
	Goals         []peerGoal         `json:"goals,omitempty"`
	CPUPerOrderMs map[string]float64 `json:"cpuMsPerOrder"`
	CPUSeconds    map[string]float64 `json:"cpuSeconds"`
	// ForkCPUPerOrderMs is the part of CPUPerOrderMs spent by children a
	// process forked and reaped while the load ran (Redis' AOF rewrites
	// and snapshots); only processes that had some.
	ForkCPUPerOrderMs map[string]float64 `json:"forkCpuMsPerOrder,omitempty"`
	// IOSyscallsPerOrder: read- and write-family system calls per order,
	// by process, from /proc/<pid>/io.
	IOSyscallsPerOrder map[string]float64 `json:"ioSyscallsPerOrder,omitempty"`
	// Steal is the machine's CPU time the hypervisor gave to others while
	// the load ran, and its share of all the machine's CPU time then:
	// the higher, the noisier every CPU and latency figure.
	Steal      *steal `json:"steal,omitempty"`
	Activation struct {
		Method string `json:"method"`
		Ms     pct    `json:"ms"`
	} `json:"coldActivation"`
	Replay replayStats `json:"replayRead"`
	// RedisPerOrder is what a terminal order of the closed loop holds in
	// Redis (retention off), measured after the phase; nil when the
	// measure failed.
	RedisPerOrder *usage       `json:"redisPerTerminalOrder,omitempty"`
	Mix           ceilingMix   `json:"ceilingMix"`
	Ceiling       ceilingStats `json:"ceiling"`
	// OpenLoop is the fixed-rate phase; nil when skipped.
	OpenLoop *openLoopStats `json:"openLoop,omitempty"`
	// Overload is the burst above the peak; nil when skipped.
	Overload *overloadStats `json:"overload,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
}

func buildReport(o options, res loadResult, before, after snap) *report {
	r := &report{}
	r.Config.Concurrency = o.concurrency
	if o.orders > 0 {
		r.Config.Orders = o.orders
	} else {
		r.Config.DurationSec = o.duration.Seconds()
	}
	r.Config.WarmupOrders = o.warmup
	r.Config.PollMs = ms(o.poll)
	r.Config.MixSuccessPct = 100 - o.inventoryPct - o.paymentPct
	r.Config.MixInventoryPct = o.inventoryPct
	r.Config.MixPaymentPct = o.paymentPct
	r.Config.CPUs = numCPU()
	r.Config.RedisServerLocal = true
	r.Notes = append(r.Notes, before.Missing...)
	r.Notes = append(r.Notes, after.Missing...)

	r.Orders.ByPath = map[string]int{}
	var starts, e2e []time.Duration
	byPath := map[string][]time.Duration{}
	for _, x := range res.Results {
		r.Orders.Finished++
		r.Orders.ByPath[x.Path]++
		if x.Err != "" {
			r.Orders.Errors++
			if r.Orders.FirstError == "" {
				r.Orders.FirstError = x.Err
			}
			continue
		}
		starts = append(starts, x.StartLat)
		if !x.terminal() {
			continue
		}
		r.Orders.Terminal++
		if x.Status == "Confirmed" {
			r.Orders.Confirmed++
		} else {
			r.Orders.Failed++
		}
		if (x.Path == pathSuccess) != (x.Status == "Confirmed") {
			r.Orders.Unexpected++
		}
		e2e = append(e2e, x.E2E)
		byPath[x.Path] = append(byPath[x.Path], x.E2E)
	}
	r.Throughput.ElapsedSec = res.Elapsed.Seconds()
	if res.Elapsed > 0 {
		r.Throughput.OrdersPerSec = float64(r.Orders.Terminal) / res.Elapsed.Seconds()
	}
	r.Throughput.PerSecond = perSecond(res)
	r.StartOrderMs = percentiles(starts)
	r.StartToTerminalMs = percentiles(e2e)
	r.ByPathE2EMs = map[string]pct{}
	for p, ds := range byPath {
		r.ByPathE2EMs[p] = percentiles(ds)
	}
	r.Polls.Total = res.Polls
	r.Waits.Total = res.Waits
	orders := float64(r.Orders.Terminal)
	if orders == 0 {
		return r
	}
	r.Polls.PerOrder = float64(res.Polls) / orders
	r.Waits.PerOrder = float64(res.Waits) / orders

	// Client-side round trips from the processes' /metrics.
	r.ClientRoundTrips.Source = "each process's /metrics (" + metricRedisRoundTrips + ", " + metricRedisCommands +
		" by command, by store), scraped before and after the measured load"
	if len(after.Dumped) > 0 {
		r.ClientRoundTrips.Source += "; for " + strings.Join(after.Dumped, ", ") +
			" (no /metrics) the process's -stats-file dump on SIGUSR1 instead (one store, \"" + dumpStore + "\")"
		r.Notes = append(r.Notes, "Redis round trips of "+strings.Join(after.Dumped, ", ")+
			" from their -stats-file dumps (binaries without /metrics): no split by store")
	}
	r.ClientRoundTrips.ByNode = map[string]map[string]float64{}
	r.ClientRoundTrips.ByStore = map[string]float64{}
	var clientByName map[string]int64 // summed over processes, command names only; nil without counts
	for name, a := range after.Metrics {
		b, ok := before.Metrics[name]
		if !ok {
			continue
		}
		if clientByName == nil {
			clientByName = map[string]int64{}
		}
		d := map[string]float64{}
		add := func(k string, dv int64) {
			if dv != 0 {
				d[k] = float64(dv) / orders
			}
		}
		bCmd := b.by(metricRedisCommands, labelCommand)
		for k, v := range a.by(metricRedisCommands, labelCommand) {
			dv := int64(v - bCmd[k])
			add(k, dv)
			clientByName[k] += dv
		}
		rt := int64(a.sum(metricRedisRoundTrips, nil) - b.sum(metricRedisRoundTrips, nil))
		add(keyRoundTrips, rt)
		add(keyCommands, int64(a.sum(metricRedisCommands, nil)-b.sum(metricRedisCommands, nil)))
		add(keyPipelines, int64(a.sum(metricRedisPipelines, nil)-b.sum(metricRedisPipelines, nil)))
		r.ClientRoundTrips.ByNode[name] = d
		bStore := b.by(metricRedisRoundTrips, labelStore)
		for st, v := range a.by(metricRedisRoundTrips, labelStore) {
			if dv := v - bStore[st]; dv != 0 {
				r.ClientRoundTrips.ByStore[st] += dv / orders
			}
		}
		total := float64(rt) / orders
		r.ClientRoundTrips.PerOrder += total
		if strings.HasPrefix(name, "api") {
			poll := (a.sum(metricRedisCommands, map[string]string{labelCommand: pollCommand}) -
				b.sum(metricRedisCommands, map[string]string{labelCommand: pollCommand})) / orders
			r.ClientRoundTrips.APIPollPerOrder += poll
			r.ClientRoundTrips.APIStartPerOrder += total - poll
		} else {
			r.ClientRoundTrips.WorkflowPerOrder += total
		}
	}
	if gets := res.Polls + res.Waits; gets > 0 {
		r.ClientRoundTrips.APIPerPoll = r.ClientRoundTrips.APIPollPerOrder * orders / float64(gets)
	}

	// Server-side commands from INFO commandstats.
	r.RedisCommands.Source = "INFO commandstats delta (includes commands run inside Lua scripts; excludes INFO, connection set-up and PING)"
	r.RedisCommands.ByName = map[string]float64{}
	serverByName := map[string]int64{}
	var usec int64
	for name, a := range after.Cmdstats {
		d := a.Calls - before.Cmdstats[name].Calls
		if d <= 0 || notOrderCommands[name] {
			continue
		}
		serverByName[name] = d
		usec += a.Usec - before.Cmdstats[name].Usec
		r.RedisCommands.ByName[name] = float64(d) / orders
		r.RedisCommands.PerOrder += float64(d) / orders
		if waitCommands[name] {
			r.RedisCommands.WaitPerOrder += float64(d) / orders
		}
	}
	r.RedisCommands.UsecPerOrder = float64(usec) / orders
	r.setBackground(nil)

	r.CPUPerOrderMs = map[string]float64{}
	r.CPUSeconds = map[string]float64{}
	for name, a := range after.CPU {
		if b, ok := before.CPU[name]; ok {
			r.CPUSeconds[name] = a - b
			r.CPUPerOrderMs[name] = (a - b) * 1000 / orders
		}
	}
	for name, a := range after.ChildCPU {
		if d := a - before.ChildCPU[name]; d > 0 {
			if r.ForkCPUPerOrderMs == nil {
				r.ForkCPUPerOrderMs = map[string]float64{}
			}
			r.ForkCPUPerOrderMs[name] = d * 1000 / orders
		}
	}

	if len(after.IO) > 0 {
		r.IOSyscallsPerOrder = map[string]float64{}
		for name, a := range after.IO {
			if b, ok := before.IO[name]; ok && a >= b {
				r.IOSyscallsPerOrder[name] = float64(a-b) / orders
			}
		}
	}
	r.Steal = stealBetween(before.Machine, after.Machine)

	r.Activation.Method = "proxy: every order is fresh, so each POST /orders pays one cold activation " +
		"(Location Store create lock, activation on a workflow member, stream open and replay of an empty stream, " +
		"first append and projection) plus the HTTP and idempotency work; the figure is StartOrder latency"
	r.Activation.Ms = r.StartOrderMs

	r.Mix = deriveMix(serverByName, clientByName, orders)
	return r
}

func perSecond(res loadResult) []int {
	secs := int(res.Elapsed/time.Second) + 1
	out := make([]int, secs)
	for _, x := range res.Results {
		if !x.terminal() {
			continue
		}
		i := int((x.Start + x.E2E) / time.Second)
		if i >= 0 && i < secs {
			out[i]++
		}
	}
	return out
}
