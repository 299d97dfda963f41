package redisserver

import (
	"cmp"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// IsClusterURL reports whether u names a Redis Cluster (ClusterScheme,
// or its TLS form rediss+cluster).
func IsClusterURL(u string) bool {
	return strings.HasPrefix(u, ClusterScheme+"://") || strings.HasPrefix(u, "rediss+cluster://")
}

// NewClient opens a client for a Redis URL in the form the processes'
// -redis flags take (actors/node): a redis+cluster URL gives a
// *redis.ClusterClient seeded with its host and every addr parameter, a
// redis+sentinel URL go-redis' failover client (SentinelScheme), anything
// else a *redis.Client (redis.ParseURL: redis://, rediss://, unix://). It
// does not contact Redis. The caller closes the client.
func NewClient(u string) (redis.UniversalClient, error) { return NewClientPool(u, 0) }

// NewClientPool is NewClient with poolSize connections per server
// (go-redis' default when 0). Like the processes' clients (actors/node),
// it honours its callers' deadlines (ContextTimeoutEnabled, which no URL
// can set) and bounds its reconnects, so a tool facing a stalled Redis
// gives up when its context says.
func NewClientPool(u string, poolSize int) (redis.UniversalClient, error) {
	if IsClusterURL(u) {
		o, err := ParseClusterURL(u)
		if err != nil {
			return nil, err
		}
		if poolSize > 0 {
			o.PoolSize = poolSize
		}
		o.ContextTimeoutEnabled = true
		o.MaxRetries, o.DialTimeout = cmp.Or(o.MaxRetries, 1), cmp.Or(o.DialTimeout, time.Second)
		return redis.NewClusterClient(o), nil
	}
	if strings.HasPrefix(u, SentinelScheme+"://") {
		return newSentinelClient(u, poolSize)
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("redisserver: redis url: %w", err)
	}
	if poolSize > 0 {
		o.PoolSize = poolSize
	}
	o.ContextTimeoutEnabled = true
	o.MaxRetries, o.DialTimeout = cmp.Or(o.MaxRetries, 1), cmp.Or(o.DialTimeout, time.Second)
	return redis.NewClient(o), nil
}

// ParseClusterURL is go-redis' ParseClusterURL for a redis+cluster URL
// (the scheme without "+cluster" is what go-redis expects).
func ParseClusterURL(u string) (*redis.ClusterOptions, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || (scheme != ClusterScheme && scheme != "rediss+cluster") {
		return nil, fmt.Errorf("redisserver: %q is not a %s URL", scheme, ClusterScheme)
	}
	o, err := redis.ParseClusterURL(strings.TrimSuffix(scheme, "+cluster") + "://" + rest)
	if err != nil {
		return nil, fmt.Errorf("redisserver: redis cluster url: %w", err)
	}
	return o, nil
}

// SentinelScheme is the URL scheme of a primary found through Redis
// Sentinel, as the processes take it:
// redis+sentinel://host:port[,host:port...][/db]?master_name=NAME. The
// runners' tools read only that much of it (no credentials, no TLS): the
// local topologies have neither.
const SentinelScheme = "redis+sentinel"

func newSentinelClient(u string, poolSize int) (redis.UniversalClient, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("redisserver: sentinel url: %w", err)
	}
	name := pu.Query().Get("master_name")
	if name == "" || pu.Host == "" {
		return nil, fmt.Errorf("redisserver: sentinel url %q needs hosts and master_name", u)
	}
	db := 0
	if p := strings.Trim(pu.Path, "/"); p != "" {
		if db, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("redisserver: sentinel url db %q: %w", p, err)
		}
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: name, SentinelAddrs: strings.Split(pu.Host, ","), DB: db, PoolSize: poolSize,
		ContextTimeoutEnabled: true, MaxRetries: 1, DialTimeout: time.Second,
	}), nil
}
