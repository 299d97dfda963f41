package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Every client honours its caller's deadline and bounds its reconnects,
// whatever the URL says about the rest; a URL's own bounds win.
func TestRedisClientsAreBounded(t *testing.T) {
	c, err := NewRedisClient("redis://127.0.0.1:1/0", 0)
	require.NoError(t, err)
	defer c.Close()
	o := c.(*redis.Client).Options()
	require.True(t, o.ContextTimeoutEnabled)
	require.Equal(t, clientMaxRetries, o.MaxRetries)
	require.Equal(t, clientDialTimeout, o.DialTimeout)
	require.Equal(t, clientMaxRetryBackoff, o.MaxRetryBackoff)

	c, err = NewRedisClient("redis://127.0.0.1:1/0?dial_timeout=3s&max_retries=5", 0)
	require.NoError(t, err)
	defer c.Close()
	o = c.(*redis.Client).Options()
	require.Equal(t, 3*time.Second, o.DialTimeout)
	require.Equal(t, 5, o.MaxRetries)

	cc, err := NewRedisClient("redis+cluster://127.0.0.1:1", 0)
	require.NoError(t, err)
	defer cc.Close()
	require.True(t, cc.(*redis.ClusterClient).Options().ContextTimeoutEnabled)

	p, err := NewProbeClient("redis://127.0.0.1:1/0")
	require.NoError(t, err)
	defer p.Close()
	po := p.(*redis.Client).Options()
	require.True(t, po.ContextTimeoutEnabled)
	require.Equal(t, probePoolSize, po.PoolSize)
	require.Equal(t, 0, po.MaxRetries, "the probe loop is the probe's retry")
}

// A server that accepts and never answers (a frozen Redis) holds a call
// no longer than the caller's deadline.
func TestRedisClientHonoursTheDeadlineOfASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for _, mk := range []func(string) (redis.UniversalClient, error){
		func(u string) (redis.UniversalClient, error) { return NewRedisClient(u, 0) },
		NewProbeClient,
	} {
		c, err := mk("redis://" + ln.Addr().String() + "/0")
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		began := time.Now()
		err = c.Get(ctx, "k").Err()
		took := time.Since(began)
		cancel()
		_ = c.Close()
		require.Error(t, err)
		t.Logf("a silent server answered %v after %s", err, took)
		require.Less(t, took, time.Second, "the call outlived its 200ms deadline")
	}
}
