package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every wait is within its attempt's bound, the bound doubles up to max,
// the waits are spread (full jitter, not a fixed step), and Reset starts
// over.
func TestBackoffIsExponentialWithFullJitter(t *testing.T) {
	const first, ceiling = 10 * time.Millisecond, 160 * time.Millisecond
	bounds := []time.Duration{10, 20, 40, 80, 160, 160, 160}
	seen := make([][]time.Duration, len(bounds))
	for range 2000 {
		b := Backoff(first, ceiling)
		for i, bound := range bounds {
			d := b.NextBackOff()
			// The library's interval is [lo, hi+1ns]: one nanosecond of slack.
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, bound*time.Millisecond+time.Nanosecond, "attempt %d", i)
			seen[i] = append(seen[i], d)
		}
		b.Reset()
		require.LessOrEqual(t, b.NextBackOff(), first+time.Nanosecond, "Reset starts over")
	}
	for i, bound := range bounds {
		lo, hi := bound*time.Millisecond, time.Duration(0)
		for _, d := range seen[i] {
			lo, hi = min(lo, d), max(hi, d)
		}
		b := bound * time.Millisecond
		require.Less(t, lo, b/10, "attempt %d: no wait near 0 in 2000 draws", i)
		require.Greater(t, hi, b*9/10, "attempt %d: no wait near its bound in 2000 draws", i)
	}
}
