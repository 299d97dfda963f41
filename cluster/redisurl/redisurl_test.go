package redisurl

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Every form parses into the options it states, and nothing else.
func TestParseEveryForm(t *testing.T) {
	for _, tc := range []struct {
		url   string
		kind  Kind
		check func(t *testing.T, p URL)
	}{
		{"redis://127.0.0.1:6390/2", Server, func(t *testing.T, p URL) {
			require.Equal(t, "127.0.0.1:6390", p.Server.Addr)
			require.Equal(t, 2, p.Server.DB)
			require.Nil(t, p.Server.TLSConfig)
		}},
		{"redis://app:secret@h:1/0?dial_timeout=2s&pool_size=7&protocol=3", Server, func(t *testing.T, p URL) {
			require.Equal(t, "app", p.Server.Username)
			require.Equal(t, "secret", p.Server.Password)
			require.Equal(t, 2*time.Second, p.Server.DialTimeout)
			require.Equal(t, 7, p.Server.PoolSize)
			require.Equal(t, 3, p.Server.Protocol)
		}},
		{"rediss://h:6380", Server, func(t *testing.T, p URL) {
			require.NotNil(t, p.Server.TLSConfig)
		}},
		{"unix:///run/redis.sock?db=3", Server, func(t *testing.T, p URL) {
			require.Equal(t, "unix", p.Server.Network)
			require.Equal(t, "/run/redis.sock", p.Server.Addr)
			require.Equal(t, 3, p.Server.DB)
		}},
		{"redis+cluster://127.0.0.1:7000", Cluster, func(t *testing.T, p URL) {
			require.Equal(t, []string{"127.0.0.1:7000"}, p.Cluster.Addrs)
		}},
		{"redis+cluster://u:p@127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002&pool_size=3&dial_timeout=2s", Cluster, func(t *testing.T, p URL) {
			require.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}, p.Cluster.Addrs)
			require.Equal(t, "u", p.Cluster.Username)
			require.Equal(t, "p", p.Cluster.Password)
			require.Equal(t, 3, p.Cluster.PoolSize)
			require.Equal(t, 2*time.Second, p.Cluster.DialTimeout)
			require.Nil(t, p.Cluster.TLSConfig)
		}},
		{"rediss+cluster://h:7000", Cluster, func(t *testing.T, p URL) {
			require.NotNil(t, p.Cluster.TLSConfig)
		}},
		{"redis+sentinel://app:secret@10.0.0.1:26379,10.0.0.2:26380,[::1]:26381/3?master_name=mall&sentinel_password=sp&sentinel_username=su&dial_timeout=2s", Sentinel, func(t *testing.T, p URL) {
			o := p.Sentinel
			require.Equal(t, "mall", o.MasterName)
			require.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26380", "[::1]:26381"}, o.SentinelAddrs)
			require.Equal(t, 3, o.DB)
			require.Equal(t, "app", o.Username, "the user info is the data nodes'")
			require.Equal(t, "secret", o.Password)
			require.Equal(t, "su", o.SentinelUsername)
			require.Equal(t, "sp", o.SentinelPassword)
			require.Equal(t, 2*time.Second, o.DialTimeout)
			require.Nil(t, o.TLSConfig)
		}},
		{"rediss+sentinel://h:1?master_name=m", Sentinel, func(t *testing.T, p URL) {
			require.Equal(t, []string{"h:1"}, p.Sentinel.SentinelAddrs)
			require.NotNil(t, p.Sentinel.TLSConfig)
			require.Equal(t, 0, p.Sentinel.DB)
			require.Empty(t, p.Sentinel.Password)
		}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			require.Equal(t, tc.kind, KindOf(tc.url))
			p, err := Parse(tc.url)
			require.NoError(t, err)
			require.Equal(t, tc.kind, p.Kind)
			require.Equal(t, tc.kind == Server, p.Server != nil)
			require.Equal(t, tc.kind == Cluster, p.Cluster != nil)
			require.Equal(t, tc.kind == Sentinel, p.Sentinel != nil)
			tc.check(t, p)
		})
	}
}

// A malformed URL is an ErrURL that names the part at fault and never
// shows a password.
func TestParseRejectsMalformedURLs(t *testing.T) {
	for _, tc := range []struct{ url, part string }{
		{"", "scheme"},
		{"127.0.0.1:6390", "scheme"},
		{"http://h:1/0", "scheme"},
		{"redis+bogus://h:1", "scheme"},
		{"redis://:pw@h:1/x", "invalid database number"},
		{"redis://:pw@h:1/0?bogus=1", "unexpected option: bogus"},
		{"redis://h:1/0?dial_timeout=soon", "dial_timeout"},
		{"redis://h:1/0/1", "invalid URL path"},
		{"unix://?db=0", "empty unix socket path"},
		{"redis+cluster://", "host"},
		{"redis+cluster://:pw@/?addr=h:2", "host"},
		{"redis+cluster://h:7000?bogus=1", "unexpected option: bogus"},
		{"redis+cluster://h:7000?pool_size=x", "pool_size"},
		{"redis+sentinel://h1:1,h2:2/0", "master_name"},
		{"redis+sentinel://h1:1/0?master_name=", "master_name"},
		{"redis+sentinel:///0?master_name=m", "host"},
		{"redis+sentinel://h1:1,/0?master_name=m", "host"},
		{"redis+sentinel://h1/0?master_name=m", "host"},
		{"redis+sentinel://:pw@h1:1/0?master_name=m&bogus=1", "unexpected option: bogus"},
		{"redis+sentinel://h1:1/x?master_name=m", "invalid database number"},
		{"redis+sentinel://h1:1/0?master_name=m&addr=h2:2", "addr"},
		{"redis+sentinel://h1:1/0?master_name=m&password=pw", "password: belongs in the URL's hosts or user info"},
		{"redis+sentinel://h1:1/0?master_name=m&dial_timeout=x", "dial_timeout"},
		{"redis+sentinel://h1:1/0?master_name=m&x=%zz", "query"},
		{"redis+sentinel://a%zz:pw@h1:1/0?master_name=m", "user info"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := Parse(tc.url)
			require.ErrorIs(t, err, ErrURL)
			require.ErrorContains(t, err, tc.part)
			require.NotContains(t, err.Error(), "pw", "a password in an error")
			c, err := NewClient(tc.url, Options{})
			require.ErrorIs(t, err, ErrURL)
			require.Nil(t, c)
		})
	}
}

// Every client honours its caller's deadline, bounds its reconnects and
// speaks RESP2, whatever the URL says about the rest; a URL's own bounds
// win. The probe's client is one attempt per call on a pool of its own.
func TestClientsAreBounded(t *testing.T) {
	type opts struct {
		ctxTimeout             bool
		dial, read, write      time.Duration
		retries, pool, proto   int
		minBackoff, maxBackoff time.Duration
	}
	of := func(c redis.UniversalClient) opts {
		switch c := c.(type) {
		case *redis.Client:
			o := c.Options()
			return opts{o.ContextTimeoutEnabled, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.PoolSize, o.Protocol, o.MinRetryBackoff, o.MaxRetryBackoff}
		case *redis.ClusterClient:
			o := c.Options()
			require.Equal(t, clusterStateReload, o.ClusterStateReloadInterval)
			// The cluster client hands -1 ("no retry") to its node
			// clients, which read it as a single client reads it: 0.
			retries := max(o.MaxRetries, 0)
			return opts{o.ContextTimeoutEnabled, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, retries, o.PoolSize, o.Protocol, o.MinRetryBackoff, o.MaxRetryBackoff}
		}
		t.Fatalf("%T", c)
		return opts{}
	}
	bounded := opts{true, dialTimeout, ioTimeout, ioTimeout, maxRetries, 7, defaultProtocol, minRetryBackoff, maxRetryBackoff}
	probe := opts{true, probeDialTimeout, probeIOTimeout, probeIOTimeout, 0, probePoolSize, defaultProtocol, minRetryBackoff, maxRetryBackoff}
	for _, u := range []string{
		"redis://127.0.0.1:1/0",
		"unix:///nonexistent.sock",
		"redis+cluster://127.0.0.1:1?addr=127.0.0.1:2",
		"redis+sentinel://127.0.0.1:1,127.0.0.1:2/0?master_name=m",
	} {
		t.Run(u, func(t *testing.T) {
			c, err := NewClient(u, Options{PoolSize: 7})
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, bounded, of(c))
			if KindOf(u) == Sentinel {
				require.True(t, IsFailoverClient(c.(*redis.Client)), "a sentinel URL gives a failover client")
			}

			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			own, err := NewClient(u+sep+"dial_timeout=3s&max_retries=5&read_timeout=2s&protocol=3&pool_size=4", Options{})
			require.NoError(t, err)
			defer own.Close()
			want := bounded
			want.dial, want.retries, want.read, want.write, want.proto, want.pool = 3*time.Second, 5, 2*time.Second, 2*time.Second, 3, 4
			require.Equal(t, want, of(own), "a URL's own bounds win")

			p, err := NewClient(u, Options{Probe: true, PoolSize: 50})
			require.NoError(t, err)
			defer p.Close()
			require.Equal(t, probe, of(p), "the probe loop is the probe's retry")
		})
	}
}

// Store names end up in logs and probe replies: no password of any kind
// survives redaction.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://app:secret@h:1/0":                      "redis://app:xxxxx@h:1/0",
		"redis://h:1/0?password=secret&pool_size=2":     "redis://h:1/0?password=xxxxx&pool_size=2",
		"redis+cluster://:secret@h:1?addr=h:2":          "redis+cluster://:xxxxx@h:1?addr=h:2",
		"unix:///run/r.sock?db=1":                       "unix:///run/r.sock?db=1",
		"redis+sentinel://h:1?master_name=m":            "redis+sentinel://h:1?master_name=m",
		"rediss+sentinel://:secret@h:1/0?master_name=m": "rediss+sentinel://:xxxxx@h:1/0?master_name=m",
		"redis+sentinel://app:secret@10.0.0.1:26379,[::1]:26381/2?master_name=mall&sentinel_password=secret": "redis+sentinel://app:xxxxx@10.0.0.1:26379,[::1]:26381/2?master_name=mall&sentinel_password=xxxxx",
		"redis://a%zz:secret@h:1": "(unparsable URL)",
	} {
		require.Equal(t, want, Redact(in), in)
	}
}

func TestReplicationSettings(t *testing.T) {
	for _, bad := range []Replication{{Replicas: -1}, {Replicas: 1, Timeout: -time.Second}, {Replicas: 1, Timeout: ioTimeout}} {
		require.ErrorIs(t, bad.Validate(), ErrBadReplication, "%+v", bad)
	}
	require.NoError(t, Replication{}.Validate())
	require.NoError(t, WaitForReplicas(Replication{}, nil), "no replicas asked: nothing to hook")
	err := WaitForReplicas(Replication{Replicas: 1}, redis.NewRing(&redis.RingOptions{}))
	require.True(t, errors.Is(err, ErrBadReplication), "%v", err)
}

// A server that accepts and never answers (a frozen Redis) holds a call
// no longer than the caller's deadline, on a store's client and on a
// probe's.
func TestClientsHonourTheDeadlineOfASilentServer(t *testing.T) {
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
	for _, o := range []Options{{}, {Probe: true}} {
		c, err := NewClient("redis://"+ln.Addr().String()+"/0", o)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		began := time.Now()
		err = c.Get(ctx, "k").Err()
		took := time.Since(began)
		cancel()
		_ = c.Close()
		require.Error(t, err)
		t.Logf("%+v: a silent server answered %v after %s", o, err, took)
		require.Less(t, took, time.Second, "the call outlived its 200ms deadline")
	}
}

// Deployment tells keyspaces apart by kind, TLS, hosts and database, and
// ignores credentials and client options.
func TestDeploymentTellsKeyspacesApart(t *testing.T) {
	dep := func(u string) string {
		t.Helper()
		p, err := Parse(u)
		require.NoError(t, err, u)
		return p.Deployment()
	}
	same := [][2]string{
		{"redis://127.0.0.1:6379", "redis://:secret@127.0.0.1:6379/0?dial_timeout=3s"},
		{"redis://127.0.0.1:6379/2", "redis://user:pw@127.0.0.1:6379/2?pool_size=5"},
		{"unix:///tmp/r.sock", "unix://:pw@/tmp/r.sock?db=0"},
		{"redis+cluster://10.0.0.1:7000?addr=10.0.0.2:7000", "redis+cluster://:pw@10.0.0.2:7000?addr=10.0.0.1:7000"},
		{"redis+sentinel://s1:26379,s2:26379/0?master_name=mall", "redis+sentinel://:pw@s2:26379,s1:26379?master_name=mall"},
	}
	for _, c := range same {
		require.Equal(t, dep(c[0]), dep(c[1]), "%s and %s", c[0], c[1])
	}
	apart := [][2]string{
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6380"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"},
		{"redis://127.0.0.1:6379", "rediss://127.0.0.1:6379"},
		{"unix:///tmp/r.sock", "unix:///tmp/r.sock?db=3"},
		{"redis://127.0.0.1:26379", "redis+sentinel://127.0.0.1:26379?master_name=mall"},
		{"redis+sentinel://s1:26379?master_name=mall", "redis+sentinel://s1:26379?master_name=other"},
		{"redis+cluster://10.0.0.1:7000", "redis://10.0.0.1:7000"},
	}
	for _, c := range apart {
		require.NotEqual(t, dep(c[0]), dep(c[1]), "%s and %s", c[0], c[1])
	}
}
