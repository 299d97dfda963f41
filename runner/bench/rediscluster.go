package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// redisClusterNotes, on a Redis Cluster run, reads every master's
// errorstats and key count: an error when any master sent a CROSSSLOT
// reply, otherwise the report's note with the slot spread (keys per
// master) and the redirects. A single-server run gives nothing.
func redisClusterNotes(ctx context.Context, c *localcluster.Cluster) ([]string, error) {
	rc := c.RedisCluster()
	if rc == nil {
		return nil, nil
	}
	stats, err := rc.ErrorStats(ctx)
	if err != nil {
		return nil, err
	}
	spread, err := rc.KeysPerMaster(ctx)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 0, len(spread))
	for a := range spread {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	parts := make([]string, 0, len(addrs))
	for _, a := range addrs {
		parts = append(parts, fmt.Sprintf("%s=%d", a, spread[a]))
	}
	note := fmt.Sprintf("redis cluster of %d masters: CROSSSLOT=%d MOVED=%d ASK=%d TRYAGAIN=%d; keys per master: %s",
		len(addrs), stats["CROSSSLOT"], stats["MOVED"], stats["ASK"], stats["TRYAGAIN"], strings.Join(parts, " "))
	if stats["CROSSSLOT"] != 0 {
		return nil, fmt.Errorf("%s", note)
	}
	return []string{note}, nil
}
