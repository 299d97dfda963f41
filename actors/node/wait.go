package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
)

// WaitConfig configures WaitStores. The zero value is usable.
type WaitConfig struct {
	// Initial bounds the pause after the first failed check; default
	// 100 ms. Each further bound doubles, up to Max (default 5 s), and
	// each pause is drawn below its bound (cluster/retry): a Redis that
	// restarts or loads its data for a second is seen within a fraction of
	// one, a long outage costs about one PING every Max, and the members
	// of a fleet that lost one Redis do not ping it in step.
	Initial, Max time.Duration
	// CheckTimeout bounds one round of PINGs; default 2 s.
	CheckTimeout time.Duration
	// Logger receives one line per failed check; default slog.Default().
	Logger *slog.Logger
	// RequireDurable: once the stores answer, every master must also
	// keep acknowledged writes (Stores.CheckDurable); one that does not
	// ends the wait with an error wrapping ErrUnsafeStore, since no
	// amount of waiting fixes a configuration.
	RequireDurable bool
}

func (c WaitConfig) withDefaults() WaitConfig {
	if c.Initial <= 0 {
		c.Initial = 100 * time.Millisecond
	}
	if c.Max <= 0 {
		c.Max = 5 * time.Second
	}
	if c.Max < c.Initial {
		c.Max = c.Initial
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// WaitStores pings the stores until every one answers, pausing with capped
// exponential backoff (cluster/retry) between rounds, and logs each failed round. There is
// no attempt limit: a process started before its Redis (or while Redis
// loads its data set) must come up once Redis does, not give up and leave
// the restart to a supervisor. Only ctx ends the wait; the error then
// wraps ctx's error and the last ErrStoresUnavailable. With
// RequireDurable, an unsafe master ends it at once (ErrUnsafeStore).
func WaitStores(ctx context.Context, s *Stores, cfg WaitConfig) error {
	cfg = cfg.withDefaults()
	start := time.Now()
	wait := retry.Backoff(cfg.Initial, cfg.Max)
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
		err := s.Ping(pctx)
		if err == nil && cfg.RequireDurable {
			err = s.CheckDurable(pctx)
		}
		cancel()
		if errors.Is(err, ErrUnsafeStore) {
			return fmt.Errorf("refusing to start: %w", err)
		}
		if err == nil {
			cfg.Logger.Info("stores answer", slog.Int("attempts", attempt), slog.Duration("waited", time.Since(start).Round(time.Millisecond)))
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the stores: %w (last check: %w)", ctx.Err(), err)
		}
		pause := wait.NextBackOff()
		cfg.Logger.Warn("stores do not answer yet; waiting", slog.Int("attempt", attempt),
			slog.Duration("retryIn", pause), slog.Duration("waited", time.Since(start).Round(time.Millisecond)), slog.Any("error", err))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the stores: %w (last check: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
