// Command soak is `make soak`: a seeded chaos soak. It starts its own
// local cluster (runner/localcluster: redis-server with its append-only file,
// the API and workflow processes), seeds stock that runs out and payment
// methods that approve and decline, drives a mixed load through the
// public HTTP API only, and injects a fault schedule drawn from -seed
// (the same seed gives the same schedule). After the last fault it acts
// as the operator (member takeovers, stuck-order resume), waits until
// every acknowledged order is terminal, collects the history from Redis
// and its own client log, and runs the invariant checker
// (runner/soak/check). Results go to the terminal, to
// <run-dir>/soak-results.json and <run-dir>/history.json; any violation
// makes it exit non-zero.
//
// It is a test driver, not part of the system: it must not import edge,
// the workflow or grain packages. It drives the cluster over public HTTP
// and the admin listener only; it reads Redis during the run for gone
// records alone (to judge a pause), and after the quiet period for the
// history (streams, read model, ownership history through their stores;
// every reservation and payment record by the order it names through the
// commerce store's scan; idempotency records by their documented keys).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

type options struct {
	runDir      string
	apiBin      string
	workflowBin string
	duration    time.Duration
	seed        uint64
	seedSet     bool
	workers     int
	settle      time.Duration
	faults      bool
	// redisHA "sentinel" runs the cluster on a primary, a replica and
	// three sentinels, with every write waiting for the replica; the
	// schedule's redis kill is then a failover (faultRedisFailover).
	redisHA string
	// redisClusterReplicas > 0 runs the cluster on a Redis Cluster (three
	// masters) with that many replicas per master, every write waiting
	// for one; only redis-master-kill (-only) then kills Redis.
	redisClusterReplicas int
	// only, when set, keeps the first fault of each of these kinds and
	// drops every other: a proof of one fault alone (redis-failover).
	only []string
	// strict fails the run when a scheduled fault was not injected or
	// did not take effect, or when an acknowledged order needed the
	// operator to finish: no operator pass runs in the quiet period.
	strict bool
}

func main() {
	var o options
	var seed int64
	flag.StringVar(&o.runDir, "run-dir", ".run/soak", "run directory: logs, Redis data, results")
	flag.StringVar(&o.apiBin, "api-bin", "", "built commerce-api (default: go build into <run-dir>/bin)")
	flag.StringVar(&o.workflowBin, "workflow-bin", "", "built order-workflow (default: go build into <run-dir>/bin)")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "load and fault time, before the quiet period")
	flag.Int64Var(&seed, "seed", -1, "fault schedule seed; negative picks one from the clock (printed)")
	flag.IntVar(&o.workers, "workers", 8, "concurrent load workers")
	flag.DurationVar(&o.settle, "settle", 90*time.Second, "quiet-period budget for every acknowledged order to turn terminal")
	flag.BoolVar(&o.faults, "faults", true, "inject the fault schedule")
	flag.IntVar(&o.redisClusterReplicas, "redis-cluster-replicas", 0, "run on a Redis Cluster with this many replicas per master (writes wait for one); with -only redis-master-kill")
	var only string
	flag.StringVar(&only, "only", "", "comma-separated fault kinds: keep the first fault of each, drop every other (e.g. redis-failover)")
	flag.BoolVar(&o.strict, "strict", false, "fail unless every scheduled fault was injected and took effect and every acknowledged order finished without an operator (no operator pass)")
	flag.StringVar(&o.redisHA, "redis-ha", "", `"sentinel": run on a primary, two replicas and three sentinels (writes wait for one replica); the redis kill becomes a failover`)
	flag.Parse()
	if seed < 0 {
		seed = time.Now().UnixNano() & 0x7fffffff
	}
	o.seed = uint64(seed)
	for _, k := range strings.Split(only, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(append(append([]string{}, faultKinds...), faultRedisFailover, faultRedisLagging, faultMasterKill), k) {
			fmt.Fprintf(os.Stderr, "soak: -only %q: no such fault kind (want one of %s, %s, %s, %s)\n", k, strings.Join(faultKinds, ", "), faultRedisFailover, faultRedisLagging, faultMasterKill)
			os.Exit(2)
		}
		o.only = append(o.only, k)
	}
	if o.redisHA != "" && o.redisHA != localcluster.RedisHASentinel {
		fmt.Fprintf(os.Stderr, "soak: -redis-ha %q: want %q or none\n", o.redisHA, localcluster.RedisHASentinel)
		os.Exit(2)
	}
	if o.redisClusterReplicas > 0 && (o.redisHA != "" || !slices.Equal(o.only, []string{faultMasterKill})) {
		fmt.Fprintf(os.Stderr, "soak: -redis-cluster-replicas runs with -only %s alone, without -redis-ha\n", faultMasterKill)
		os.Exit(2)
	}
	if o.workers <= 0 || o.duration <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -workers and -duration must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("[soak %s] "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}
