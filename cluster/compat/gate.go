package compat

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// GateConfig configures a workflow member's Gate.
type GateConfig struct {
	Store Store
	// Own is the newest schema this build writes and reads
	// (workflow.SchemaVersion).
	Own int
	// Live returns the ids of the live workflow members as this member
	// sees them; it must not block. Used only with AutoRaise.
	Live func() []string
	// AutoRaise raises the level by itself, recorded as by Node, once
	// every live workflow member advertises a newer schema than the
	// level. Off, only an operator raises it.
	AutoRaise bool
	// Node is this member's node name, the raiser an automatic raise
	// records.
	Node string
	// Interval is how often the level is read again; default 2 s. A
	// raise reaches every writer within it; until then a writer stamps
	// the older level, which every member reads.
	Interval time.Duration
	// Now is the clock an automatic raise is recorded at; default
	// time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Gate is a workflow member's view of the compatibility level: what its
// writes may stamp (Writes), read again every Interval. It starts at
// location.BaseSchema, which every build reads, until the first read
// lands, so a member whose store is down at start-up never writes a
// schema the level has not allowed. The level only rises, so a stale
// view only holds a writer back, never ahead.
type Gate struct {
	cfg   GateConfig
	level atomic.Int64
}

// NewGate returns a Gate at location.BaseSchema; Run keeps it current.
func NewGate(cfg GateConfig) *Gate {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gate{cfg: cfg}
	g.level.Store(location.BaseSchema)
	return g
}

// Level is the level as last read.
func (g *Gate) Level() int { return int(g.level.Load()) }

// Writes is the schema a write stamps now: the lower of the level and
// this build's own schema.
func (g *Gate) Writes() int { return min(g.Level(), g.cfg.Own) }

// Run reads the level every Interval until ctx ends, raising it first
// when AutoRaise allows.
func (g *Gate) Run(ctx context.Context) {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		if err := g.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.cfg.Logger.Warn("reading the compatibility level failed; writes keep the level last read",
				slog.Int(LevelKey, g.Level()), slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh is one pass of Run: raise the level by itself if configured and
// every live workflow member reads a newer schema, then read it.
func (g *Gate) Refresh(ctx context.Context) error {
	if g.cfg.AutoRaise && g.cfg.Live != nil {
		if err := g.autoRaise(ctx); err != nil {
			return err
		}
	}
	l, err := g.cfg.Store.SchemaLevel(ctx)
	if err != nil {
		return err
	}
	if before := g.level.Swap(int64(l.Level)); before != int64(l.Level) {
		// What a member stamps changes here, so operators (and the
		// upgrade proof) see when each writer took a raise up.
		g.cfg.Logger.Info(LevelReadMsg, slog.Int(LevelKey, l.Level), slog.Int64("before", before),
			slog.Int("writes", g.Writes()))
	}
	return nil
}

// LevelReadMsg is the log message of a member whose view of the level
// changed: its level (LevelKey), the one before and the schema it writes
// now.
const LevelReadMsg = "compatibility level read"

// LevelKey is the level's attribute in the gate's log records: not
// "level", which is the record's own severity.
const LevelKey = "compatibilityLevel"

// autoRaise raises the level to the newest schema every live workflow
// member reads, if that is above the level. Every member with AutoRaise
// may try at once; the store keeps one raise, and the others find the
// level already there.
func (g *Gate) autoRaise(ctx context.Context) error {
	live := g.cfg.Live()
	if len(live) == 0 {
		return nil
	}
	_, readable, err := members(ctx, g.cfg.Store, live)
	if err != nil || readable <= g.Level() {
		return err
	}
	l, raised, err := Raise(ctx, g.cfg.Store, live, readable, g.cfg.Node, true, g.cfg.Now())
	if errors.Is(err, location.ErrSchemaLevelLower) {
		// The level this member last read is behind: it is already above
		// what the members read, and the read that follows catches up.
		return nil
	}
	if err != nil {
		return err
	}
	if raised {
		g.cfg.Logger.Info("compatibility level raised by itself: every live workflow member reads it",
			slog.Int(LevelKey, l.Level), slog.Int("from", l.From), slog.Int("members", len(live)))
	}
	return nil
}
