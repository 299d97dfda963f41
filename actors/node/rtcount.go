package node

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Snapshot keys of RoundTrips that are not command names.
const (
	// RoundTripsTotal counts round trips: one per single command, one per
	// pipeline or transaction however many commands it carries.
	RoundTripsTotal = "total"
	// RoundTripsCommands counts commands, pipelined ones included.
	RoundTripsCommands = "commands"
	// RoundTripsPipelines counts the round trips that were pipelines.
	RoundTripsPipelines = "pipelines"
	// RoundTripsConnSetup counts connection handshakes (HELLO, AUTH,
	// SELECT, CLIENT SETINFO), which go-redis sends through the hooks on
	// every new pooled connection. They are a cost of the pool, not of
	// the calls, so they are kept out of the other counters.
	RoundTripsConnSetup = "connSetup"
)

// setupCommands are the commands go-redis sends when it opens a
// connection; the stores never send them themselves.
var setupCommands = map[string]bool{"hello": true, "auth": true, "select": true, "client": true}

func isSetup(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if !setupCommands[strings.ToLower(c.Name())] {
			return false
		}
	}
	return len(cmds) > 0
}

// RoundTrips is a go-redis hook that counts client-side round trips and
// commands by name, so a process can report what one order costs in Redis
// calls as its client sees them. Install it through StoreOptions.Hook. It
// is safe for concurrent use; its zero value is ready.
//
// A go-redis Script.Run that finds no cached script sends EVALSHA and then
// EVAL: both are counted, as both crossed the network.
type RoundTrips struct {
	total     atomic.Int64
	commands  atomic.Int64
	pipelines atomic.Int64
	connSetup atomic.Int64
	byName    sync.Map // lower-case command name → *atomic.Int64
}

var _ redis.Hook = (*RoundTrips)(nil)

// DialHook implements redis.Hook; dials are connections, not round trips.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook: one round trip per command, counted
// whether or not it succeeds.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isSetup([]redis.Cmder{cmd}) {
			r.connSetup.Add(1)
			return next(ctx, cmd)
		}
		r.total.Add(1)
		r.commands.Add(1)
		r.name(cmd.Name()).Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: one round trip per pipeline,
// each of its commands counted by name.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isSetup(cmds) {
			r.connSetup.Add(1)
			return next(ctx, cmds)
		}
		r.total.Add(1)
		r.pipelines.Add(1)
		r.commands.Add(int64(len(cmds)))
		for _, c := range cmds {
			r.name(c.Name()).Add(1)
		}
		return next(ctx, cmds)
	}
}

func (r *RoundTrips) name(n string) *atomic.Int64 {
	n = strings.ToLower(n)
	if c, ok := r.byName.Load(n); ok {
		return c.(*atomic.Int64)
	}
	c, _ := r.byName.LoadOrStore(n, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// Snapshot returns the counters: RoundTripsTotal, RoundTripsCommands,
// RoundTripsPipelines, RoundTripsConnSetup, and one entry per lower-case command name (no
// command is named like those three keys). Counters read one by one, so
// a snapshot taken under load may be off by the calls in flight.
func (r *RoundTrips) Snapshot() map[string]int64 {
	out := map[string]int64{
		RoundTripsTotal:     r.total.Load(),
		RoundTripsCommands:  r.commands.Load(),
		RoundTripsPipelines: r.pipelines.Load(),
		RoundTripsConnSetup: r.connSetup.Load(),
	}
	r.byName.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}
