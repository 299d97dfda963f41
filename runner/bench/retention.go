package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/prometheus/procfs"
	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The retention phase: a cluster of its own, with the PostgreSQL archive
// and a short -retention, runs a closed loop of -retention-orders orders,
// measures what each order holds in Redis while hot, waits for the
// archiver to move every one of them, and measures what stays. It reports
// keys and bytes per order (MEMORY USAGE of every key whose name carries
// the order's id: its own keys, its reservation's, holds and payment's),
// the finished list's bytes per waiting order, and the archiver's
// throughput with the machine's CPU per archived order over the archival
// window, when the cluster does nothing else (the retention outlasts the
// load).

// retentionReport is the phase's figures (bench-retention.json).
type retentionReport struct {
	Orders    int    `json:"orders"`
	Retention string `json:"retention"`
	Hot       usage  `json:"hot"`
	Archived  usage  `json:"archived"`
	// FinishedBytesPerOrder is the finished list's memory per order
	// waiting in it (the cost of finding candidates), apart from Hot.
	FinishedBytesPerOrder float64 `json:"finishedBytesPerOrder"`
	// ArchivedOrders is how many rows the archive holds at the end.
	ArchivedOrders int64 `json:"archivedOrders"`
	// ArchivalSeconds is the first row to the last; Throughput orders/s
	// over it.
	ArchivalSeconds float64 `json:"archivalSeconds"`
	Throughput      float64 `json:"ordersPerSecond"`
	// CPUMsPerOrder is the machine's busy CPU over the archival window
	// (every process: the workflows' archivers, Redis, PostgreSQL) per
	// archived order.
	CPUMsPerOrder float64         `json:"cpuMsPerOrder"`
	Goals         []retentionGoal `json:"goals"`
}

// retentionGoal is one of the archiver's goals, its figure and verdict.
type retentionGoal struct {
	Goal   string  `json:"goal"`
	Figure float64 `json:"figure"`
	Met    bool    `json:"met"`
	// Verdict is "met" or "not met".
	Verdict string `json:"verdict"`
	format  string
}

func newRetentionGoal(name string, figure float64, met bool, format string) retentionGoal {
	v := "not met"
	if met {
		v = "met"
	}
	return retentionGoal{Goal: name, Figure: figure, Met: met, Verdict: v, format: format}
}

func (g retentionGoal) String() string {
	return fmt.Sprintf("%s: "+g.format+" [%s]", g.Goal, g.Figure, g.Verdict)
}

// usage is the Redis footprint of a set of orders.
type usage struct {
	Orders        int     `json:"orders"`
	KeysPerOrder  float64 `json:"keysPerOrder"`
	BytesPerOrder float64 `json:"bytesPerOrder"`
}

// orderIDInKey finds the order an order's key belongs to.
var orderIDInKey = regexp.MustCompile(`ord-[0-9a-f]{32}`)

// footprint sums MEMORY USAGE per order over every key of the keyspace
// whose name carries one of ids, and the bytes of the keys matching
// shared (a glob), on every master.
func footprint(ctx context.Context, rdb redis.UniversalClient, ids map[string]bool, shared string) (usage, int64, error) {
	var keys, bytes, sharedBytes int64
	seen := map[string]bool{}
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, "*", 1000).Iterator()
		var batch []string
		flush := func() error {
			cmds := make([]*redis.IntCmd, len(batch))
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range batch {
					cmds[i] = p.MemoryUsage(ctx, k)
				}
				return nil
			}); err != nil && err != redis.Nil {
				return err
			}
			for i, k := range batch {
				n, _ := cmds[i].Result()
				if ok, _ := filepath.Match(shared, k); ok && shared != "" {
					sharedBytes += n
					continue
				}
				id := orderIDInKey.FindString(k)
				if id == "" || !ids[id] {
					continue
				}
				seen[id] = true
				keys++
				bytes += n
			}
			batch = batch[:0]
			return nil
		}
		for it.Next(ctx) {
			batch = append(batch, it.Val())
			if len(batch) == 1000 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		return flush()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return usage{}, 0, err
	}
	n := len(ids)
	if n == 0 {
		return usage{}, sharedBytes, nil
	}
	return usage{Orders: n, KeysPerOrder: float64(keys) / float64(n), BytesPerOrder: float64(bytes) / float64(n)}, sharedBytes, nil
}

// terminalFootprint is footprint over the terminal orders of res, nil
// (logged) when it cannot be read.
func terminalFootprint(ctx context.Context, rdb redis.UniversalClient, res loadResult) *usage {
	ids := map[string]bool{}
	for _, r := range res.Results {
		if r.terminal() {
			ids[r.OrderID] = true
		}
	}
	u, _, err := footprint(ctx, rdb, ids, "")
	if err != nil {
		logf("Redis per terminal order not measured: %v", err)
		return nil
	}
	return &u
}

// machineBusy is the machine's busy CPU time in seconds, over every CPU.
func machineBusy() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, err
	}
	c := st.CPUTotal
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal, nil
}

// measureRetention runs the retention phase on t's binaries.
func measureRetention(ctx context.Context, o options, t target) (*retentionReport, error) {
	dir := filepath.Join(t.Dir, "retention")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf("=== retention phase: -archive, -retention %s, %d orders ===", o.retention, o.retentionOrders)
	m, err := startMeasured(ctx, o, t, dir, "r", func(cfg *localcluster.Config) {
		cfg.Archive, cfg.Retention, cfg.ArchiveEvery = true, o.retention, time.Second
	})
	if err != nil {
		return nil, err
	}
	defer m.close()
	c, rdb, gen := m.c, m.rdb, m.gen
	arch, err := archive.Open(ctx, archive.Config{URL: c.ArchiveURL()})
	if err != nil {
		return nil, err
	}
	defer arch.Close()

	started := time.Now()
	res := gen.run(ctx, "retention", 0, o.retentionOrders, reportProgress)
	ids := map[string]bool{}
	for _, r := range res.Results {
		if r.terminal() {
			ids[r.OrderID] = true
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("retention phase: no order ended, first error: %s", res.firstError())
	}
	if time.Since(started) >= o.retention {
		logf("retention phase: the load outlasted the retention (%s): the hot figures include archived orders", o.retention)
	}
	hot, finished, err := footprint(ctx, rdb, ids, "*finished:{*}")
	if err != nil {
		return nil, fmt.Errorf("retention phase: hot footprint: %w", err)
	}
	rep := &retentionReport{Orders: len(ids), Retention: o.retention.String(), Hot: hot, FinishedBytesPerOrder: float64(finished) / float64(len(ids))}
	logf("retention phase: %d orders hot: %.2f keys, %.0f bytes per order; the finished list %.1f bytes per order",
		len(ids), hot.KeysPerOrder, hot.BytesPerOrder, rep.FinishedBytesPerOrder)

	// The archival window: from the first row to the last, the cluster
	// doing nothing else.
	var first time.Time
	var busy0 float64
	deadline := time.Now().Add(o.retention + 5*time.Minute)
	for {
		n, err := arch.Count(ctx)
		if err != nil {
			return nil, err
		}
		if n > 0 && first.IsZero() {
			first = time.Now()
			if busy0, err = machineBusy(); err != nil {
				return nil, err
			}
		}
		if n >= int64(len(ids)) {
			rep.ArchivedOrders = n
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("retention phase: %d of %d orders archived by the deadline", n, len(ids))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	busy1, err := machineBusy()
	if err != nil {
		return nil, err
	}
	rep.ArchivalSeconds = time.Since(first).Seconds()
	if rep.ArchivalSeconds > 0 {
		rep.Throughput = float64(rep.ArchivedOrders) / rep.ArchivalSeconds
	}
	rep.CPUMsPerOrder = (busy1 - busy0) * 1000 / float64(rep.ArchivedOrders)
	// The last order's compaction lands just after its row.
	var archived usage
	for range 100 {
		if archived, _, err = footprint(ctx, rdb, ids, "*finished:{*}"); err != nil {
			return nil, fmt.Errorf("retention phase: archived footprint: %w", err)
		}
		if archived.KeysPerOrder <= 4 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rep.Archived = archived
	rep.Goals = []retentionGoal{
		newRetentionGoal("keys per archived order <= 4", archived.KeysPerOrder, archived.KeysPerOrder <= 4, "%.2f keys"),
		newRetentionGoal("bytes per archived order <= 1024", archived.BytesPerOrder, archived.BytesPerOrder <= 1024, "%.0f bytes"),
		newRetentionGoal("measured over >= 10000 archived orders", float64(rep.ArchivedOrders), rep.ArchivedOrders >= 10000, "%.0f orders"),
	}
	printRetention(os.Stdout, rep)
	if err := jsonfile.Write(filepath.Join(t.Dir, "bench-retention.json"), rep); err != nil {
		return nil, err
	}
	return rep, nil
}

func printRetention(w io.Writer, r *retentionReport) {
	fmt.Fprintf(w, "\n=== retention phase (-archive, -retention %s) ===\n", r.Retention)
	fmt.Fprintf(w, "%-31s %.2f keys, %.0f bytes per order (%d orders; with retention off, the same less the finished list)\n", "hot, terminal", r.Hot.KeysPerOrder, r.Hot.BytesPerOrder, r.Hot.Orders)
	fmt.Fprintf(w, "%-31s %.1f bytes per waiting order (one ZADD in the terminal step, one ZREM when archived)\n", "finished list", r.FinishedBytesPerOrder)
	fmt.Fprintf(w, "%-31s %.2f keys, %.0f bytes per order (%d orders)\n", "archived (compact record)", r.Archived.KeysPerOrder, r.Archived.BytesPerOrder, r.Archived.Orders)
	fmt.Fprintf(w, "%-31s %.1f orders/s over %.1f s (%d rows), machine CPU %.2f ms per archived order\n", "archiver", r.Throughput, r.ArchivalSeconds, r.ArchivedOrders, r.CPUMsPerOrder)
	for _, g := range r.Goals {
		fmt.Fprintf(w, "  goal                          %s\n", g)
	}
}
