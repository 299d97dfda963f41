package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts a client's round trips: one
// per command sent alone, one per pipeline or transaction. Store tests
// add it (client.AddHook) to prove how many round trips an operation
// takes; safe for concurrent use.
type RoundTrips struct{ n atomic.Int64 }

// Count is the number of round trips so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}
