package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// ErrRedisRunning: RestartRedis while the cluster's redis-server still runs.
var ErrRedisRunning = errors.New("cluster: redis-server still running")

// With Config.RedisHA, KillRedis kills the server the sentinels name the
// primary, which they then replace by the other (WaitPromoted), and
// RestartRedis starts the killed one again as the new primary's replica.
//
// KillRedis sends SIGKILL to the cluster's redis-server, by its PID, and
// waits (bounded) until it is reaped: a crash with no shutdown save. The
// nodes keep running and see their Redis connections refused. With
// Config.RedisPersist the append-only file under RunDir/redis stays for
// RestartRedis: what redis-server had written to it survives a process
// kill. With appendfsync everysec that is not every acknowledged write:
// one that arrives while a background fsync still runs is answered before
// it is written (Redis postpones the write for up to 2 s), so a test whose
// writes must survive the kill asks for always. Calling it
// again after the server is gone is a no-op.
func (c *Cluster) KillRedis() error {
	if c.cfg.RedisCluster {
		return fmt.Errorf("%w: KillRedis of a Redis Cluster", ErrConfig)
	}
	if c.ha != nil {
		ctx, cancel := context.WithTimeout(context.Background(), killWait)
		defer cancel()
		return c.ha.killPrimary(ctx, c.cfg.Logf)
	}
	c.mu.Lock()
	s := c.redis
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	select {
	case <-s.Exited():
		return nil
	default:
	}
	c.cfg.Logf("SIGKILL redis-server pid=%d", s.PID())
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cluster: SIGKILL redis-server pid %d: %w", s.PID(), err)
	}
	select {
	case <-s.Exited():
	case <-time.After(killWait):
		return fmt.Errorf("cluster: redis-server pid %d did not exit after SIGKILL", s.PID())
	}
	os.Remove(c.redisPIDPath())
	return nil
}

// RestartRedis starts redis-server again after KillRedis (or after it
// died): the same invocation Start uses — same binary, data directory
// RunDir/redis, TCP port, persistence flags and log file — so a persistent
// server loads its append-only file and the nodes reconnect to the same
// URL. It waits, bounded by ctx, until the new process itself answers
// (after loading its data), and records its PID. Without
// Config.RedisPersist the restarted server is empty.
func (c *Cluster) RestartRedis(ctx context.Context) error {
	if c.cfg.RedisCluster {
		return fmt.Errorf("%w: RestartRedis of a Redis Cluster", ErrConfig)
	}
	if c.ha != nil {
		return c.ha.restartDown(ctx, c.cfg.Logf)
	}
	c.mu.Lock()
	old := c.redis
	c.mu.Unlock()
	if old != nil {
		select {
		case <-old.Exited():
		default:
			return fmt.Errorf("%w: pid %d", ErrRedisRunning, old.PID())
		}
	}
	s, err := redisserver.Start(ctx, c.redisConfig())
	if err != nil {
		return fmt.Errorf("cluster: restart redis: %w", err)
	}
	if err := os.WriteFile(c.redisPIDPath(), []byte(strconv.Itoa(s.PID())+"\n"), 0o644); err != nil {
		_ = s.Stop()
		return fmt.Errorf("cluster: redis pid file: %w", err)
	}
	c.mu.Lock()
	c.redis = s
	c.mu.Unlock()
	c.cfg.Logf("redis-server restarted pid=%d url=%s", s.PID(), c.RedisURL())
	return nil
}

// redisConfig is the one redis-server invocation of the cluster: Start
// and RestartRedis both use it.
func (c *Cluster) redisConfig() redisserver.Config {
	return redisserver.Config{
		Bin:         c.cfg.RedisBin,
		Dir:         filepath.Join(c.cfg.RunDir, "redis"),
		Port:        c.port,
		Persist:     c.cfg.RedisPersist,
		AppendFsync: c.cfg.RedisAppendFsync,
		LogFile:     filepath.Join(c.cfg.RunDir, "redis.log"),
		Nice:        RedisNice,
	}
}

// RedisNice is the nice value of every redis-server the cluster starts
// (its main thread only: an AOF rewrite's child starts at 0). Every
// process of the cluster shares the machine's cores, and Redis' main
// thread, which every order's every command runs on, otherwise waits
// for a core about as long as it runs (docs/performance.md).
const RedisNice = -10

// notePriority logs why a redis-server runs at the ordinary priority:
// the cluster works, slower under load.
func (c *Cluster) notePriority(err error) {
	if err != nil {
		c.cfg.Logf("redis-server at the ordinary priority (run as root or with CAP_SYS_NICE to favor it): %v", err)
	}
}
