package redisurl

import (
	"cmp"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every client NewClient builds is bounded, so that a Redis that stops
// answering (SIGSTOP, a disk stall under appendfsync always, a
// black-holed network) holds no caller past its own deadline:
//
//   - ContextTimeoutEnabled: without it go-redis replaces the caller's
//     context with Background for the socket and the pool wait, and a
//     read waits the whole ReadTimeout, then retries. No URL option sets
//     it, so it is set here, in code.
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
	clusterStateReload = time.Second
	dialTimeout        = time.Second
	ioTimeout          = 3 * time.Second
	maxRetries         = 1
	minRetryBackoff    = 8 * time.Millisecond
	maxRetryBackoff    = 128 * time.Millisecond
)

// defaultProtocol is RESP2 unless a URL asks for another (?protocol=3).
// Under RESP3 go-redis reads the socket for pending push notifications
// before every command, a syscall per round trip; the stores use no push
// notifications (no client-side caching; Pub/Sub has a connection of its
// own either way), and every reply they read has the same shape in both.
const defaultProtocol = 2

// failoverClientAddr is the Addr go-redis gives a failover client's
// options.
const failoverClientAddr = "FailoverClient"

// A probe's client (Options.Probe): the self-fence probe reads its gone
// record through a pool of its own, so that a member whose shared pool
// is saturated by load still reads it in time, and with no retry of its
// own, since the probe loop is the retry. These bounds override the
// URL's.
const (
	probePoolSize    = 2
	probeIOTimeout   = time.Second
	probeDialTimeout = 500 * time.Millisecond
)

// Options are what a caller of NewClient chooses beyond the URL.
type Options struct {
	// PoolSize is the connections per server; 0 keeps the URL's
	// pool_size=, else go-redis' default (10 per CPU).
	PoolSize int
	// Probe builds a probe's client: probePoolSize connections, one
	// attempt per call, probeDialTimeout and probeIOTimeout.
	Probe bool
}

// NewClient returns a client for u (see Parse): a *redis.ClusterClient
// for a cluster URL, go-redis' failover client (a *redis.Client that
// follows the sentinels' primary, dropping its connections when they
// announce a new one) for a sentinel URL, a *redis.Client otherwise;
// bounded as the constants above say and speaking defaultProtocol unless
// the URL says otherwise. It does not contact Redis: go-redis dials on
// first use and redials after a failure by itself. Only a malformed URL
// fails (ErrURL). The caller closes the client.
func NewClient(u string, opt Options) (redis.UniversalClient, error) {
	p, err := Parse(u)
	if err != nil {
		return nil, err
	}
	switch p.Kind {
	case Cluster:
		o := p.Cluster
		o.ContextTimeoutEnabled = true
		o.Protocol = cmp.Or(o.Protocol, defaultProtocol)
		o.ClusterStateReloadInterval = cmp.Or(o.ClusterStateReloadInterval, clusterStateReload)
		o.PoolSize = cmp.Or(opt.PoolSize, o.PoolSize)
		bound(opt, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff, &o.PoolSize)
		return redis.NewClusterClient(o), nil
	case Sentinel:
		o := p.Sentinel
		o.ContextTimeoutEnabled = true
		o.Protocol = cmp.Or(o.Protocol, defaultProtocol)
		o.PoolSize = cmp.Or(opt.PoolSize, o.PoolSize)
		bound(opt, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff, &o.PoolSize)
		return redis.NewFailoverClient(o), nil
	default:
		o := p.Server
		o.ContextTimeoutEnabled = true
		o.Protocol = cmp.Or(o.Protocol, defaultProtocol)
		o.PoolSize = cmp.Or(opt.PoolSize, o.PoolSize)
		bound(opt, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff, &o.PoolSize)
		return redis.NewClient(o), nil
	}
}

// IsFailoverClient reports whether c is go-redis' failover client, whose
// connection pool the sentinels' switch of primary empties: a copy of
// its options would dial the old primary, so share it (WithTimeout)
// rather than copy it.
func IsFailoverClient(c *redis.Client) bool { return c.Options().Addr == failoverClientAddr }

func bound(opt Options, dial, read, write *time.Duration, retries *int, minBackoff, maxBackoff *time.Duration, pool *int) {
	if opt.Probe {
		// -1 is go-redis' "no retry"; 0 would mean its default of 3.
		*dial, *read, *write, *retries, *pool = probeDialTimeout, probeIOTimeout, probeIOTimeout, -1, probePoolSize
	}
	*dial = cmp.Or(*dial, dialTimeout)
	*read = cmp.Or(*read, ioTimeout)
	*write = cmp.Or(*write, *read)
	*retries = cmp.Or(*retries, maxRetries)
	*minBackoff = cmp.Or(*minBackoff, minRetryBackoff)
	*maxBackoff = cmp.Or(*maxBackoff, maxRetryBackoff)
}
