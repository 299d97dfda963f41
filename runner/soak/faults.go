package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The fault kinds of the schedule.
const (
	faultWorkflowKill  = "workflow-kill"
	faultWorkflowPause = "workflow-pause"
	faultRedisKill     = "redis-kill"
	faultAPIKill       = "api-kill"
	faultRelocate      = "relocate"
	faultWorkflowDrain = "workflow-drain"
	// faultStoreStall freezes redis-server (SIGSTOP) for longer than the
	// workflow lease, then releases it (SIGCONT): a Sentinel failover, a
	// disk stall under appendfsync always or a network blip, as the
	// processes see it. Every connection stays open and no reply comes.
	faultStoreStall = "store-stall"
	// faultOverload is a bounded open loop of starts far above capacity
	// (burst.go).
	faultOverload = "overload-burst"
	// faultPartition cuts one API off from one workflow member while both
	// still reach Redis and every other process (partition.go). It is
	// skipped, with its reason logged, when the soak has no partitioner.
	faultPartition = "partition"
	// faultRedisFailover is faultRedisKill on the Sentinel topology
	// (-redis-ha sentinel): the primary is SIGKILLed, the sentinels
	// promote the replica, and the killed server comes back as the new
	// primary's replica after the hold.
	faultRedisFailover = "redis-failover"
	// faultRedisLagging is the lagging-replica failover (-redis-ha
	// sentinel, asked for with -only): every replica frozen for
	// redisLag, so writes answer 503 in doubt while the primary applies
	// them; then the primary SIGKILLed and the replicas resumed, and the
	// sentinels promote one that lacks those writes. Never drawn by the
	// schedule.
	faultRedisLagging = "redis-lagging-failover"
)

// faultMasterKill SIGKILLs the first master of a Redis Cluster
// (-redis-cluster-replicas, asked for with -only): one of its replicas
// takes its slots, and the local supervisor starts the killed node
// again, as a replica; the fault counts as effective only if both
// happened. Never drawn by the schedule.
const faultMasterKill = "redis-master-kill"

// redisLag is how long the lagging failover keeps the replicas frozen
// before the primary's kill: longer than the nodes' WAIT timeout (1 s),
// so writes answer 503 in doubt before the kill, and under the
// sentinels' down-after (2 s), so a resumed replica is promoted.
const redisLag = 1400 * time.Millisecond

// workflowLease is the workflow members' lease: localcluster passes no
// -lease, so it is order-workflow's default (node.DefaultLease, which the
// soak does not import: it must not link the actor runtime).
const workflowLease = 10 * time.Second

// storeStallHold outlasts the lease: the members' self-fence read fails
// for longer than it allows.
const storeStallHold = workflowLease + 5*time.Second

// partitionHold is how long a partition stays cut.
const partitionHold = 8 * time.Second

// workflowNodes are the soak cluster's workflow members (Config.Workflows).
var workflowNodes = []string{localcluster.WorkflowA, localcluster.WorkflowB, "workflow-c"}

var faultKinds = []string{faultWorkflowKill, faultWorkflowPause, faultRedisKill, faultAPIKill, faultRelocate, faultWorkflowDrain,
	faultStoreStall, faultOverload, faultPartition}

// Fault is one scheduled fault and, once run, what it did.
type Fault struct {
	N      int           `json:"n"`
	At     time.Duration `json:"atNs"`
	Kind   string        `json:"kind"`
	Target string        `json:"target"`
	// Peer is the partition's other side (a workflow member; Target is
	// the API).
	Peer string `json:"peer,omitempty"`
	// Hold is the pause length, how long Redis stays down or frozen, the
	// burst's length or how long a partition stays cut.
	Hold time.Duration `json:"holdNs,omitempty"`

	InjectedAtUnixMs int64 `json:"injectedAtUnixMs,omitempty"`
	EndedAtUnixMs    int64 `json:"endedAtUnixMs,omitempty"`
	Injected         bool  `json:"injected"`
	Effective        bool  `json:"effective"`
	// TakenOver counts orders a takeover after the fault moved.
	TakenOver int      `json:"takenOver,omitempty"`
	Evicted   bool     `json:"evicted,omitempty"`
	Rejoined  bool     `json:"rejoined,omitempty"`
	Detail    []string `json:"detail,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("#%d +%s %s %s", f.N, f.At.Round(time.Millisecond), f.Kind, f.Target)
	if f.Peer != "" {
		s += " from " + f.Peer
	}
	if f.Hold > 0 {
		s += " for " + f.Hold.Round(time.Millisecond).String()
	}
	return s
}

// Schedule spacing: the first fault comes after scheduleLead; faults
// are scheduleGap plus up to scheduleJitter apart, none later than
// scheduleTail before the end. A fault's At is when it may start at the
// earliest: faults run one at a time, so one that outlasts the gap (a
// store stall, a drain) delays the next.
const (
	scheduleLead   = 5 * time.Second
	scheduleGap    = 6 * time.Second
	scheduleJitter = 4 * time.Second
	scheduleTail   = 3 * time.Second
	// minFirstGap bounds how close the first round's faults may be
	// squeezed.
	minFirstGap = 2 * time.Second
)

// coverEveryKind is the shortest run whose schedule holds every kind.
var coverEveryKind = scheduleLead + time.Duration(len(faultKinds)-1)*minFirstGap + scheduleTail

// schedule draws the fault schedule from the seed alone: each round is a
// permutation of every kind in a seed-shuffled order. The first round's
// gaps shrink to fit the run (down to minFirstGap), so a run of at least
// coverEveryKind sees every kind at least once, and a longer one spaces
// the rest as usual.
func schedule(seed uint64, d time.Duration) []Fault {
	r := rand.New(rand.NewPCG(seed, 0xfa0175))
	var out []Fault
	at := scheduleLead
	last := d - scheduleTail
	firstGap := max(minFirstGap, (last-scheduleLead)/time.Duration(len(faultKinds)-1))
	for n, round := 1, 0; ; round++ {
		for _, k := range r.Perm(len(faultKinds)) {
			if at > last {
				return out
			}
			f := Fault{N: n, At: at, Kind: faultKinds[k]}
			switch f.Kind {
			case faultWorkflowKill, faultWorkflowDrain:
				f.Target = workflowNodes[r.IntN(len(workflowNodes))]
			case faultWorkflowPause:
				f.Target = workflowNodes[r.IntN(len(workflowNodes))]
				f.Hold = time.Second + time.Duration(r.IntN(4000))*time.Millisecond
			case faultRedisKill:
				f.Target = "redis-server"
				// Long enough to outlast the stores' own short retries.
				f.Hold = 1500*time.Millisecond + time.Duration(r.IntN(2000))*time.Millisecond
			case faultAPIKill:
				f.Target = localcluster.APINodes[r.IntN(len(localcluster.APINodes))]
			case faultRelocate:
				f.Target = "live orders"
			case faultStoreStall:
				f.Target = "redis-server"
				f.Hold = storeStallHold
			case faultOverload:
				f.Target = "every API"
				f.Hold = burstMinHold + time.Duration(r.IntN(int((burstMaxHold-burstMinHold)/time.Millisecond)+1))*time.Millisecond
			case faultPartition:
				f.Target = localcluster.APINodes[r.IntN(len(localcluster.APINodes))]
				f.Peer = workflowNodes[r.IntN(len(workflowNodes))]
				f.Hold = partitionHold
			}
			out = append(out, f)
			n++
			gap := scheduleGap + time.Duration(r.IntN(int(scheduleJitter/time.Millisecond)))*time.Millisecond
			if round == 0 {
				gap = min(gap, firstGap)
			}
			at += gap
		}
	}
}

// faulter runs the schedule against the cluster, one fault at a time.
type faulter struct {
	c   *localcluster.Cluster
	loc location.Store
	log *clientLog
	// ld drives the overload burst's starts and their retries.
	ld *load
	// partition cuts and heals partitions; nil: none is available and
	// noPartition says why (newPartitioner).
	partition   partitioner
	noPartition string
	// bg tracks work a fault leaves running after it returns (the
	// burst's retries); the quiet period waits for it.
	bg     sync.WaitGroup
	http   *http.Client
	seed   uint64
	mu     sync.Mutex
	faults []Fault
	// lastEnd is when the last fault ended.
	lastEnd time.Time
}

func (f *faulter) admin(ctx context.Context, method, path, body string) (int, []byte, error) {
	var lastErr error
	for _, api := range localcluster.APINodes {
		if !f.c.Running(api) {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, method, f.c.AdminURL(api)+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+f.c.AdminToken())
		req.Header.Set("Content-Type", "application/json")
		res, err := f.http.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
		res.Body.Close()
		if res.StatusCode >= 500 {
			lastErr = fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, strings.TrimSpace(string(b)))
			continue
		}
		return res.StatusCode, b, nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%s %s: no API running", method, path)
	}
	return 0, nil, lastErr
}

// takeoverWait says whether a takeover answer of 0 orders is final.
type takeoverWait bool

const (
	// takeNone: 0 orders is an answer (a member that owned nothing).
	takeNone takeoverWait = false
	// takeSome: the member was just killed and owned orders: 0 is asked
	// again until the deadline, since the dead incarnation counts only
	// once the cluster has seen it leave.
	takeSome takeoverWait = true
)

// takeover takes over every order of a member id or node name, retrying
// a transient failure; it returns how many orders moved.
func (f *faulter) takeover(ctx context.Context, member string, wait takeoverWait) (int, string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, b, err := f.admin(cctx, http.MethodPost, "/admin/members/"+url.PathEscape(member)+"/takeover?caller=soak", "{}")
		cancel()
		if err == nil && st == http.StatusOK {
			var rep struct {
				Orders []struct {
					Outcome string `json:"outcome"`
				} `json:"orders"`
				Failed []json.RawMessage `json:"failed"`
			}
			_ = json.Unmarshal(b, &rep)
			n := 0
			for _, o := range rep.Orders {
				if o.Outcome == "taken-over" {
					n++
				}
			}
			if (len(rep.Failed) == 0 && (n > 0 || wait == takeNone)) || time.Now().After(deadline) {
				return n, fmt.Sprintf("takeover %s: %d taken over, %d failed", member, n, len(rep.Failed))
			}
		} else if err == nil && (st != http.StatusConflict || time.Now().After(deadline)) {
			return 0, fmt.Sprintf("takeover %s: HTTP %d %s", member, st, strings.TrimSpace(string(b)))
		} else if err == nil {
			// 409: the member is not yet seen gone (still in the
			// topology); the cluster notices within seconds.
			err = fmt.Errorf("HTTP %d %s", st, strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Sprintf("takeover %s: %v", member, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ensureRunning restarts a node the runner holds until it runs.
func (f *faulter) ensureRunning(ctx context.Context, name string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if f.c.Running(name) && f.c.Managed(name) {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		err := f.c.Restart(cctx, name)
		cancel()
		if err == nil || (f.c.Running(name) && f.c.Managed(name)) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("restart %s: %w", name, err)
		}
		logf("restart %s failed, again: %v", name, err)
		time.Sleep(time.Second)
	}
}

// waitRejoined waits until the supervisor restarted name after since.
func (f *faulter) waitRejoined(ctx context.Context, name string, since time.Time, budget time.Duration) bool {
	deadline := time.Now().Add(budget)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, r := range f.c.Restarts(name) {
			if r.At.After(since) && f.c.Running(name) {
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

func (f *faulter) goneSince(ctx context.Context, node string, since time.Time) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := f.loc.Gone(cctx)
	if err != nil {
		return false
	}
	for _, m := range g {
		if m.Node == node && m.LeftAtUnixMs >= since.UnixMilli()-1000 {
			return true
		}
	}
	return false
}

// run injects each fault at its time; it returns when the schedule is
// done or ctx ends.
func (f *faulter) run(ctx context.Context, start time.Time, sched []Fault) {
	for _, ft := range sched {
		wait := time.Until(start.Add(ft.At))
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		logf("FAULT %s", ft)
		ft = f.inject(ctx, ft)
		ft.EndedAtUnixMs = time.Now().UnixMilli()
		eff := fmt.Sprint(ft.Effective)
		if ft.Kind == faultRedisKill || (ft.Kind == faultStoreStall && ft.Injected) {
			eff = "judged once every answer is in"
		}
		logf("FAULT #%d %s done: effective=%s %s", ft.N, ft.Kind, eff, strings.Join(ft.Detail, "; "))
		f.mu.Lock()
		f.faults = append(f.faults, ft)
		f.lastEnd = time.Now()
		f.mu.Unlock()
	}
}

func (f *faulter) inject(ctx context.Context, ft Fault) Fault {
	note := func(format string, a ...any) { ft.Detail = append(ft.Detail, fmt.Sprintf(format, a...)) }
	at := time.Now()
	ft.InjectedAtUnixMs = at.UnixMilli()
	switch ft.Kind {
	case faultWorkflowKill:
		if err := f.c.Kill(ft.Target); err != nil {
			note("kill: %v", err)
			return ft
		}
		ft.Injected = true
		n, d := f.takeover(ctx, ft.Target, takeSome)
		ft.TakenOver, ft.Effective = n, n > 0
		note("%s", d)
		if err := f.ensureRunning(ctx, ft.Target); err != nil {
			note("%v", err)
		}
	case faultWorkflowPause:
		pid := f.c.PID(ft.Target)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			note("SIGSTOP: %v", err)
			return ft
		}
		ft.Injected = true
		time.Sleep(ft.Hold)
		ft.Evicted = f.goneSince(ctx, ft.Target, at)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			note("SIGCONT: %v", err)
		}
		// The gone record may be written just as the pause ends.
		for i := 0; !ft.Evicted && i < 10; i++ {
			time.Sleep(300 * time.Millisecond)
			ft.Evicted = f.goneSince(ctx, ft.Target, at)
		}
		if ft.Evicted {
			// A member recorded gone fences itself, exits and is
			// restarted by the supervisor.
			ft.Rejoined = f.waitRejoined(ctx, ft.Target, at, 30*time.Second)
			n, d := f.takeover(ctx, ft.Target, takeSome)
			ft.TakenOver = n
			note("%s", d)
		}
		note("evicted=%v rejoined=%v", ft.Evicted, ft.Rejoined)
		ft.Effective = ft.Evicted && ft.Rejoined
	case faultMasterKill:
		rc := f.c.RedisCluster()
		if rc == nil {
			note("not a Redis Cluster")
			return ft
		}
		victim := rc.Nodes()[0]
		killed := time.Now()
		if err := syscall.Kill(victim.PID(), syscall.SIGKILL); err != nil {
			note("SIGKILL master pid %d: %v", victim.PID(), err)
			return ft
		}
		ft.Injected = true
		logf("SIGKILL redis master pid=%d addr=%s", victim.PID(), victim.Addr())
		deadline := time.Now().Add(30 * time.Second)
		for !ft.Effective && time.Now().Before(deadline) && ctx.Err() == nil {
			for _, r := range rc.Replicas(0) {
				rcl := r.Client()
				role, err := rcl.Do(ctx, "ROLE").Slice()
				_ = rcl.Close()
				if err == nil && len(role) > 0 && role[0] == "master" {
					ft.Effective = true
					took := time.Since(killed).Round(10 * time.Millisecond)
					note("replica %s took the killed master's slots %s after the SIGKILL", r.Addr(), took)
					logf("FIGURE redis cluster master kill under load: replica promoted %s after the SIGKILL", took)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !ft.Effective {
			note("no replica took the killed master's slots")
		}
		// The local supervisor starts the killed master again once its
		// slots failed over, as the new master's replica; nothing here
		// does. Without that restart, writes to the promoted master's
		// slots would wait for a replica it does not have.
		restarted := false
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
			if rs := f.c.Restarts("redis-1"); len(rs) > 0 {
				restarted = true
				note("the supervisor started the killed master again %s after the SIGKILL", rs[0].At.Sub(killed).Round(10*time.Millisecond))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !restarted {
			ft.Effective = false
			note("the supervisor did not start the killed master again")
		}
		time.Sleep(ft.Hold)
	case faultRedisKill, faultRedisFailover, faultRedisLagging:
		kill := func() error { return f.c.KillRedis() }
		if ft.Kind == faultRedisLagging {
			kill = func() error { return f.c.KillPrimaryLagging(ctx, redisLag) }
		}
		if err := kill(); err != nil {
			note("kill redis: %v", err)
			return ft
		}
		ft.Injected = true
		if ft.Kind != faultRedisKill {
			killed := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := f.c.WaitPromoted(cctx)
			cancel()
			if err != nil {
				note("no promotion: %v", err)
			} else {
				took := time.Since(killed)
				ft.Effective = true
				note("replica promoted %s after the primary's SIGKILL", took.Round(10*time.Millisecond))
				logf("FIGURE sentinel failover under load: replica promoted %s after the primary's SIGKILL", took.Round(10*time.Millisecond))
			}
		}
		time.Sleep(ft.Hold)
		for try := 0; ; try++ {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := f.c.RestartRedis(cctx)
			cancel()
			if err == nil {
				break
			}
			note("restart redis: %v", err)
			if try > 5 || ctx.Err() != nil {
				return ft
			}
			time.Sleep(time.Second)
		}
		// Effectiveness (a STORE_UNAVAILABLE answer) is judged at the end,
		// when late answers are in.
	case faultAPIKill:
		before := f.transportErrors()
		if err := f.c.Kill(ft.Target); err != nil {
			note("kill: %v", err)
			return ft
		}
		ft.Injected = true
		time.Sleep(300 * time.Millisecond)
		if err := f.ensureRunning(ctx, ft.Target); err != nil {
			note("%v", err)
		}
		after := f.transportErrors()
		note("transport errors during the outage: %d", after-before)
		ft.Effective = after > before
	case faultRelocate:
		ft.Injected = true
		r := rand.New(rand.NewPCG(f.seed, uint64(ft.N)))
		moved := 0
		for range 3 {
			id := f.log.randomLive(r)
			if id == "" {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			st, b, err := f.admin(cctx, http.MethodPost, "/admin/orders/"+url.PathEscape(id)+"/relocate", "{}")
			cancel()
			if err == nil && st == http.StatusOK {
				moved++
			}
			note("relocate %s: %d %v %.120s", id, st, err, strings.TrimSpace(string(b)))
		}
		ft.Effective = moved > 0
	case faultStoreStall:
		ft = f.stallStore(ctx, ft)
	case faultOverload:
		ft = f.burst(ctx, ft)
	case faultPartition:
		ft = f.partitionFault(ctx, ft)
	case faultWorkflowDrain:
		pid := f.c.PID(ft.Target)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			note("SIGTERM: %v", err)
			return ft
		}
		ft.Injected = true
		// The node stays managed: the supervisor starts it again once
		// it has drained and exited.
		ft.Rejoined = f.waitRejoined(ctx, ft.Target, at, 60*time.Second)
		ft.Effective = ft.Rejoined
		note("drained and restarted=%v", ft.Rejoined)
	}
	return ft
}

// stallStore freezes redis-server for ft.Hold and releases it, whatever
// happens meanwhile: a server left stopped would outlive the soak. Its
// effect (errors answered, members that self-fenced) is judged once
// every answer is in (stallEffect).
func (f *faulter) stallStore(ctx context.Context, ft Fault) Fault {
	note := func(format string, a ...any) { ft.Detail = append(ft.Detail, fmt.Sprintf(format, a...)) }
	pid := f.c.RedisPID()
	if pid <= 0 {
		note("no redis-server pid")
		return ft
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		note("SIGSTOP redis-server: %v", err)
		return ft
	}
	ft.Injected = true
	select {
	case <-ctx.Done():
	case <-time.After(ft.Hold):
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		note("SIGCONT redis-server: %v", err)
		return ft
	}
	// The store answers again once the server has worked off what queued.
	resumed := time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := f.loc.Gone(cctx)
		cancel()
		if err == nil {
			note("store answered %s after SIGCONT", time.Since(resumed).Round(time.Millisecond))
			break
		}
		if time.Since(resumed) > 15*time.Second || ctx.Err() != nil {
			note("store still not answering %s after SIGCONT: %v", time.Since(resumed).Round(time.Millisecond), err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ft
}

// stallEffect judges a store stall once every answer is in: the calls
// sent during it that were answered 5xx or not at all, and the workflow
// members the supervisor restarted during it (a member whose lease ran
// out fenced itself and exited). The fault is effective when a client
// saw it.
func (f *faulter) stallEffect(ft *Fault) {
	from, to := time.UnixMilli(ft.InjectedAtUnixMs), time.UnixMilli(ft.EndedAtUnixMs)
	n := f.log.errorsSentBetween(from, to)
	var restarted []string
	for _, w := range f.c.Workflows() {
		for _, r := range f.c.Restarts(w) {
			if !r.At.Before(from) && !r.At.After(to.Add(time.Second)) {
				restarted = append(restarted, w)
			}
		}
	}
	ft.Detail = append(ft.Detail, fmt.Sprintf("%d calls sent during the stall answered 5xx or not at all", n),
		fmt.Sprintf("%d workflow restarts during it (self-fence) %v", len(restarted), restarted))
	ft.Effective = n > 0
}

func (f *faulter) transportErrors() int {
	_, _, errs := f.log.snapshot()
	return errs["transport"]
}

func (f *faulter) done() ([]Fault, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Fault(nil), f.faults...), f.lastEnd
}
