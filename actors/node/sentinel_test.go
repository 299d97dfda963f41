package node

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestParseSentinelURL(t *testing.T) {
	o, err := ParseSentinelURL("redis+sentinel://app:secret@10.0.0.1:26379,10.0.0.2:26380,[::1]:26381/3?master_name=mall&sentinel_password=sp&sentinel_username=su&dial_timeout=2s")
	require.NoError(t, err)
	require.Equal(t, "mall", o.MasterName)
	require.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26380", "[::1]:26381"}, o.SentinelAddrs)
	require.Equal(t, 3, o.DB)
	require.Equal(t, "app", o.Username, "the user info is the data nodes'")
	require.Equal(t, "secret", o.Password)
	require.Equal(t, "su", o.SentinelUsername)
	require.Equal(t, "sp", o.SentinelPassword)
	require.Equal(t, 2*time.Second, o.DialTimeout)
	require.Nil(t, o.TLSConfig)

	o, err = ParseSentinelURL("rediss+sentinel://h:1?master_name=m")
	require.NoError(t, err)
	require.Equal(t, []string{"h:1"}, o.SentinelAddrs)
	require.NotNil(t, o.TLSConfig)
	require.Equal(t, 0, o.DB)
	require.Empty(t, o.Password)
}

func TestParseSentinelURLRejects(t *testing.T) {
	for _, u := range []string{
		"redis+sentinel://h1:1,h2:2/0",                         // no master_name
		"redis+sentinel://h1:1/0?master_name=",                 // empty master_name
		"redis+sentinel:///0?master_name=m",                    // no sentinel
		"redis+sentinel://h1:1,/0?master_name=m",               // empty sentinel
		"redis+sentinel://h1/0?master_name=m",                  // no port
		"redis+sentinel://h1:1/0?master_name=m&bogus=1",        // unknown option
		"redis+sentinel://h1:1/x?master_name=m",                // bad db
		"redis+sentinel://h1:1/0?master_name=m&addr=h2:2",      // hosts go in the host list
		"redis+sentinel://h1:1/0?master_name=m&password=p",     // passwords go in the user info
		"redis+sentinel://h1:1/0?master_name=m&dial_timeout=x", // bad duration
		"redis://h1:1/0?master_name=m",                         // not ours
	} {
		_, err := ParseSentinelURL(u)
		require.Error(t, err, u)
		require.True(t, errors.Is(err, ErrSentinelURL), "%s: %v", u, err)
	}
	_, err := NewRedisClient("redis+sentinel://h1:1,h2:2/0", 0)
	require.ErrorIs(t, err, ErrSentinelURL)
	require.ErrorContains(t, err, "master_name")
}

// A sentinel URL's client is a failover client, bounded like the
// others, with the pool size asked for; the probe's is one of its own.
func TestSentinelClientsAreBounded(t *testing.T) {
	u := "redis+sentinel://127.0.0.1:1,127.0.0.1:2/0?master_name=m"
	require.True(t, IsSentinelURL(u))
	require.False(t, IsClusterURL(u))
	c, err := NewRedisClient(u, 7)
	require.NoError(t, err)
	defer c.Close()
	rc, ok := c.(*redis.Client)
	require.True(t, ok, "a failover client is a single-server client: %T", c)
	o := rc.Options()
	require.Equal(t, failoverClientAddr, o.Addr)
	require.True(t, o.ContextTimeoutEnabled)
	require.Equal(t, clientMaxRetries, o.MaxRetries)
	require.Equal(t, clientDialTimeout, o.DialTimeout)
	require.Equal(t, clientIOTimeout, o.ReadTimeout)
	require.Equal(t, clientMaxRetryBackoff, o.MaxRetryBackoff)
	require.Equal(t, 7, o.PoolSize)
	require.Equal(t, defaultProtocol, o.Protocol)

	c, err = NewRedisClient(u+"&max_retries=4", 0)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, 4, c.(*redis.Client).Options().MaxRetries, "a URL's own bound wins")

	p, err := NewProbeClient(u)
	require.NoError(t, err)
	defer p.Close()
	po := p.(*redis.Client).Options()
	require.Equal(t, failoverClientAddr, po.Addr, "the probe follows the sentinels too")
	require.True(t, po.ContextTimeoutEnabled)
	require.Equal(t, probePoolSize, po.PoolSize)
	require.Equal(t, 0, po.MaxRetries)
	require.Equal(t, probeIOTimeout, po.ReadTimeout)
}

// Store names end up in logs and probe replies: no password of either
// kind survives redaction.
func TestRedactSentinelURL(t *testing.T) {
	got := redactURL("redis+sentinel://app:secret@10.0.0.1:26379,[::1]:26381/2?master_name=mall&sentinel_password=sp")
	require.NotContains(t, got, "secret")
	require.NotContains(t, got, "=sp")
	require.Contains(t, got, "redis+sentinel://app:xxxxx@10.0.0.1:26379,[::1]:26381/2?")
	require.Contains(t, got, "master_name=mall")
	require.Contains(t, got, "sentinel_password=xxxxx")
	require.Equal(t, "redis+sentinel://h:1?master_name=m", redactURL("redis+sentinel://h:1?master_name=m"))
	require.False(t, strings.Contains(redactURL("rediss+sentinel://:pw@h:1/0?master_name=m"), "pw"))
}
