package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// A restart keeps the address and the data, and the old process is gone.
func TestRestartableKeepsAddressAndData(t *testing.T) {
	r := redistest.StartRestartable(t)
	first := r.Server()
	c := first.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	r.Restart()
	second := r.Server()
	require.NotEqual(t, first.PID(), second.PID())
	require.Equal(t, first.Addr(), second.Addr())
	require.False(t, processAlive(first.PID()), "pid %d still running", first.PID())
	// The same client reconnects to the same address.
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
}
