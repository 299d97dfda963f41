package node

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SentinelScheme is the URL scheme of a Redis primary found through
// Redis Sentinel (see RedisURLs); rediss+sentinel is its TLS form.
const SentinelScheme = "redis+sentinel"

// ErrSentinelURL: a redis+sentinel URL is malformed (no sentinel, no
// master_name, an unknown option, ...).
var ErrSentinelURL = errors.New("node: redis sentinel url")

// IsSentinelURL reports whether u names a primary behind Redis Sentinel.
func IsSentinelURL(u string) bool {
	return strings.HasPrefix(u, SentinelScheme+"://") || strings.HasPrefix(u, "rediss+sentinel://")
}

// sentinelURL is a redis+sentinel URL taken apart. url.Parse cannot do
// it: a comma-separated host list is no URL host (an IPv6 sentinel
// among others is an "invalid IP-literal").
type sentinelURL struct {
	tls       bool
	user      *url.Userinfo // the data nodes' credentials
	sentinels []string
	path      string
	query     url.Values
}

func splitSentinelURL(u string) (sentinelURL, error) {
	var s sentinelURL
	scheme, rest, ok := strings.Cut(u, "://")
	switch {
	case !ok:
		return s, fmt.Errorf("%w: no scheme", ErrSentinelURL)
	case scheme == SentinelScheme:
	case scheme == "rediss+sentinel":
		s.tls = true
	default:
		return s, fmt.Errorf("%w: scheme %q is not %s", ErrSentinelURL, scheme, SentinelScheme)
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		info, err := url.Parse("redis://" + authority[:i+1] + "h")
		if err != nil {
			return s, fmt.Errorf("%w: user info: %v", ErrSentinelURL, errors.Unwrap(err))
		}
		s.user, authority = info.User, authority[i+1:]
	}
	for _, a := range strings.Split(authority, ",") {
		h, p, err := net.SplitHostPort(a)
		if err != nil || h == "" || p == "" {
			return s, fmt.Errorf("%w: sentinel %q is not host:port", ErrSentinelURL, a)
		}
		s.sentinels = append(s.sentinels, net.JoinHostPort(h, p))
	}
	path, rawQuery, _ := strings.Cut(tail, "?")
	s.path = path
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return s, fmt.Errorf("%w: query: %v", ErrSentinelURL, err)
	}
	s.query = q
	return s, nil
}

// ParseSentinelURL parses
//
//	redis+sentinel://[user:password@]host:port[,host:port...][/db]?master_name=NAME
//
// (rediss+sentinel over TLS) into go-redis failover options: the hosts
// are the sentinels, user and password the primary's and replicas'
// credentials, master_name the name the sentinels monitor (required).
// sentinel_username and sentinel_password are the sentinels' own
// credentials, when they ask for some; every other query parameter is
// one of go-redis' ParseFailoverURL options (dial_timeout=,
// replica_only=, ...), and an unknown one is an error. The options are
// not yet bounded (see NewRedisClient).
func ParseSentinelURL(u string) (*redis.FailoverOptions, error) {
	s, err := splitSentinelURL(u)
	if err != nil {
		return nil, err
	}
	if s.query.Get("master_name") == "" {
		return nil, fmt.Errorf("%w: master_name is required (the name the sentinels monitor)", ErrSentinelURL)
	}
	for _, k := range []string{"addr", "username", "password"} {
		if s.query.Has(k) {
			return nil, fmt.Errorf("%w: %s belongs in the URL's hosts or user info, not its query", ErrSentinelURL, k)
		}
	}
	sentinelUser, sentinelPassword := s.query.Get("sentinel_username"), s.query.Get("sentinel_password")
	s.query.Del("sentinel_username")
	s.query.Del("sentinel_password")
	// go-redis parses the rest: its failover URL takes the first
	// sentinel as its host and every other as an addr parameter.
	for _, a := range s.sentinels[1:] {
		s.query.Add("addr", a)
	}
	scheme := "redis"
	if s.tls {
		scheme = "rediss"
	}
	o, err := redis.ParseFailoverURL((&url.URL{Scheme: scheme, Host: s.sentinels[0], Path: s.path, RawQuery: s.query.Encode()}).String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSentinelURL, err)
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	if s.user != nil {
		o.Username = s.user.Username()
		o.Password, _ = s.user.Password()
	}
	return o, nil
}

// newSentinelClient is NewRedisClient for a redis+sentinel URL: a
// go-redis failover client, which asks the sentinels for the primary's
// address at every dial and drops its connections when they announce a
// new one, bounded like every other client.
func newSentinelClient(u string, poolSize int) (*redis.Client, error) {
	o, err := ParseSentinelURL(u)
	if err != nil {
		return nil, fmt.Errorf("redis sentinel url %q: %w", redactURL(u), err)
	}
	if poolSize > 0 {
		o.PoolSize = poolSize
	}
	o.Protocol = cmp.Or(o.Protocol, defaultProtocol)
	boundFailoverOptions(o)
	return redis.NewFailoverClient(o), nil
}

// newSentinelProbeClient is NewProbeClient for a redis+sentinel URL.
func newSentinelProbeClient(u string) (*redis.Client, error) {
	o, err := ParseSentinelURL(u)
	if err != nil {
		return nil, fmt.Errorf("redis sentinel url %q: %w", redactURL(u), err)
	}
	o.PoolSize = probePoolSize
	o.Protocol = cmp.Or(o.Protocol, defaultProtocol)
	o.ContextTimeoutEnabled = true
	o.MaxRetries, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = -1, probeDialTimeout, probeIOTimeout, probeIOTimeout
	return redis.NewFailoverClient(o), nil
}

// redactSentinelURL is redactURL for a redis+sentinel URL: the data
// nodes' password and the sentinels' both become xxxxx.
func redactSentinelURL(u string) string {
	s, err := splitSentinelURL(u)
	if err != nil {
		return "(unparsable URL)"
	}
	scheme := SentinelScheme
	if s.tls {
		scheme = "rediss+sentinel"
	}
	var b strings.Builder
	b.WriteString(scheme + "://")
	if s.user != nil {
		b.WriteString(url.PathEscape(s.user.Username()))
		if _, ok := s.user.Password(); ok {
			b.WriteString(":xxxxx")
		}
		b.WriteString("@")
	}
	b.WriteString(strings.Join(s.sentinels, ","))
	b.WriteString(s.path)
	for _, k := range []string{"sentinel_password", "password"} {
		if s.query.Has(k) {
			s.query.Set(k, "xxxxx")
		}
	}
	if len(s.query) > 0 {
		b.WriteString("?" + s.query.Encode())
	}
	return b.String()
}
