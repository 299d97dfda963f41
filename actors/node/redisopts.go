package node

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Every go-redis client this package builds is bounded, so that a Redis
// that stops answering (SIGSTOP, a disk stall under appendfsync always,
// a black-holed network) holds no caller past its own deadline:
//
//   - ContextTimeoutEnabled: without it go-redis replaces the caller's
//     context with Background for the socket and the pool wait, and a
//     read waits the whole ReadTimeout, then retries. ParseURL has no
//     option for it, so it is set here, in code.
//   - a short DialTimeout and one retry with a short backoff: a reconnect
//     to a Redis that is down costs a bounded, small amount of time; the
//     callers (grain retries, the edge's Retry-After) retry on their own
//     terms.
//
// A Redis Cluster client also reloads its slot map every second while it
// has traffic (clusterStateReload): go-redis reloads it at once on MOVED
// or ASK, but a master that dies answers neither, and with go-redis'
// default of 60 s its slots would stay routed to the dead address for up
// to a minute after its replica took them over.
//
// A URL that sets any of these (dial_timeout=, max_retries=, ...) keeps
// its own value.
const (
	clusterStateReload    = time.Second
	clientDialTimeout     = time.Second
	clientIOTimeout       = 3 * time.Second
	clientMaxRetries      = 1
	clientMinRetryBackoff = 8 * time.Millisecond
	clientMaxRetryBackoff = 128 * time.Millisecond
)

func boundOptions(o *redis.Options) {
	o.ContextTimeoutEnabled = true
	bound(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff)
}

func boundClusterOptions(o *redis.ClusterOptions) {
	o.ContextTimeoutEnabled = true
	if o.ClusterStateReloadInterval == 0 {
		o.ClusterStateReloadInterval = clusterStateReload
	}
	bound(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff)
}

func boundFailoverOptions(o *redis.FailoverOptions) {
	o.ContextTimeoutEnabled = true
	bound(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff)
}

func bound(dial, read, write *time.Duration, retries *int, minBackoff, maxBackoff *time.Duration) {
	if *dial == 0 {
		*dial = clientDialTimeout
	}
	if *read == 0 {
		*read = clientIOTimeout
	}
	if *write == 0 {
		*write = *read
	}
	if *retries == 0 {
		*retries = clientMaxRetries
	}
	if *minBackoff == 0 {
		*minBackoff = clientMinRetryBackoff
	}
	if *maxBackoff == 0 {
		*maxBackoff = clientMaxRetryBackoff
	}
}

// The self-fence probe's client (NewProbeClient): a pool of its own, so
// that a member whose shared pool is saturated by load still reads its
// gone record in time, and no retry of its own, since the probe loop is
// the retry.
const (
	probePoolSize    = 2
	probeIOTimeout   = time.Second
	probeDialTimeout = 500 * time.Millisecond
)

// NewProbeClient returns a client for u (see RedisURLs) for the
// self-fence probe: probePoolSize connections per server, one attempt
// per call, bounded by the caller's context and by probeIOTimeout.
func NewProbeClient(u string) (redis.UniversalClient, error) {
	// A failover client's options carry its sentinel dialer, which dies
	// with the client: a probe behind Sentinel gets a failover client of
	// its own instead of a copy.
	if IsSentinelURL(u) {
		return newSentinelProbeClient(u)
	}
	c, err := NewRedisClient(u, probePoolSize)
	if err != nil {
		return nil, err
	}
	switch pc := c.(type) {
	case *redis.Client:
		o := *pc.Options()
		_ = pc.Close()
		o.MaxRetries, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = -1, probeDialTimeout, probeIOTimeout, probeIOTimeout
		return redis.NewClient(&o), nil
	case *redis.ClusterClient:
		o := *pc.Options()
		_ = pc.Close()
		o.MaxRetries, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = -1, probeDialTimeout, probeIOTimeout, probeIOTimeout
		return redis.NewClusterClient(&o), nil
	}
	return c, nil
}
