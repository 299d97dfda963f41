package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The schedule is the seed's alone: a failing soak reruns with the same
// faults at the same offsets, and a short run still sees every kind.
func TestScheduleIsTheSeeds(t *testing.T) {
	a, b := schedule(42, 10*time.Minute), schedule(42, 10*time.Minute)
	require.Equal(t, a, b)
	require.NotEqual(t, a, schedule(43, 10*time.Minute))

	short := schedule(7, 60*time.Second)
	kinds := map[string]bool{}
	for _, f := range short {
		kinds[f.Kind] = true
		require.Less(t, f.At, 57*time.Second)
		if f.Kind == faultWorkflowPause {
			require.GreaterOrEqual(t, f.Hold, time.Second)
			require.LessOrEqual(t, f.Hold, 5*time.Second)
		}
	}
	require.Len(t, kinds, len(faultKinds), "a 60 s schedule covers every fault kind: %v", short)
}
