package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// checkRedisCluster, on a Redis Cluster run, fails the run on any
// CROSSSLOT error reply any master sent (INFO errorstats), and reports
// the slot spread (keys per master) and the redirects the masters
// answered. A single-server run has nothing to check.
func (r *runner) checkRedisCluster(ctx context.Context) error {
	rc := r.cl.RedisCluster()
	if rc == nil {
		return nil
	}
	stats, err := rc.ErrorStats(ctx)
	if err != nil {
		return err
	}
	spread, err := rc.KeysPerMaster(ctx)
	if err != nil {
		return err
	}
	addrs := make([]string, 0, len(spread))
	for a := range spread {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	parts := make([]string, 0, len(addrs))
	empty := 0
	for _, a := range addrs {
		parts = append(parts, fmt.Sprintf("%s=%d", a, spread[a]))
		if spread[a] == 0 {
			empty++
		}
	}
	r.logf("redis cluster: CROSSSLOT=%d MOVED=%d ASK=%d TRYAGAIN=%d; keys per master: %s",
		stats["CROSSSLOT"], stats["MOVED"], stats["ASK"], stats["TRYAGAIN"], strings.Join(parts, " "))
	if n := stats["CROSSSLOT"]; n != 0 {
		return fmt.Errorf("the masters sent %d CROSSSLOT error replies (errorstats %v)", n, stats)
	}
	if empty > 0 {
		return fmt.Errorf("%d of %d masters hold no key: %s", empty, len(addrs), strings.Join(parts, " "))
	}
	return nil
}
