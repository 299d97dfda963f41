package localcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// RedisHASentinel is Config.RedisHA for a primary, two replicas and
// three sentinels watching them as SentinelMasterName.
const RedisHASentinel = "sentinel"

// SentinelMasterName is the name the local sentinels give the primary.
const SentinelMasterName = "mall"

// The local Sentinel topology fails over in seconds: a primary that does
// not answer for sentinelDownAfter is thought down, and two of the three
// sentinels must agree. The members ride the failover out with their
// stall handling (the lease is 10 s).
const (
	sentinelDownAfter = 2 * time.Second
	sentinelFailover  = 6 * time.Second
	sentinelQuorum    = 2
	sentinels         = 3
	// haData is the data servers: a primary and two replicas, so that
	// under -redis-wait-replicas 1 one failure still leaves a replica to
	// WAIT for (R replicas and WAIT N survive R - N failures).
	haData = 3
	// haExtraPorts: the replicas and the sentinels, beside the primary's
	// port.
	haExtraPorts = haData - 1 + sentinels
)

// redisHA is the Sentinel topology: haData data servers, any of which
// may be the primary, and the sentinels. down is the data server
// KillRedis killed (-1 when all run).
type redisHA struct {
	mu        sync.Mutex
	data      [haData]*redisserver.Server
	cfgs      [haData]redisserver.Config
	sentinels []*redisserver.Server
	down      int
}

// startRedisHA starts the primary on the cluster's Redis port, its
// replicas and the sentinels on the ports reserved for them, and waits
// until the sentinels see the replicas.
func (c *Cluster) startRedisHA(ctx context.Context, ports []int) error {
	h := &redisHA{down: -1}
	c.ha = h
	for i := range haData {
		cfg := c.redisConfig()
		cfg.Dir = filepath.Join(c.cfg.RunDir, "redis-"+strconv.Itoa(i+1))
		cfg.LogFile = filepath.Join(c.cfg.RunDir, "redis-"+strconv.Itoa(i+1)+".log")
		if i > 0 {
			cfg.Port = ports[i-1]
			cfg.ReplicaOf = "127.0.0.1:" + strconv.Itoa(c.port)
		}
		h.cfgs[i] = cfg
		s, err := redisserver.Start(ctx, cfg)
		if err != nil {
			return fmt.Errorf("cluster: redis %d: %w", i+1, err)
		}
		h.data[i] = s
		c.notePriority(s.PriorityErr())
	}
	if err := waitFor(ctx, "the replicas in sync", func() error {
		for _, r := range h.data[1:] {
			if err := r.InSync(ctx); err != nil {
				return err
			}
		}
		return h.data[0].Acknowledged(ctx, haData-1)
	}); err != nil {
		return err
	}
	for i, p := range ports[haData-1:] {
		s, err := redisserver.Start(ctx, redisserver.Config{
			Bin: c.cfg.RedisBin, Dir: filepath.Join(c.cfg.RunDir, "sentinel-"+strconv.Itoa(i+1)), Port: p,
			LogFile: filepath.Join(c.cfg.RunDir, "sentinel-"+strconv.Itoa(i+1)+".log"),
			Sentinel: &redisserver.Sentinel{
				MasterName: SentinelMasterName, Master: h.data[0].Addr(), Quorum: sentinelQuorum,
				DownAfter: sentinelDownAfter, FailoverTimeout: sentinelFailover,
			},
		})
		if err != nil {
			return fmt.Errorf("cluster: sentinel %d: %w", i+1, err)
		}
		h.sentinels = append(h.sentinels, s)
	}
	for _, s := range h.sentinels {
		err := waitFor(ctx, "sentinel "+s.Addr()+" to see the replicas and the other sentinels", func() error {
			r, o, err := s.SentinelSees(ctx, SentinelMasterName)
			if err == nil && (r != haData-1 || o != sentinels-1) {
				err = fmt.Errorf("%d replicas, %d other sentinels", r, o)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	c.cfg.Logf("redis primary pid=%d replicas pids=%v sentinels pids=%v url=%s", h.data[0].PID(), h.pids(h.data[1:]), h.pids(h.sentinels), c.RedisURL())
	return nil
}

// sentinelURL names the primary through every sentinel.
func (h *redisHA) sentinelURL() string {
	addrs := make([]string, len(h.sentinels))
	for i, s := range h.sentinels {
		addrs[i] = s.Addr()
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/0?master_name=" + SentinelMasterName
}

func (h *redisHA) pids(ss []*redisserver.Server) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = s.PID()
	}
	return out
}

// primary is the index of the data server the sentinels name the
// primary now (the first sentinel that answers decides).
func (h *redisHA) primary(ctx context.Context) (int, error) {
	h.mu.Lock()
	data, sents := h.data, append([]*redisserver.Server(nil), h.sentinels...)
	h.mu.Unlock()
	var errs []error
	for _, s := range sents {
		addr, err := s.SentinelPrimary(ctx, SentinelMasterName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i, d := range data {
			if d.Addr() == addr {
				return i, nil
			}
		}
		return -1, fmt.Errorf("cluster: sentinels name %s, not a data server of this cluster", addr)
	}
	return -1, fmt.Errorf("cluster: no sentinel answered: %w", errors.Join(errs...))
}

// killPrimary SIGKILLs the data server the sentinels name the primary
// and waits until it is reaped; the sentinels then promote a replica.
func (h *redisHA) killPrimary(ctx context.Context, logf func(string, ...any)) error {
	h.mu.Lock()
	down := h.down
	h.mu.Unlock()
	if down >= 0 {
		return nil
	}
	p, err := h.primary(ctx)
	if err != nil {
		return err
	}
	s := h.data[p]
	logf("SIGKILL redis primary pid=%d addr=%s", s.PID(), s.Addr())
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cluster: SIGKILL redis primary pid %d: %w", s.PID(), err)
	}
	select {
	case <-s.Exited():
	case <-time.After(killWait):
		return fmt.Errorf("cluster: redis primary pid %d did not exit after SIGKILL", s.PID())
	}
	h.mu.Lock()
	h.down = p
	h.mu.Unlock()
	return nil
}

// KillPrimaryLagging is the lagging-replica failover on the Sentinel
// topology: every replica is frozen (SIGSTOP) for lag, so each write
// falls short of its replica and answers 503 in doubt while the primary
// still applies it; then the primary is SIGKILLed and the replicas
// resumed (SIGCONT) at once, within the sentinels' down-after, so that
// one of them, lacking the primary's writes in doubt, is promoted. lag
// must stay under sentinelDownAfter, or the sentinels would count the
// frozen replicas down and promote none. WaitPromoted and RestartRedis
// follow as after KillRedis.
func (c *Cluster) KillPrimaryLagging(ctx context.Context, lag time.Duration) error {
	h := c.ha
	if h == nil {
		return fmt.Errorf("%w: KillPrimaryLagging needs RedisHA %q", ErrConfig, RedisHASentinel)
	}
	if lag <= 0 || lag > sentinelDownAfter*3/4 {
		return fmt.Errorf("%w: lag %s, want (0, %s]", ErrConfig, lag, sentinelDownAfter*3/4)
	}
	p, err := h.primary(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if h.down >= 0 {
		h.mu.Unlock()
		return fmt.Errorf("%w: redis data server %d is down already", ErrConfig, h.down+1)
	}
	var replicas []*redisserver.Server
	for i, s := range h.data {
		if i != p {
			replicas = append(replicas, s)
		}
	}
	h.mu.Unlock()
	frozen := replicas[:0:0]
	defer func() {
		// Whatever happens, nothing stays frozen.
		for _, s := range frozen {
			_ = syscall.Kill(s.PID(), syscall.SIGCONT)
		}
	}()
	for _, s := range replicas {
		if err := syscall.Kill(s.PID(), syscall.SIGSTOP); err != nil {
			return fmt.Errorf("cluster: SIGSTOP redis replica pid %d: %w", s.PID(), err)
		}
		frozen = append(frozen, s)
	}
	c.cfg.Logf("SIGSTOP redis replicas pids=%v for %s", h.pids(replicas), lag)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(lag):
	}
	if err := h.killPrimary(ctx, c.cfg.Logf); err != nil {
		return err
	}
	for _, s := range frozen {
		if err := syscall.Kill(s.PID(), syscall.SIGCONT); err != nil {
			return fmt.Errorf("cluster: SIGCONT redis replica pid %d: %w", s.PID(), err)
		}
	}
	frozen = nil
	c.cfg.Logf("SIGCONT redis replicas pids=%v", h.pids(replicas))
	return nil
}

// WaitPromoted waits, bounded by ctx, until the sentinels name as the
// primary a data server that was not killed, and returns its index. It is an error outside the Sentinel
// topology or with no server killed.
func (c *Cluster) WaitPromoted(ctx context.Context) (int, error) {
	h := c.ha
	if h == nil {
		return -1, fmt.Errorf("%w: WaitPromoted needs RedisHA %q", ErrConfig, RedisHASentinel)
	}
	h.mu.Lock()
	down := h.down
	h.mu.Unlock()
	if down < 0 {
		return -1, fmt.Errorf("%w: no primary was killed", ErrConfig)
	}
	var p int
	err := waitFor(ctx, "the sentinels to promote a replica", func() error {
		var err error
		if p, err = h.primary(ctx); err == nil && p == down {
			err = errors.New("the killed server is still named the primary")
		}
		return err
	})
	return p, err
}

// restartDown starts the killed data server again on its port and
// directory, as a replica of the primary the sentinels now name (the
// sentinels would turn it into one anyway).
func (h *redisHA) restartDown(ctx context.Context, logf func(string, ...any)) error {
	h.mu.Lock()
	down := h.down
	h.mu.Unlock()
	if down < 0 {
		return nil
	}
	cfg := h.cfgs[down]
	cfg.ReplicaOf = ""
	if p, err := h.primary(ctx); err == nil && p != down {
		cfg.ReplicaOf = h.data[p].Addr()
	}
	s, err := redisserver.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("cluster: restart redis %d: %w", down+1, err)
	}
	h.mu.Lock()
	h.data[down], h.down = s, -1
	h.mu.Unlock()
	logf("redis data server %d restarted pid=%d replica-of=%q", down+1, s.PID(), cfg.ReplicaOf)
	return nil
}

// primaryPID is the PID of the primary the sentinels name, 0 if none
// answers.
func (h *redisHA) primaryPID(ctx context.Context) int {
	p, err := h.primary(ctx)
	if err != nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.data[p].PID()
}

// stop stops the sentinels first (so that none fails over a server being
// stopped), then the data servers, each by its PID.
func (h *redisHA) stop() error {
	var errs []error
	for _, s := range h.sentinels {
		errs = append(errs, s.Stop())
	}
	h.mu.Lock()
	data := h.data
	h.mu.Unlock()
	for _, s := range data {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}

// state records the data servers and the sentinels: State.Redis is the
// primary (with the sentinel URL), RedisExtra the others.
func (h *redisHA) state(st *State, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := h.primary(ctx)
	if err != nil {
		p = 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range h.data {
		ps := ProcessState{Name: "redis-" + strconv.Itoa(i+1), PID: s.PID(), URL: s.URL(), Log: h.cfgs[i].LogFile}
		ps.StartTime, _ = processStartTime(ps.PID)
		if i == p {
			ps.Name, ps.URL = "redis", url
			st.Redis = ps
			continue
		}
		st.RedisExtra = append(st.RedisExtra, ps)
	}
	for i, s := range h.sentinels {
		ps := ProcessState{Name: "sentinel-" + strconv.Itoa(i+1), PID: s.PID(), URL: "redis://" + s.Addr(), Log: filepath.Join(s.Dir(), "..", "sentinel-"+strconv.Itoa(i+1)+".log")}
		ps.StartTime, _ = processStartTime(ps.PID)
		st.RedisExtra = append(st.RedisExtra, ps)
	}
}

// waitFor polls check until it succeeds or ctx ends.
func waitFor(ctx context.Context, what string, check func() error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		last := check()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
