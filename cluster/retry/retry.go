// Package retry owns the project's one backoff policy: how long a loop
// that failed waits before it tries again. It is cenkalti/backoff/v5's
// exponential backoff, doubling per attempt, with full jitter, so that
// many callers that failed together (every grain of a member when its
// Redis restarts, every API behind one lost owner) do not retry
// together.
//
// Loops use the backoff.BackOff it returns directly (NextBackOff, Reset)
// or through backoff.Retry. A timing that is behaviour rather than a
// retry policy (the self-fence lease, the gone record's probe, the
// grain's retry bound) is not a backoff and stays with its owner.
//
// It is a leaf: it imports the backoff library and the standard library
// only, and must not import any package of this module.
package retry

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff returns a new exponential backoff with full jitter: the n-th
// wait (from 0, and again from 0 after Reset) is uniform in
// [0, min(ceiling, first·2ⁿ)]. It never returns backoff.Stop; a caller
// bounds its attempts with its context, a try count or
// backoff.WithMaxElapsedTime. Like every BackOff it is not safe for
// concurrent use: one per loop.
func Backoff(first, ceiling time.Duration) *backoff.ExponentialBackOff {
	// The library draws the wait uniformly from interval·[1-f, 1+f]; with
	// f = 1 over half the bound, that is [0, bound].
	return &backoff.ExponentialBackOff{
		InitialInterval:     first / 2,
		RandomizationFactor: 1,
		Multiplier:          2,
		MaxInterval:         ceiling / 2,
	}
}
