package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// startRedisCluster starts the 3-master Redis Cluster of
// Config.RedisCluster under RunDir/redis-cluster and records each
// master's PID in RunDir/pids/redis-N.pid.
func (c *Cluster) startRedisCluster(ctx context.Context) error {
	// Each start forms a new cluster on new ports, so an earlier run's
	// nodes (their node tables, and data that claims slots by itself)
	// go first: a Redis Cluster's data does not outlive its run here.
	dir := filepath.Join(c.cfg.RunDir, "redis-cluster")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("cluster: redis cluster dir: %w", err)
	}
	n, r := redisserver.DefaultMasters, c.cfg.RedisClusterReplicas
	ports := c.redisClusterPorts
	cc := redisserver.ClusterConfig{
		Bin:             c.cfg.RedisBin,
		Dir:             dir,
		Masters:         n,
		Ports:           ports[:n],
		BusPorts:        ports[n : 2*n],
		Replicas:        r,
		ReplicaPorts:    ports[2*n : 2*n+n*r],
		ReplicaBusPorts: ports[2*n+n*r:],
		Persist:         c.cfg.RedisPersist,
		AppendFsync:     c.cfg.RedisAppendFsync,
	}
	if r > 0 {
		cc.NodeTimeout = 2 * time.Second
	}
	rc, err := redisserver.StartCluster(ctx, cc)
	if err != nil {
		return fmt.Errorf("cluster: redis cluster: %w", err)
	}
	for i, pid := range rc.PIDs() {
		if err := os.WriteFile(c.redisMasterPIDPath(i), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			return errors.Join(fmt.Errorf("cluster: redis pid file: %w", err), rc.Stop())
		}
	}
	c.mu.Lock()
	c.redisCluster = rc
	c.mu.Unlock()
	c.cfg.Logf("redis cluster pids=%v url=%s", rc.PIDs(), rc.URL())
	return nil
}

func (c *Cluster) redisMasterPIDPath(i int) string {
	return filepath.Join(c.cfg.RunDir, "pids", "redis-"+strconv.Itoa(i+1)+".pid")
}

// stopRedisCluster stops every master by its PID; nil without a cluster.
func (c *Cluster) stopRedisCluster() error {
	rc := c.RedisCluster()
	if rc == nil {
		return nil
	}
	err := rc.Stop()
	for i := range rc.Nodes() {
		os.Remove(c.redisMasterPIDPath(i))
	}
	return err
}

// RedisCluster is the Redis Cluster of Config.RedisCluster, nil
// otherwise: tests read its masters' errorstats and key counts and move
// its slots.
func (c *Cluster) RedisCluster() *redisserver.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.redisCluster
}

// RedisPIDs are the PIDs of every redis-server of the cluster: the
// masters of a Redis Cluster, the data servers and sentinels of
// Config.RedisHA, or the one server.
func (c *Cluster) RedisPIDs() []int {
	if rc := c.RedisCluster(); rc != nil {
		return rc.PIDs()
	}
	if c.ha != nil {
		c.ha.mu.Lock()
		defer c.ha.mu.Unlock()
		return append(c.ha.pids(c.ha.data[:]), c.ha.pids(c.ha.sentinels)...)
	}
	return []int{c.RedisPID()}
}

// redisClusterState records the masters in st: State.Redis is the first
// (with the cluster's URL), State.RedisMasters every one.
func (c *Cluster) redisClusterState(st *State) {
	rc := c.RedisCluster()
	if rc == nil {
		return
	}
	for i, s := range rc.Nodes() {
		ps := ProcessState{Name: "redis-" + strconv.Itoa(i+1), PID: s.PID(), URL: "redis://" + s.Addr() + "/0", Log: filepath.Join(s.Dir(), "redis.log")}
		ps.StartTime, _ = processStartTime(ps.PID)
		st.RedisMasters = append(st.RedisMasters, ps)
	}
	st.Redis = st.RedisMasters[0]
	st.Redis.Name, st.Redis.URL = "redis", rc.URL()
	for i := range rc.Nodes() {
		for j, s := range rc.Replicas(i) {
			ps := ProcessState{Name: "redis-" + strconv.Itoa(i+1) + "-r" + strconv.Itoa(j+1), PID: s.PID(), URL: "redis://" + s.Addr() + "/0", Log: filepath.Join(s.Dir(), "redis.log")}
			ps.StartTime, _ = processStartTime(ps.PID)
			st.RedisExtra = append(st.RedisExtra, ps)
		}
	}
}
