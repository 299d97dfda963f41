package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// Each store's calls are counted under its own label while every store of
// one URL still shares that URL's connection pool; the readiness PING is
// no store's work.
func TestStoreHooksLabelEachStoreOnOnePool(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := telemetry.NewRegistry()
	s, err := OpenStores(ctx, RedisURLs{Default: srv.URL()}, StoreOptions{StoreHook: reg.RedisHook})
	require.NoError(t, err)
	defer s.Close()
	require.Len(t, s.clients, 1)
	require.Empty(t, s.own)
	require.NotNil(t, s.Commits, "events and read model share one Redis")

	sum := func(name, store string) float64 {
		v, err := telemetry.Sum(reg.Gatherer(), name, map[string]string{telemetry.LabelStore: store})
		require.NoError(t, err)
		return v
	}
	require.Zero(t, sum(telemetry.MetricRedisRoundTrips, ""), "OpenStores' PING is counted under no store")

	_, _, err = s.ReadModel.Get(ctx, "ord-none")
	require.Error(t, err)
	require.Equal(t, 1.0, sum(telemetry.MetricRedisRoundTrips, StoreReadModel))
	v, err := telemetry.Sum(reg.Gatherer(), telemetry.MetricRedisCommands, map[string]string{telemetry.LabelStore: StoreReadModel, "command": "hmget"})
	require.NoError(t, err)
	require.Equal(t, 1.0, v)
	_, err = s.Relocation.LoadFirst(ctx, "ord-none")
	require.Error(t, err)
	require.Equal(t, 1.0, sum(telemetry.MetricRedisRoundTrips, StoreRelocation))
	require.Equal(t, 1.0, sum(telemetry.MetricRedisRoundTrips, StoreEvents), "a missing record is looked for in the event store's sealed record (an archived order's final state)")
	for _, st := range []string{StoreCommerce, StoreLocation} {
		require.Zero(t, sum(telemetry.MetricRedisRoundTrips, st), st)
	}
	// Sequential calls from two stores reused one connection.
	require.Equal(t, uint32(1), s.clients[0].client.PoolStats().TotalConns)
}

// A URL whose read and write timeouts differ cannot be cloned with one
// timeout: its stores get clients of their own, still counted by store
// and closed with the rest.
func TestStoreHooksOnAURLWithTwoTimeouts(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := telemetry.NewRegistry()
	s, err := OpenStores(ctx, RedisURLs{Default: srv.URL() + "&read_timeout=2s&write_timeout=3s"}, StoreOptions{StoreHook: reg.RedisHook})
	require.NoError(t, err)
	require.Len(t, s.own, 5)
	_, _, err = s.ReadModel.Get(ctx, "ord-none")
	require.Error(t, err)
	v, err := telemetry.Sum(reg.Gatherer(), telemetry.MetricRedisRoundTrips, map[string]string{telemetry.LabelStore: StoreReadModel})
	require.NoError(t, err)
	require.Equal(t, 1.0, v)
	s.Close()
	for _, c := range s.own {
		require.Error(t, c.Ping(ctx).Err(), "closed with the stores")
	}
}

// Store clients speak RESP2 unless their URL asks for RESP3: under RESP3
// every command first peeks at the socket for push notifications the
// stores never use. A store round trip works either way.
func TestStoreClientsSpeakRESP2UnlessTheURLSaysOtherwise(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		url  string
		want int
	}{{srv.URL(), 2}, {withQuery(srv.URL(), "protocol=3"), 3}} {
		c, err := redisurl.NewClient(tc.url, redisurl.Options{})
		require.NoError(t, err)
		require.Equal(t, tc.want, c.(*redis.Client).Options().Protocol, tc.url)
		require.NoError(t, c.Ping(context.Background()).Err(), tc.url)
		require.NoError(t, c.Close())
	}
	cc, err := redisurl.NewClient("redis+cluster://127.0.0.1:7000", redisurl.Options{})
	require.NoError(t, err)
	require.Equal(t, 2, cc.(*redis.ClusterClient).Options().Protocol)
	require.NoError(t, cc.Close())
}

func withQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}
