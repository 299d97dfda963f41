package placement

import (
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// A call that stops waiting before its reply (its caller's deadline, an
// owner seen leaving) ends its future, so the goroutine that waited on it
// ends with the call instead of living on until the future's own timeout:
// calls given up under overload do not pile up goroutines.
func TestEndedFuturesLeaveNoWaitingGoroutines(t *testing.T) {
	sys := actor.NewActorSystem()
	before := runtime.NumGoroutine()
	const calls = 1000
	for range calls {
		f := actor.NewFuture(sys, time.Hour)
		done := awaitFuture(f)
		endFuture(sys, f)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("an ended future did not release its waiter")
		}
		// Ending a resolved future again is a no-op.
		endFuture(sys, f)
	}
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+10 }, 5*time.Second, 10*time.Millisecond,
		"%d goroutines before %d given-up calls, %d after", before, calls, runtime.NumGoroutine())
}
