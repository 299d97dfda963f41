package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
)

const (
	// Slots is the number of Redis Cluster hash slots.
	Slots = 16384
	// DefaultMasters is how many masters StartCluster starts when
	// ClusterConfig leaves it zero: the smallest cluster a slot move needs
	// a third master for to still be a spread.
	DefaultMasters = 3
	// clusterNodeTimeoutMs is each node's cluster-node-timeout: short, as
	// the nodes share one machine, but long enough that a busy test host
	// does not make them suspect each other.
	clusterNodeTimeoutMs = 5000
)

// ErrCluster: the cluster could not be formed or reshaped.
var ErrCluster = errors.New("redisserver: redis cluster")

// ClusterConfig describes a local Redis Cluster: masters, and with
// Replicas that many replicas of each, which take over a master that
// fails (within NodeTimeout and a little more).
type ClusterConfig struct {
	// Bin is the redis-server executable; default from PATH.
	Bin string
	// Dir holds one directory per node (node-1, node-2, ...); default a
	// fresh temporary directory that Stop removes. A given Dir is kept,
	// and must not hold an earlier cluster's nodes: their node tables and
	// data claim slots the new cluster assigns afresh.
	Dir string
	// Masters is the number of masters; default DefaultMasters. The slots
	// are split between them in equal ranges, in order.
	Masters int
	// Ports are the masters' client ports on 127.0.0.1 and BusPorts their
	// cluster bus ports, one each per master; default free ports (each
	// picked by binding it) below the kernel's ephemeral range.
	Ports    []int
	BusPorts []int
	// Replicas is how many replicas each master gets (default none);
	// replica j of master i runs in node-<i+1>-r<j+1>.
	Replicas int
	// ReplicaPorts and ReplicaBusPorts are the replicas' ports, master by
	// master (Masters*Replicas each); default free ports.
	ReplicaPorts    []int
	ReplicaBusPorts []int
	// NodeTimeout is every node's Config.ClusterNodeTimeout; default 5 s.
	NodeTimeout time.Duration
	// Persist keeps every node's data (RDB and AOF) in its directory.
	Persist bool
	// AppendFsync is every node's Config.AppendFsync.
	AppendFsync string
	// Nice is every node's Config.Nice.
	Nice int
}

// Cluster is a running local Redis Cluster: one redis-server child
// process per master, each stopped by its PID.
type Cluster struct {
	// mu guards the entries of nodes and replicas once StartCluster
	// returned: Restart replaces one while tests and the local
	// supervisor read them.
	mu       sync.Mutex
	stopped  bool
	nodes    []*Server
	cfgs     []Config  // each master's, for Restart
	ids      []string  // node ids, as nodes
	replicas []*Server // master by master: replicas[i*per+j]
	rcfgs    []Config  // each replica's, as replicas
	per      int       // replicas per master
	dir      string
	ownsDir  bool

	stopOnce sync.Once
	stopErr  error
}

// StartCluster starts the masters, gives each its range of slots
// (CLUSTER ADDSLOTSRANGE), introduces them to each other (CLUSTER MEET)
// and waits, bounded by ctx (or 30s), until every node reports
// cluster_state:ok and knows every slot's owner. With Replicas it then
// starts the replicas, makes each CLUSTER REPLICATE its master and waits
// until each is in sync. On failure everything started is stopped again.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*startTimeout)
		defer cancel()
	}
	n := cfg.Masters
	if n == 0 {
		n = DefaultMasters
	}
	if n < 1 || n > Slots {
		return nil, fmt.Errorf("%w: %d masters", ErrCluster, n)
	}
	ports, busPorts := cfg.Ports, cfg.BusPorts
	if len(ports) == 0 && len(busPorts) == 0 {
		free, err := FreePorts(2 * n)
		if err != nil {
			return nil, err
		}
		ports, busPorts = free[:n], free[n:]
	}
	if len(ports) != n || len(busPorts) != n {
		return nil, fmt.Errorf("%w: %d masters need %d ports and %d bus ports (got %d and %d)", ErrCluster, n, n, n, len(ports), len(busPorts))
	}
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("%w: %d replicas per master", ErrCluster, cfg.Replicas)
	}
	nr := n * cfg.Replicas
	rports, rbus := cfg.ReplicaPorts, cfg.ReplicaBusPorts
	if nr > 0 && len(rports) == 0 && len(rbus) == 0 {
		free, err := FreePorts(2 * nr)
		if err != nil {
			return nil, err
		}
		rports, rbus = free[:nr], free[nr:]
	}
	if len(rports) != nr || len(rbus) != nr {
		return nil, fmt.Errorf("%w: %d replicas need %d ports and %d bus ports (got %d and %d)", ErrCluster, nr, nr, nr, len(rports), len(rbus))
	}
	c := &Cluster{dir: cfg.Dir, per: cfg.Replicas}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "rdc")
		if err != nil {
			return nil, fmt.Errorf("redisserver: create dir: %w", err)
		}
		c.dir, c.ownsDir = d, true
	}
	fail := func(err error) (*Cluster, error) {
		return nil, errors.Join(err, c.Stop())
	}
	for i := range n {
		nc := Config{
			Bin:                cfg.Bin,
			Dir:                filepath.Join(c.dir, "node-"+strconv.Itoa(i+1)),
			Port:               ports[i],
			ClusterBusPort:     busPorts[i],
			ClusterNodeTimeout: cfg.NodeTimeout,
			Persist:            cfg.Persist,
			AppendFsync:        cfg.AppendFsync,
			Nice:               cfg.Nice,
		}
		s, err := Start(ctx, nc)
		if err != nil {
			return fail(err)
		}
		c.nodes = append(c.nodes, s)
		c.cfgs = append(c.cfgs, nc)
	}
	if err := c.form(ctx, busPorts); err != nil {
		return fail(err)
	}
	for k := range nr {
		rc := Config{
			Bin:                cfg.Bin,
			Dir:                filepath.Join(c.dir, "node-"+strconv.Itoa(k/cfg.Replicas+1)+"-r"+strconv.Itoa(k%cfg.Replicas+1)),
			Port:               rports[k],
			ClusterBusPort:     rbus[k],
			ClusterNodeTimeout: cfg.NodeTimeout,
			Persist:            cfg.Persist,
			AppendFsync:        cfg.AppendFsync,
			Nice:               cfg.Nice,
		}
		s, err := Start(ctx, rc)
		if err != nil {
			return fail(err)
		}
		c.replicas = append(c.replicas, s)
		c.rcfgs = append(c.rcfgs, rc)
	}
	if err := c.attachReplicas(ctx, rbus); err != nil {
		return fail(err)
	}
	return c, nil
}

// attachReplicas introduces every replica to the cluster, makes it
// replicate its master, and waits until every node knows every other,
// each replica's link to its master is up, and each master counts its
// replicas as acknowledging (what WAIT needs).
func (c *Cluster) attachReplicas(ctx context.Context, busPorts []int) error {
	if len(c.replicas) == 0 {
		return nil
	}
	err := withClient(c.nodes[0], func(rc *redis.Client) error {
		for k, s := range c.replicas {
			host, port, _ := net.SplitHostPort(s.Addr())
			if err := rc.Do(ctx, "CLUSTER", "MEET", host, port, busPorts[k]).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: meet replicas: %w", ErrCluster, err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for k, s := range c.replicas {
		master := c.ids[k/c.per]
		var last error
		for {
			// A replica can replicate only a master it already knows.
			last = withClient(s, func(rc *redis.Client) error {
				return rc.Do(ctx, "CLUSTER", "REPLICATE", master).Err()
			})
			if last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s replicating %s: %w (last: %v)", ErrCluster, s.Addr(), master, ctx.Err(), last)
			case <-tick.C:
			}
		}
	}
	for {
		last := c.agreed(ctx)
		if last == nil {
			last = c.replicasInSync(ctx)
		}
		for _, m := range c.nodes {
			if last == nil {
				last = m.Acknowledged(ctx, c.per)
			}
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: replicas not in sync: %w (last: %v)", ErrCluster, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// replicasInSync reports a replica whose link to its master is not up.
func (c *Cluster) replicasInSync(ctx context.Context) error {
	for _, s := range c.replicas {
		err := withClient(s, func(rc *redis.Client) error {
			info, err := rc.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("%s: not in sync with its master yet", s.Addr())
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// form assigns the slots and joins the nodes, then waits for agreement.
func (c *Cluster) form(ctx context.Context, busPorts []int) error {
	n := len(c.nodes)
	for i, s := range c.nodes {
		err := withClient(s, func(rc *redis.Client) error {
			id, err := rc.ClusterMyID(ctx).Result()
			if err != nil {
				return err
			}
			c.ids = append(c.ids, id)
			lo, hi := i*Slots/n, (i+1)*Slots/n-1
			if err := rc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
				return err
			}
			// Distinct config epochs from the start, as redis-cli gives
			// them: with all at 0 the nodes settle collisions by gossip
			// later, and a slot handed over while that is going on can
			// lose to the old owner's claim at an equal or bumped epoch.
			return rc.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		})
		if err != nil {
			return fmt.Errorf("%w: node %s: %w", ErrCluster, s.Addr(), err)
		}
	}
	err := withClient(c.nodes[0], func(rc *redis.Client) error {
		for i, s := range c.nodes[1:] {
			host, port, _ := net.SplitHostPort(s.Addr())
			if err := rc.Do(ctx, "CLUSTER", "MEET", host, port, busPorts[i+1]).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: meet: %w", ErrCluster, err)
	}
	return c.waitAgreed(ctx)
}

// waitAgreed polls until every node says cluster_state:ok, knows every
// node, maps every slot to the same owner as the others do, and has
// learnt the same current epoch (so the next epoch bump is unique).
func (c *Cluster) waitAgreed(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = c.agreed(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: not formed: %w (last: %v)", ErrCluster, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func (c *Cluster) agreed(ctx context.Context) error {
	var want, wantEpoch string
	for _, s := range c.nodes {
		err := withClient(s, func(rc *redis.Client) error {
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.nodes)+len(c.replicas))+"\r\n") {
				return fmt.Errorf("%s: not ok yet", s.Addr())
			}
			epoch := infoField(info, "cluster_current_epoch")
			if wantEpoch == "" {
				wantEpoch = epoch
			} else if epoch != wantEpoch {
				return fmt.Errorf("%s is at epoch %s, another node at %s", s.Addr(), epoch, wantEpoch)
			}
			ranges, err := slotRanges(ctx, rc)
			if err != nil {
				return err
			}
			got := slotMap(ranges)
			if want == "" {
				want = got
			} else if got != want {
				return fmt.Errorf("%s sees slots %s, another node %s", s.Addr(), got, want)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// slotRange is a range of slots and the address of the master serving it.
type slotRange struct {
	start, end int
	addr       string
}

// slotRanges reads CLUSTER SHARDS as rc's node sees it.
func slotRanges(ctx context.Context, rc *redis.Client) ([]slotRange, error) {
	shards, err := rc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []slotRange
	for _, sh := range shards {
		addr := ""
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				addr = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			}
		}
		for _, r := range sh.Slots {
			out = append(out, slotRange{start: int(r.Start), end: int(r.End), addr: addr})
		}
	}
	return out, nil
}

// slotMap renders slot ranges in a canonical order, for comparison.
func slotMap(ranges []slotRange) string {
	parts := make([]string, 0, len(ranges))
	for _, r := range ranges {
		parts = append(parts, fmt.Sprintf("%05d-%05d@%s", r.start, r.end, r.addr))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func withClient(s *Server, fn func(*redis.Client) error) error {
	rc := s.Client()
	defer rc.Close()
	return fn(rc)
}

// Nodes are the masters, in slot order: Nodes()[i] started with the i-th
// range of slots (after a failover it may be a replica).
func (c *Cluster) Nodes() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Server(nil), c.nodes...)
}

// Servers are every node, masters (as Nodes) then replicas.
func (c *Cluster) Servers() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(append([]*Server(nil), c.nodes...), c.replicas...)
}

// RestartNode is Restart of Nodes()[i].
func (c *Cluster) RestartNode(ctx context.Context, i int) error {
	_, err := c.Restart(ctx, c.Nodes()[i])
	return err
}

// Restart starts the node old (one of Servers) again, on its port and
// with its node table and data, once its process has exited (a test
// killed it, or it crashed): it rejoins the cluster under its node id,
// and if a replica took its slots meanwhile it becomes that replica's
// replica, as Redis Cluster turns a returning master whose slots moved
// on at a higher epoch. The new process takes old's place in Nodes or
// Replicas and is returned. After Stop, or for a server that is not
// the current incarnation of a node, it is an error.
func (c *Cluster) Restart(ctx context.Context, old *Server) (*Server, error) {
	select {
	case <-old.Exited():
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: node %s has not exited: %w", ErrCluster, old.Addr(), ctx.Err())
	}
	c.mu.Lock()
	slot, cfg, err := c.slotOf(old)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s, err := Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: restart %s: %w", ErrCluster, old.Addr(), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		// Stop ran while it started: it must not outlive the cluster.
		return nil, errors.Join(fmt.Errorf("%w: restart %s: the cluster stopped", ErrCluster, old.Addr()), s.Stop())
	}
	*slot = s
	return s, nil
}

// slotOf is where old sits (its entry in nodes or replicas) and its
// configuration; c.mu is held.
func (c *Cluster) slotOf(old *Server) (*(*Server), Config, error) {
	if c.stopped {
		return nil, Config{}, fmt.Errorf("%w: restart %s: the cluster stopped", ErrCluster, old.Addr())
	}
	for i, s := range c.nodes {
		if s == old {
			return &c.nodes[i], c.cfgs[i], nil
		}
	}
	for k, s := range c.replicas {
		if s == old {
			return &c.replicas[k], c.rcfgs[k], nil
		}
	}
	return nil, Config{}, fmt.Errorf("%w: restart %s: not a current node of the cluster", ErrCluster, old.Addr())
}

// HoldsSlots reports whether the cluster, as a node other than s sees
// it, still has slots assigned to s. A master that died holds its slots
// until one of its replicas is promoted; a replica holds none. It is an
// error when no other node answers.
func (c *Cluster) HoldsSlots(ctx context.Context, s *Server) (bool, error) {
	var errs []error
	for _, o := range c.Servers() {
		if o == s {
			continue
		}
		var holds bool
		err := withClient(o, func(rc *redis.Client) error {
			nodes, err := rc.ClusterNodes(ctx).Result()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(nodes, "\n") {
				f := strings.Fields(line)
				// id addr@bus flags master ping pong epoch link slot...
				if len(f) >= 8 && strings.HasPrefix(f[1], s.Addr()+"@") {
					holds = len(f) > 8
					return nil
				}
			}
			return fmt.Errorf("%s does not know %s", o.Addr(), s.Addr())
		})
		if err == nil {
			return holds, nil
		}
		errs = append(errs, err)
	}
	return false, fmt.Errorf("%w: no node answered CLUSTER NODES: %w", ErrCluster, errors.Join(errs...))
}

// Replicas are the replicas of Nodes()[i], as started: after a failover
// one of them is its slots' master.
func (c *Cluster) Replicas(i int) []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Server(nil), c.replicas[i*c.per:(i+1)*c.per]...)
}

// NodeID is the cluster node id of Nodes()[i].
func (c *Cluster) NodeID(i int) string { return c.ids[i] }

// Seeds are the masters' addresses, host:port.
func (c *Cluster) Seeds() []string {
	nodes := c.Nodes()
	seeds := make([]string, len(nodes))
	for i, s := range nodes {
		seeds[i] = s.Addr()
	}
	return seeds
}

// URL names the cluster as a redis+cluster URL (cluster/redisurl) with
// every master as a seed.
func (c *Cluster) URL() string { return ClusterURL(c.Seeds()) }

// ClusterURL is the redis+cluster URL of the seeds (host:port each).
func ClusterURL(seeds []string) string {
	if len(seeds) == 0 {
		return ""
	}
	u := redisurl.ClusterScheme + "://" + seeds[0]
	for i, s := range seeds[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		// host:port needs no escaping in a query value.
		u += sep + "addr=" + s
	}
	return u
}

// Client returns a new cluster client seeded with every master; the
// caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds(), ContextTimeoutEnabled: true})
}

// Dir is the cluster's directory (one node-N directory per master).
func (c *Cluster) Dir() string { return c.dir }

// PIDs are the masters' process ids, as Nodes.
func (c *Cluster) PIDs() []int {
	nodes := c.Nodes()
	pids := make([]int, len(nodes))
	for i, s := range nodes {
		pids[i] = s.PID()
	}
	return pids
}

// PriorityErr is why some node runs at the ordinary priority although
// ClusterConfig.Nice asked for another; nil when none does.
func (c *Cluster) PriorityErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range append(append([]*Server{}, c.nodes...), c.replicas...) {
		errs = append(errs, s.PriorityErr())
	}
	return errors.Join(errs...)
}

// Stop stops every node, replicas included, by its PID (as Server.Stop,
// concurrently) and removes the directory StartCluster created. Safe to
// call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		all := c.Servers()
		errs := make([]error, len(all))
		var wg sync.WaitGroup
		for i, s := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Stop()
			}()
		}
		wg.Wait()
		if c.ownsDir {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("redisserver: remove %s: %w", c.dir, err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// ErrorStats sums INFO errorstats over the masters: error kind (the
// reply's first word, e.g. CROSSSLOT, MOVED, ASK, TRYAGAIN) -> how many
// error replies the servers sent since they started.
func (c *Cluster) ErrorStats(ctx context.Context) (map[string]int64, error) {
	total := map[string]int64{}
	for _, s := range c.Nodes() {
		m, err := s.ErrorStats(ctx)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			total[k] += v
		}
	}
	return total, nil
}

// KeysPerMaster is DBSIZE of each master, by address: the slot spread.
func (c *Cluster) KeysPerMaster(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range c.Nodes() {
		err := withClient(s, func(rc *redis.Client) error {
			n, err := rc.DBSize(ctx).Result()
			out[s.Addr()] = n
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("redisserver: DBSIZE %s: %w", s.Addr(), err)
		}
	}
	return out, nil
}

// ErrorStats reads INFO errorstats: error kind -> count of error replies
// the server sent (e.g. CROSSSLOT, MOVED, ASK).
func (s *Server) ErrorStats(ctx context.Context) (map[string]int64, error) {
	var info string
	err := withClient(s, func(rc *redis.Client) error {
		var err error
		info, err = rc.Info(ctx, "errorstats").Result()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redisserver: INFO errorstats %s: %w", s.addr, err)
	}
	return parseErrorStats(info), nil
}

// parseErrorStats reads lines errorstat_<KIND>:count=<n>.
func parseErrorStats(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "errorstat_")
		if !ok {
			continue
		}
		kind, val, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(val, ",") {
			if c, ok := strings.CutPrefix(f, "count="); ok {
				if n, err := strconv.ParseInt(c, 10, 64); err == nil {
					out[kind] += n
				}
			}
		}
	}
	return out
}

// infoField is the value of field in a CLUSTER INFO reply ("" if absent).
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
