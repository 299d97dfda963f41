package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SentinelPrimary asks the sentinel s which "host:port" it names the
// primary of master.
func (s *Server) SentinelPrimary(ctx context.Context, master string) (string, error) {
	var addr []string
	err := withClient(s, func(rc *redis.Client) error {
		var err error
		addr, err = rc.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master).StringSlice()
		return err
	})
	if err != nil {
		return "", fmt.Errorf("redisserver: sentinel %s: %w", s.addr, err)
	}
	if len(addr) != 2 {
		return "", fmt.Errorf("redisserver: sentinel %s names no primary of %q", s.addr, master)
	}
	return net.JoinHostPort(addr[0], addr[1]), nil
}

// SentinelSees reports how many replicas of master, and how many other
// sentinels watching it, the sentinel s knows.
func (s *Server) SentinelSees(ctx context.Context, master string) (replicas, sentinels int, err error) {
	err = withClient(s, func(rc *redis.Client) error {
		r, err := rc.Do(ctx, "SENTINEL", "REPLICAS", master).Slice()
		if err != nil {
			return err
		}
		o, err := rc.Do(ctx, "SENTINEL", "SENTINELS", master).Slice()
		if err != nil {
			return err
		}
		replicas, sentinels = len(r), len(o)
		return nil
	})
	return replicas, sentinels, err
}

// Acknowledged reports nil when the primary s counts at least n replicas
// that acknowledge its writes. A replica's own link can be up a second
// before its primary puts it online (Redis 7 waits for the replica's
// first REPLCONF ACK), and in that second WAIT counts it out: a harness
// that hands out a replicated primary waits for this, not for InSync.
func (s *Server) Acknowledged(ctx context.Context, n int) error {
	return withClient(s, func(rc *redis.Client) error {
		got, err := rc.Do(ctx, "WAIT", n, 100).Int()
		if err != nil {
			return err
		}
		if got < n {
			return fmt.Errorf("redisserver: %d of %d replicas acknowledge the primary", got, n)
		}
		return nil
	})
}

// InSync reports nil when s is a replica whose link to its primary is up.
func (s *Server) InSync(ctx context.Context) error {
	return withClient(s, func(rc *redis.Client) error {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return errors.New("redisserver: replica not in sync with its primary")
		}
		return nil
	})
}
