package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"

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
		Nice:            RedisNice,
	}
	if r > 0 {
		cc.NodeTimeout = 2 * time.Second
	}
	rc, err := redisserver.StartCluster(ctx, cc)
	if err != nil {
		return fmt.Errorf("cluster: redis cluster: %w", err)
	}
	c.notePriority(rc.PriorityErr())
	for i, pid := range rc.PIDs() {
		if err := os.WriteFile(c.redisMasterPIDPath(i), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			return errors.Join(fmt.Errorf("cluster: redis pid file: %w", err), rc.Stop())
		}
	}
	c.mu.Lock()
	c.redisCluster = rc
	c.mu.Unlock()
	c.cfg.Logf("redis cluster pids=%v url=%s", rc.PIDs(), rc.URL())
	if r > 0 {
		for _, s := range rc.Servers() {
			go c.superviseRedisNode(rc, s)
		}
	}
	return nil
}

// redisFailoverWait bounds how long the supervisor waits, after a Redis
// Cluster master died, for a replica to take its slots before it starts
// the master again anyway: with cluster-node-timeout 2 s a live replica
// is promoted in about 4 s, so by then none is coming.
const redisFailoverWait = 15 * time.Second

// superviseRedisNode restarts node s of the Redis Cluster when it ends on
// its own, as Kubernetes restarts a pod: with one replica per master and
// -redis-wait-replicas 1, a master's death otherwise leaves its promoted
// replica without a replica of its own, and every write to its slots
// refused until an operator acts. A dead master is started again only
// once its slots moved to a replica (or redisFailoverWait passed): a
// master back before the failover would stay master with its own data,
// and its replica, which may hold acknowledged writes the master's
// append-only file had not yet synced, would resynchronise from it and
// drop them. Once its slots moved, the returning node finds them claimed
// at a higher epoch and becomes the new master's replica, taking the new
// master's data. Only with Config.RedisClusterReplicas; Stop ends it.
func (c *Cluster) superviseRedisNode(rc *redisserver.Cluster, s *redisserver.Server) {
	select {
	case <-s.Exited():
	case <-c.closing:
		return
	}
	exitedAt := time.Now()
	select {
	case <-c.started:
	case <-c.closing:
		return
	}
	name := c.redisNodeName(rc, s)
	c.cfg.Logf("%s pid=%d ended on its own; the supervisor starts it again once its slots have failed over", name, s.PID())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, redisFailoverWait)
	err := waitFor(wctx, name+"'s slots to fail over", func() error {
		holds, err := rc.HoldsSlots(wctx, s)
		if err == nil && holds {
			err = errors.New("it still holds slots")
		}
		return err
	})
	wcancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		c.cfg.Logf("%s: starting it again anyway: %v", name, err)
	}
	pace := &backoff.ExponentialBackOff{InitialInterval: c.cfg.RestartBackoff, Multiplier: 2, MaxInterval: restartBackoffMax}
	for {
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		c.restarting.Add(1)
		c.mu.Unlock()
		ns, err := rc.Restart(ctx, s)
		if err == nil {
			r := SupervisorRestart{Node: name, OldPID: s.PID(), Exit: "exited", ExitedAt: exitedAt, NewPID: ns.PID(), At: time.Now()}
			c.mu.Lock()
			c.redisRestarts[name] = append(c.redisRestarts[name], r)
			c.mu.Unlock()
			if i := slices.Index(rc.Nodes(), ns); i >= 0 {
				if err := os.WriteFile(c.redisMasterPIDPath(i), []byte(strconv.Itoa(ns.PID())+"\n"), 0o644); err != nil {
					c.cfg.Logf("%s: pid file: %v", name, err)
				}
			}
			c.restarting.Done()
			c.cfg.Logf("%s restarted by the supervisor: pid=%d (was pid=%d, down %s)", name, r.NewPID, r.OldPID, r.At.Sub(exitedAt).Round(time.Millisecond))
			go c.superviseRedisNode(rc, ns)
			return
		}
		c.restarting.Done()
		delay := pace.NextBackOff()
		c.cfg.Logf("%s: supervisor restart failed: %v; again in %s", name, err, delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// redisNodeName names s as State does: redis-N for the N-th master as
// started, redis-N-rJ for its J-th replica.
func (c *Cluster) redisNodeName(rc *redisserver.Cluster, s *redisserver.Server) string {
	for i, n := range rc.Nodes() {
		if n == s {
			return "redis-" + strconv.Itoa(i+1)
		}
		for j, r := range rc.Replicas(i) {
			if r == s {
				return "redis-" + strconv.Itoa(i+1) + "-r" + strconv.Itoa(j+1)
			}
		}
	}
	return "redis " + s.Addr()
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
