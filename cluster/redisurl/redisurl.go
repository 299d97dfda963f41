// Package redisurl owns the Redis URLs every process and tool of the
// project takes, and the go-redis clients built from them: it parses each
// supported form (Parse), names the parts of a malformed one, redacts
// passwords for logs (Redact), and builds a client with the project's one
// set of defaults (NewClient), plus the WAIT hook of a replicated
// deployment (WaitForReplicas).
//
// The forms:
//
//	redis://[user:password@]host:port[/db][?option=...]    one server (rediss:// over TLS)
//	unix://[user:password@]/path/to/socket[?db=N&...]      one server on a Unix socket
//	redis+cluster://[user:password@]host:port[?addr=host:port&...]
//	redis+sentinel://[user:password@]host:port[,host:port...][/db]?master_name=NAME
//
// A cluster URL (rediss+cluster over TLS) names its seeds: every seed
// after the first is an addr parameter. A sentinel URL (rediss+sentinel
// over TLS) names the sentinels; its user info is the data nodes', and
// sentinel_username and sentinel_password are the sentinels' own. The
// other query parameters are go-redis' URL options (dial_timeout=,
// pool_size=, protocol=, ...); an unknown one is an error.
//
// It is a leaf: it imports go-redis and the standard library only, and
// must not import any other package of the project, so the processes'
// wiring, the runners and the peers all share it.
package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The URL schemes beyond go-redis' own (redis, rediss, unix).
const (
	// ClusterScheme names a Redis Cluster by its seeds; rediss+cluster is
	// its TLS form.
	ClusterScheme = "redis+cluster"
	// SentinelScheme names a primary found through Redis Sentinel;
	// rediss+sentinel is its TLS form.
	SentinelScheme = "redis+sentinel"
)

// Kind is the deployment a URL names.
type Kind int

const (
	// Server is one Redis server (redis, rediss, unix).
	Server Kind = iota + 1
	// Cluster is a Redis Cluster (redis+cluster, rediss+cluster).
	Cluster
	// Sentinel is a primary with replicas watched by Redis Sentinel
	// (redis+sentinel, rediss+sentinel).
	Sentinel
)

func (k Kind) String() string {
	switch k {
	case Server:
		return "server"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ErrURL: a Redis URL is malformed. The error names the URL (redacted)
// and the part at fault: its scheme, user info, host, database, or the
// query parameter.
var ErrURL = errors.New("malformed redis url")

// URL is a Redis URL taken apart: the go-redis options it states, before
// NewClient's defaults. Exactly one of the options is set, the one of
// its Kind.
type URL struct {
	Kind     Kind
	Server   *redis.Options
	Cluster  *redis.ClusterOptions
	Sentinel *redis.FailoverOptions
}

// Deployment names the Redis deployment and database u's keys live in,
// for telling whether two URLs reach one keyspace: its kind, whether it
// speaks TLS, its hosts (a server's address, a cluster's seeds, the
// sentinels, each list sorted) and, for a sentinel, the primary's name,
// and the database number. User info, timeouts and pool options are left
// out: they change how a client talks, not where the keys are. It is
// conservative: two spellings of one deployment that name other hosts (a
// cluster's other seeds, "localhost" for 127.0.0.1) read as two.
func (u URL) Deployment() string {
	tls := func(on bool) string {
		if on {
			return "+tls"
		}
		return ""
	}
	switch u.Kind {
	case Server:
		o := u.Server
		network := o.Network
		if network == "" {
			network = "tcp"
		}
		return fmt.Sprintf("server%s %s:%s db=%d", tls(o.TLSConfig != nil), network, o.Addr, o.DB)
	case Cluster:
		addrs := append([]string(nil), u.Cluster.Addrs...)
		sort.Strings(addrs)
		return fmt.Sprintf("cluster%s %s", tls(u.Cluster.TLSConfig != nil), strings.Join(addrs, ","))
	case Sentinel:
		o := u.Sentinel
		addrs := append([]string(nil), o.SentinelAddrs...)
		sort.Strings(addrs)
		return fmt.Sprintf("sentinel%s %s master=%s db=%d", tls(o.TLSConfig != nil), strings.Join(addrs, ","), o.MasterName, o.DB)
	}
	return ""
}

// KindOf is the deployment u's scheme names, without parsing the rest;
// 0 for a scheme none of the forms has.
func KindOf(u string) Kind {
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		return 0
	}
	switch scheme {
	case "redis", "rediss", "unix":
		return Server
	case ClusterScheme, "rediss+cluster":
		return Cluster
	case SentinelScheme, "rediss+sentinel":
		return Sentinel
	}
	return 0
}

// Parse takes u apart (see the package doc for the forms). It does not
// contact Redis. A malformed URL is an error wrapping ErrURL that names
// the part at fault.
func Parse(u string) (URL, error) {
	bad := func(part string, err error) error {
		return fmt.Errorf("%w %q: %s: %w", ErrURL, Redact(u), part, err)
	}
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return URL{}, bad("scheme", errors.New("no scheme (want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://)"))
	}
	switch KindOf(u) {
	case Server:
		o, err := redis.ParseURL(u)
		if err != nil {
			return URL{}, bad("go-redis", err)
		}
		return URL{Kind: Server, Server: o}, nil
	case Cluster:
		if err := checkHosts(rest); err != nil {
			return URL{}, bad("host", err)
		}
		o, err := redis.ParseClusterURL(strings.TrimSuffix(scheme, "+cluster") + "://" + rest)
		if err != nil {
			return URL{}, bad("go-redis", err)
		}
		return URL{Kind: Cluster, Cluster: o}, nil
	case Sentinel:
		o, part, err := parseSentinel(u)
		if err != nil {
			return URL{}, bad(part, err)
		}
		return URL{Kind: Sentinel, Sentinel: o}, nil
	}
	return URL{}, bad("scheme", fmt.Errorf("%q is none of redis, rediss, unix, %s, rediss+cluster, %s, rediss+sentinel", scheme, ClusterScheme, SentinelScheme))
}

// checkHosts rejects a cluster URL without a seed: go-redis would take
// it for localhost.
func checkHosts(rest string) error {
	authority := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority = rest[:i]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		authority = authority[i+1:]
	}
	if authority == "" {
		return errors.New("no seed host:port")
	}
	return nil
}

// sentinelURL is a sentinel URL taken apart. url.Parse cannot do it: a
// comma-separated host list is no URL host (an IPv6 sentinel among
// others is an "invalid IP-literal").
type sentinelURL struct {
	tls       bool
	user      *url.Userinfo // the data nodes' credentials
	sentinels []string
	path      string
	query     url.Values
}

// splitSentinel takes a sentinel URL apart; on error it also names the
// part at fault.
func splitSentinel(u string) (sentinelURL, string, error) {
	var s sentinelURL
	scheme, rest, _ := strings.Cut(u, "://")
	s.tls = scheme == "rediss+sentinel"
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		info, err := url.Parse("redis://" + authority[:i+1] + "h")
		if err != nil {
			return s, "user info", errors.Unwrap(err)
		}
		s.user, authority = info.User, authority[i+1:]
	}
	for _, a := range strings.Split(authority, ",") {
		h, p, err := net.SplitHostPort(a)
		if err != nil || h == "" || p == "" {
			return s, "host", fmt.Errorf("sentinel %q is not host:port", a)
		}
		s.sentinels = append(s.sentinels, net.JoinHostPort(h, p))
	}
	path, rawQuery, _ := strings.Cut(tail, "?")
	s.path = path
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return s, "query", err
	}
	s.query = q
	return s, "", nil
}

func parseSentinel(u string) (*redis.FailoverOptions, string, error) {
	s, part, err := splitSentinel(u)
	if err != nil {
		return nil, part, err
	}
	if s.query.Get("master_name") == "" {
		return nil, "master_name", errors.New("required (the name the sentinels monitor)")
	}
	for _, k := range []string{"addr", "username", "password"} {
		if s.query.Has(k) {
			return nil, k, errors.New("belongs in the URL's hosts or user info, not its query")
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
		return nil, "go-redis", err
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	if s.user != nil {
		o.Username = s.user.Username()
		o.Password, _ = s.user.Password()
	}
	return o, "", nil
}

// Redact is u with every password replaced by xxxxx (the user info's, a
// password= or sentinel_password= parameter's): URLs end up in logs, in
// errors and in probe replies. An unparsable URL is "(unparsable URL)".
func Redact(u string) string {
	if KindOf(u) == Sentinel {
		return redactSentinel(u)
	}
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if q := p.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		p.RawQuery = q.Encode()
	}
	return p.Redacted()
}

func redactSentinel(u string) string {
	s, _, err := splitSentinel(u)
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
