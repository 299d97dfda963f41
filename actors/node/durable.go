package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnsafeStore: a store's Redis master would lose acknowledged writes
// by its own configuration: it runs without the append-only file, fsyncs
// it only when the kernel likes (appendfsync no), or evicts keys under
// memory pressure. An order system must not acknowledge a charge on it.
var ErrUnsafeStore = errors.New("node: store is not durable")

// durabilityReport is what one master says about itself.
type durabilityReport struct {
	aof         bool
	policy      string
	appendFsync string // "" when CONFIG GET is refused
}

// unsafe names each setting of r that loses acknowledged writes.
//
// The rule: the AOF must be on and the eviction policy noeviction
// (INFO persistence and INFO memory, which every managed Redis answers).
// appendfsync always and everysec pass; everysec may lose up to a second
// of writes on a machine crash, which the replicas and WAIT of the HA
// topologies cover. appendfsync no is refused when CONFIG GET answers;
// many managed services disable CONFIG, and then the check rests on the
// two INFO fields alone.
func (r durabilityReport) unsafe() []string {
	var out []string
	if !r.aof {
		out = append(out, "the append-only file is off (appendonly no)")
	}
	if r.policy != "noeviction" {
		out = append(out, fmt.Sprintf("maxmemory-policy is %q, not noeviction: keys may be evicted", r.policy))
	}
	if r.appendFsync == "no" {
		out = append(out, "appendfsync is no: the kernel decides when acknowledged writes reach the disk")
	}
	return out
}

// CheckDurable asks every master of every store's Redis whether it keeps
// acknowledged writes (durabilityReport.unsafe states the rule). It
// answers nil when all do, an error wrapping ErrUnsafeStore that names
// each master and setting when any does not, and an error wrapping
// ErrStoresUnavailable when a master could not be asked. A Sentinel or
// cluster client is asked through its current masters, so the check
// called again after a failover judges the promoted replica.
func (s *Stores) CheckDurable(ctx context.Context) error {
	errs := make([]error, len(s.clients))
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := checkDurable(ctx, c.client); err != nil {
				errs[i] = fmt.Errorf("redis %s: %w", c.name, err)
			}
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrStoresUnavailable):
		// Unsafe masters, if any, are named too; the caller asks again
		// once every master answers.
		return err
	default:
		return fmt.Errorf("%w: %w", ErrUnsafeStore, err)
	}
}

func checkDurable(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var errs []error
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := checkMaster(ctx, m); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("master %s: %w", m.Options().Addr, err))
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStoresUnavailable, err)
		}
		return errors.Join(errs...)
	}
	return checkMaster(ctx, c)
}

// checkMaster asks one server. Its error is either ErrStoresUnavailable
// (it did not answer) or a plain list of unsafe settings.
func checkMaster(ctx context.Context, c redis.Cmdable) error {
	persistence, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return fmt.Errorf("%w: INFO persistence: %w", ErrStoresUnavailable, err)
	}
	memory, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return fmt.Errorf("%w: INFO memory: %w", ErrStoresUnavailable, err)
	}
	r := durabilityReport{
		aof:    infoField(persistence, "aof_enabled") == "1",
		policy: infoField(memory, "maxmemory_policy"),
	}
	// A server's refusal (CONFIG disabled or renamed) leaves appendfsync
	// unknown, not unsafe; a failure to answer is an outage.
	v, err := c.ConfigGet(ctx, "appendfsync").Result()
	var refused redis.Error
	switch {
	case err == nil:
		r.appendFsync = v["appendfsync"]
	case !errors.As(err, &refused):
		return fmt.Errorf("%w: CONFIG GET appendfsync: %w", ErrStoresUnavailable, err)
	}
	if bad := r.unsafe(); len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// infoField is one "name:value" line of an INFO reply; "" when absent.
func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v
		}
	}
	return ""
}

// DurableWatchConfig configures WatchDurable.
type DurableWatchConfig struct {
	// Interval between checks; default 10 s. A failover that promotes an
	// unsafe replica is seen within about one interval.
	Interval time.Duration
	// CheckTimeout bounds one check; default 2 s.
	CheckTimeout time.Duration
	// Logger receives one line per change of verdict; default
	// slog.Default().
	Logger *slog.Logger
}

// DurableWatch is the latest verdict of a running WatchDurable.
type DurableWatch struct {
	last atomic.Pointer[error]
	done chan struct{}
}

// Err is the latest verdict: nil while every master is durable, an error
// wrapping ErrUnsafeStore once one is not. A master that does not answer
// keeps the previous verdict: the store's own readiness condition reports
// the outage.
func (w *DurableWatch) Err() error {
	if p := w.last.Load(); p != nil {
		return *p
	}
	return nil
}

// Done is closed once the watch has stopped (its ctx ended).
func (w *DurableWatch) Done() <-chan struct{} { return w.done }

// WatchDurable checks the stores again every Interval until ctx ends, so
// that a failover onto a master without the AOF, or a CONFIG SET at run
// time, does not go unnoticed. It does not stop the process: refusing to
// serve is readiness' job (Readiness.WatchDurable turns /readyz unready),
// and an exit would drop the process's owners, which the spec leaves to
// an operator. The first verdict is WaitStores' check: the watch starts
// durable.
func WatchDurable(ctx context.Context, s *Stores, cfg DurableWatchConfig) *DurableWatch {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &DurableWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
			err := s.CheckDurable(cctx)
			cancel()
			if err != nil && !errors.Is(err, ErrUnsafeStore) {
				continue
			}
			was := w.Err()
			w.last.Store(&err)
			switch {
			case err != nil && was == nil:
				cfg.Logger.Error("a store is no longer durable: unready until it is", slog.Any("error", err))
			case err == nil && was != nil:
				cfg.Logger.Info("every store is durable again")
			}
		}
	}()
	return w
}
