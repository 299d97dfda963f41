// Package localcluster starts and stops a local ShoppingMall cluster as
// operating-system processes: a private redis-server, the CommerceApi
// processes api-a and api-b and the OrderWorkflow processes workflow-a and
// workflow-b (Config.APIs adds api-c and on, Config.Workflows workflow-c
// and on; NodeNames names them). Each node's stdout and stderr are appended to
// <RunDir>/<node>.log and its PID is kept in <RunDir>/pids/<node>.pid.
//
// Readiness is judged only by the sample's own readiness lines
// (docs/contract.md, "Readiness lines"), read passively from each node's log
// separately, as whole lines, polling every 100 ms at most 300 times. Each
// workflow node also gets an operations listener (-ops-http on a free
// loopback port, see OpsURL) for operators' /healthz and /readyz; the runner
// itself does not judge by it. Every node serves Prometheus /metrics on a
// free loopback port of its own (MetricsURL). Processes are stopped by their
// PID only (SIGTERM, a bounded wait, then SIGKILL), never by name.
//
// Once started, the cluster supervises its nodes as Kubernetes'
// restartPolicy Always would: a node whose process exits on its own (a
// workflow member that fenced itself exits 3) is started again under the
// same name, with backoff (see Config.RestartPolicy). Who restarts a node
// is explicit: each node is either managed (the supervisor restarts it)
// or held by the caller. Kill and Stop take a node out of supervision
// before they signal it, so a runner that stops a node on purpose
// (smoke, crashtest, faulttest, bench) restarts it itself with Restart,
// which hands it back to the supervisor; Unmanage does the same for a
// caller that stops a node by other means.
//
// It owns processes and log files, nothing of the order domain: it must
// not import edge, actors/..., the framework package cluster, or any
// store; its project imports are runner/redisserver and the leaf
// runner/jsonfile (the state file).
package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/shoppingmall-go/shoppingmall/runner/pgserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// Role is what a node runs.
type Role string

const (
	RoleAPI      Role = "api"
	RoleWorkflow Role = "workflow"
)

// The node names fixed by docs/contract.md, "Evidence lines".
const (
	APIA      = "api-a"
	APIB      = "api-b"
	WorkflowA = "workflow-a"
	WorkflowB = "workflow-b"
)

var (
	// APINodes and WorkflowNodes list the nodes in start order.
	APINodes      = []string{APIA, APIB}
	WorkflowNodes = []string{WorkflowA, WorkflowB}
)

var (
	// ErrConfig: the configuration cannot start a cluster.
	ErrConfig = errors.New("cluster: invalid configuration")
	// ErrUnknownNode: no node of that name.
	ErrUnknownNode = errors.New("cluster: unknown node")
	// ErrNodeExited: a node exited while it was expected to run.
	ErrNodeExited = errors.New("cluster: node exited")
	// ErrNodeRunning: Restart of a node that still runs.
	ErrNodeRunning = errors.New("cluster: node still running")
)

// ReadyHTTPLine is the line an API node prints once its listener accepts.
func ReadyHTTPLine(api string) string {
	return "shoppingmall-ready kind=http node=" + api
}

// ReadyRouteLine is the line an API node prints once it passively sees the
// workflow node's object capability in the topology.
func ReadyRouteLine(api, workflow string) string {
	return "shoppingmall-ready kind=object-route node=" + api + " target=" + workflow
}

// Config describes the cluster to start.
type Config struct {
	// RunDir holds logs, PID files and the Redis data; created if needed.
	RunDir string
	// APIBin and WorkflowBin are the built commerce-api and order-workflow
	// executables.
	APIBin      string
	WorkflowBin string
	// NodeBins runs the named nodes from executables of their own instead
	// of their role's APIBin or WorkflowBin: members of another build in
	// one cluster, as a rolling upgrade has them. SetBinary changes a
	// node's for its next start.
	NodeBins map[string]string
	// RedisBin is the redis-server executable; default from PATH.
	RedisBin string
	// RedisPersist keeps the Redis data on disk under RunDir/redis.
	RedisPersist bool
	// RedisAppendFsync is the append-only file's fsync policy with
	// RedisPersist ("always", "everysec", "no"); empty is Redis' default,
	// everysec.
	RedisAppendFsync string
	// RedisCluster runs a local 3-master Redis Cluster (RedisMasters)
	// instead of one redis-server, its data under RunDir/redis-cluster;
	// every node gets its redis+cluster URL (RedisURL). KillRedis and
	// RestartRedis refuse it.
	RedisCluster bool
	// RedisClusterReplicas gives each master of the Redis Cluster that
	// many replicas, with a cluster-node-timeout of 2 s, so a master that
	// dies is replaced in seconds; the nodes then run with
	// -redis-wait-replicas 1. Zero keeps today's masters-only cluster.
	RedisClusterReplicas int
	// RedisHA "sentinel" (RedisHASentinel) runs a primary, two replicas and
	// three sentinels instead of one redis-server: every node gets a
	// redis+sentinel URL and -redis-wait-replicas 1, and KillRedis kills
	// whichever server is the primary then, so that the sentinels fail
	// over to the other. Not with RedisCluster.
	RedisHA string
	// Archive runs a PostgreSQL archive (runner/pgserver), durable, its
	// data under RunDir/archive, on a free port; every node gets its URL
	// as -archive (ArchiveURL), and Stop stops it after the nodes.
	Archive bool
	// Retention starts the workflows with -retention (docs/archive.md):
	// finished orders move to the archive after it, once their grains
	// passivated. It needs Archive and a WorkflowIdleTimeout; zero keeps
	// every order in Redis.
	Retention time.Duration
	// ArchiveEvery is the workflows' -archive-every; zero keeps theirs.
	ArchiveEvery time.Duration
	// SelfCheck and Admin start the API processes with -self-check and
	// -admin; Fixtures starts the workflow processes with -fixtures. Every
	// API gets an admin listener on a free loopback port (AdminURL; its
	// /admin/ and /self-check/ routes exist only with these flags) and the
	// cluster's admin token, which Start generates and writes to
	// <RunDir>/admin.token (mode 0600; AdminToken, ReadAdminToken).
	SelfCheck bool
	Admin     bool
	Fixtures  bool
	// RequestTimeout is the APIs' -request-timeout; default 10s.
	RequestTimeout time.Duration
	// WorkflowIdleTimeout is the workflows' -idle-timeout. Zero, the
	// default here, never passivates: the scenarios and fault tests count
	// on an order's owner staying where it was activated. The bench sets
	// it, so that each order's passivation is in its figures.
	WorkflowIdleTimeout time.Duration
	// WorkflowLease is the workflows' -lease; zero keeps their default.
	WorkflowLease time.Duration
	// WorkflowArgs are further flags of every workflow process, after
	// the others (a flag given twice takes the later value): a test's
	// tuning, such as -reconcile-every.
	WorkflowArgs []string
	// Env is every node's environment; nil inherits the caller's. See
	// ChildEnv.
	Env []string
	// Poll is the readiness budget; zero means DefaultPoll.
	Poll Poll
	// StopGrace bounds the wait after SIGTERM before SIGKILL; default 40s
	// (a workflow drains its live orders, up to its 30 s drain timeout,
	// before it leaves).
	StopGrace time.Duration
	// RestartPolicy is what happens when a managed node's process exits
	// on its own after Start returned; default RestartAlways.
	RestartPolicy RestartPolicy
	// RestartBackoff is the delay before the first such restart of a
	// node; it doubles with each restart up to 10s and starts over once
	// an incarnation ran for 30s. Default 250ms.
	RestartBackoff time.Duration
	// OnRestart, if set, is told each time the supervisor started a node
	// again, with the new PID (e.g. to rewrite a state file).
	OnRestart func(name string, pid int)
	// Workflows is how many workflow nodes run (workflow-a, workflow-b,
	// workflow-c, ...); zero means len(WorkflowNodes). A soak runs three so
	// that a killed member's orders always have two places to go.
	Workflows int
	// APIs is how many API nodes run (api-a, api-b, api-c, ...); zero
	// means len(APINodes). At most MaxNodesPerRole of each.
	APIs int
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// BeforeNodes, if set, runs once Redis answers and before any node
	// starts (docs/contract.md, "Smoke run", step 2: stores and seed data
	// first).
	BeforeNodes func(ctx context.Context, redisURL string) error
	// Cgroup, if set, names the cgroup v2 directory each node's process
	// (every incarnation of it) starts in, "" for the runner's own: a
	// partition (runner/localcluster/partition) tells a node's packets
	// apart by it.
	Cgroup func(node string) string
}

type node struct {
	name            string
	role            Role
	httpPort        int // API only
	opsPort         int // workflow only: its -ops-http port
	adminPort       int // API only: its -admin-http port
	metricsPort     int // its -metrics-http port
	automanagedPort int
	logPath         string
	pidPath         string
	// bin overrides the role's executable (Config.NodeBins, SetBinary).
	bin  string
	proc *process
	// startOffset is the log size when the current incarnation started:
	// readiness looks only at lines written after it.
	startOffset int64
	// killed: the current incarnation was killed on purpose, so its exit
	// is no failure.
	killed bool
	// managed: the supervisor restarts the node when its current
	// incarnation exits. startNode sets it (Start, Restart, the
	// supervisor's own restarts); Kill, Unmanage and Stop clear it before
	// anything is signalled: the caller holds the node from then on.
	managed   bool
	startedAt time.Time
	// restartPace paces the supervisor's restarts (Config.RestartBackoff).
	restartPace *backoff.ExponentialBackOff
	restarts    []SupervisorRestart
}

// Cluster is a running local cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	cfg   Config
	redis *redisserver.Server
	port  int // Redis TCP port
	// archive is the PostgreSQL archive with Config.Archive, archiveLog
	// its output.
	archive    *pgserver.Server
	archiveLog *os.File
	// redisCluster is the Redis Cluster with Config.RedisCluster (redis
	// is nil then); redisClusterPorts are its masters' ports, then their
	// bus ports, reserved with the nodes' own.
	redisCluster *redisserver.Cluster
	// redisRestarts are the supervisor's restarts of Redis Cluster
	// nodes, by State name (redis-1, redis-1-r1).
	redisRestarts     map[string][]SupervisorRestart
	redisClusterPorts []int
	// ha is the Sentinel topology of Config.RedisHA (redis is nil then);
	// haPorts are the replica's and the sentinels' ports.
	ha      *redisHA
	haPorts []int

	// apis and workflows name the API and workflow nodes, in start order.
	apis      []string
	workflows []string

	mu    sync.Mutex
	nodes map[string]*node
	order []string // start order
	seeds string
	// adminToken is every API's admin bearer token; it reaches them
	// through their environment, never their command line.
	adminToken string
	// orderIDSecret is every API's OrderId secret (OrderIDSecretFile).
	orderIDSecret string
	// started is closed once Start succeeded; only then does the
	// supervisor restart nodes (a node that exits during Start fails it,
	// and Stop closes closing).
	started  chan struct{}
	stopping bool
	// closing is closed by Stop; restarting counts supervisor restarts
	// under way, which Stop waits for so that it leaves no process behind.
	closing    chan struct{}
	closeOnce  sync.Once
	restarting sync.WaitGroup
}

// Start starts Redis and the nodes (two APIs and two workflows unless
// Config says otherwise), then waits until every API log
// holds its readiness lines (kind=http, and kind=object-route for each
// workflow node). On any failure everything started is stopped again.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.RunDir == "" || cfg.APIBin == "" || cfg.WorkflowBin == "" {
		return nil, fmt.Errorf("%w: RunDir, APIBin and WorkflowBin are required", ErrConfig)
	}
	for name, bin := range cfg.NodeBins {
		if bin == "" {
			return nil, fmt.Errorf("%w: NodeBins names no executable for %s", ErrConfig, name)
		}
	}
	dir, err := filepath.Abs(cfg.RunDir)
	if err != nil {
		return nil, fmt.Errorf("%w: run dir: %v", ErrConfig, err)
	}
	cfg.RunDir = dir
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 40 * time.Second
	}
	cfg.Poll = cfg.Poll.orDefault()
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.RestartPolicy == "" {
		cfg.RestartPolicy = RestartAlways
	}
	if cfg.RestartPolicy != RestartAlways && cfg.RestartPolicy != RestartNever {
		return nil, fmt.Errorf("%w: restart policy %q", ErrConfig, cfg.RestartPolicy)
	}
	if cfg.Retention > 0 && !cfg.Archive {
		return nil, fmt.Errorf("%w: a retention needs the archive", ErrConfig)
	}
	if cfg.Retention > 0 && cfg.WorkflowIdleTimeout <= 0 {
		return nil, fmt.Errorf("%w: a retention needs a WorkflowIdleTimeout: an order is archived once its grain passivated", ErrConfig)
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = defaultRestartBackoff
	}
	switch {
	case cfg.RedisHA != "" && cfg.RedisHA != RedisHASentinel:
		return nil, fmt.Errorf("%w: redis HA %q (want %q or none)", ErrConfig, cfg.RedisHA, RedisHASentinel)
	case cfg.RedisHA != "" && cfg.RedisCluster:
		return nil, fmt.Errorf("%w: redis HA %q and a Redis Cluster", ErrConfig, cfg.RedisHA)
	case cfg.RedisClusterReplicas < 0 || (cfg.RedisClusterReplicas > 0 && !cfg.RedisCluster):
		return nil, fmt.Errorf("%w: %d Redis Cluster replicas without a Redis Cluster", ErrConfig, cfg.RedisClusterReplicas)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o755); err != nil {
		return nil, fmt.Errorf("cluster: run dir: %w", err)
	}

	apis, err := nodeNames(RoleAPI, cfg.APIs, APINodes)
	if err != nil {
		return nil, err
	}
	workflows, err := nodeNames(RoleWorkflow, cfg.Workflows, WorkflowNodes)
	if err != nil {
		return nil, err
	}
	a, w := len(apis), len(workflows)
	ports, redisPorts, err := reservePorts(a, w, cfg)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, port: ports[0], apis: apis, workflows: workflows, nodes: map[string]*node{}, redisRestarts: map[string][]SupervisorRestart{}, closing: make(chan struct{}), started: make(chan struct{})}
	if cfg.RedisCluster {
		c.redisClusterPorts = redisPorts
	} else {
		c.haPorts = redisPorts
	}
	next := ports[1:]
	take := func() int { p := next[0]; next = next[1:]; return p }
	for _, name := range apis {
		c.add(&node{name: name, role: RoleAPI, httpPort: take(), adminPort: take(), automanagedPort: take(), metricsPort: take()})
	}
	for _, name := range workflows {
		c.add(&node{name: name, role: RoleWorkflow, automanagedPort: take(), opsPort: take(), metricsPort: take()})
	}
	for name := range cfg.NodeBins {
		if c.nodes[name] == nil {
			return nil, fmt.Errorf("%w: NodeBins names %s, which is not a node of this cluster", ErrConfig, name)
		}
	}
	seeds := make([]string, 0, len(c.order))
	for _, name := range c.order {
		seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(c.nodes[name].automanagedPort))
	}
	c.seeds = strings.Join(seeds, ",")

	if c.adminToken, err = writeAdminToken(dir); err != nil {
		return nil, err
	}
	if c.orderIDSecret, err = orderIDSecret(dir); err != nil {
		return nil, err
	}
	if cfg.RedisCluster {
		if err := c.startRedisCluster(ctx); err != nil {
			return nil, err
		}
	} else if cfg.RedisHA != "" {
		if err := c.startRedisHA(ctx, c.haPorts); err != nil {
			_ = c.Stop()
			return nil, err
		}
	} else {
		c.redis, err = redisserver.Start(ctx, c.redisConfig())
		if err != nil {
			return nil, fmt.Errorf("cluster: redis: %w", err)
		}
		c.notePriority(c.redis.PriorityErr())
		if err := os.WriteFile(c.redisPIDPath(), []byte(strconv.Itoa(c.redis.PID())+"\n"), 0o644); err != nil {
			_ = c.redis.Stop()
			return nil, fmt.Errorf("cluster: redis pid file: %w", err)
		}
		cfg.Logf("redis-server pid=%d url=%s", c.redis.PID(), c.redis.URL())
	}
	if cfg.Archive {
		if err := c.startArchive(ctx); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	if cfg.BeforeNodes != nil {
		if err := cfg.BeforeNodes(ctx, c.RedisURL()); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}

	// Workflows first: the APIs announce object routes as members join.
	for _, name := range append(append([]string(nil), c.workflows...), c.apis...) {
		if err := c.startNode(c.nodes[name]); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	if err := c.waitAllReady(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	close(c.started)
	return c, nil
}

func (c *Cluster) add(n *node) {
	n.logPath = filepath.Join(c.cfg.RunDir, n.name+".log")
	n.pidPath = filepath.Join(c.cfg.RunDir, "pids", n.name+".pid")
	n.bin = c.cfg.NodeBins[n.name]
	c.nodes[n.name] = n
	c.order = append(c.order, n.name)
}

func (c *Cluster) redisPIDPath() string { return filepath.Join(c.cfg.RunDir, "pids", "redis.pid") }

// freePorts reserves n distinct free TCP ports on 127.0.0.1 for the
// processes to bind, from below the kernel's ephemeral range. A node keeps
// its ports across a restart (the seeds name them), and a port in the
// ephemeral range may meanwhile become the local end of any outgoing
// connection or a port-0 listener (Redis clients, metrics listeners); the
// kernel hands out nothing below that range on its own, so only another
// explicit pick can take such a port, and redisserver.FreePorts keeps every
// pick locked, across processes, for as long as this process lives: a
// package running beside this one cannot take a port between its check
// and a node's bind, nor while a killed node waits to be restarted on it.
func freePorts(n int) ([]int, error) { return redisserver.FreePorts(n) }

// reservePorts reserves, in one freePorts call, the ports of a cluster of
// a APIs and w workflows: Redis, then per API its HTTP, admin,
// automanaged and metrics ports, then per workflow its automanaged,
// operations and metrics ports; and apart, with a Redis Cluster its
// master ports, bus ports, then its replicas' ports and bus ports, or
// with Config.RedisHA the replica's and the sentinels' ports. One
// reservation, because ports picked in two calls may meet before the
// first ones are bound (a master once took a workflow's operations port,
// which then failed to start).
func reservePorts(a, w int, cfg Config) (nodes, redisPorts []int, err error) {
	n := 1 + 4*a + 3*w
	extra := 0
	if cfg.RedisCluster {
		extra = 2 * redisserver.DefaultMasters * (1 + cfg.RedisClusterReplicas)
	}
	if cfg.RedisHA != "" {
		extra = haExtraPorts
	}
	ports, err := freePorts(n + extra)
	if err != nil {
		return nil, nil, err
	}
	return ports[:n], ports[n:], nil
}

func (c *Cluster) args(n *node) []string {
	common := []string{
		"-node", n.name,
		"-redis", c.RedisURL(),
		"-provider", "automanaged",
		"-bind", "127.0.0.1",
		"-port", "0",
		"-automanaged-port", strconv.Itoa(n.automanagedPort),
		"-seeds", c.seeds,
	}
	if u := c.ArchiveURL(); u != "" {
		common = append(common, "-archive", u)
	}
	if c.replicated() {
		// Acknowledged means replicated: each write waits for one of its
		// primary's replicas (two under Sentinel, one per master in a
		// Redis Cluster).
		common = append(common, "-redis-wait-replicas", "1")
	}
	if n.role == RoleAPI {
		a := append([]string{}, common...)
		a = append(a, "-http", "127.0.0.1:"+strconv.Itoa(n.httpPort), "-request-timeout", c.cfg.RequestTimeout.String(),
			"-admin-http", "127.0.0.1:"+strconv.Itoa(n.adminPort))
		if c.cfg.SelfCheck {
			a = append(a, "-self-check")
		}
		if c.cfg.Admin {
			a = append(a, "-admin")
		}
		return a
	}
	a := append(append([]string{}, common...), "-idle-timeout", c.cfg.WorkflowIdleTimeout.String(), "-ops-http", "127.0.0.1:"+strconv.Itoa(n.opsPort))
	if c.cfg.WorkflowLease > 0 {
		a = append(a, "-lease", c.cfg.WorkflowLease.String())
	}
	if c.cfg.Fixtures {
		a = append(a, "-fixtures")
	}
	if c.cfg.Retention > 0 {
		a = append(a, "-retention", c.cfg.Retention.String())
		if c.cfg.ArchiveEvery > 0 {
			a = append(a, "-archive-every", c.cfg.ArchiveEvery.String())
		}
	}
	return append(a, c.cfg.WorkflowArgs...)
}

func (c *Cluster) startNode(n *node) error {
	off, err := LogSize(n.logPath)
	if err != nil {
		return err
	}
	c.mu.Lock()
	bin := n.bin
	c.mu.Unlock()
	switch {
	case bin != "":
	case n.role == RoleWorkflow:
		bin = c.cfg.WorkflowBin
	default:
		bin = c.cfg.APIBin
	}
	cgroup := ""
	if c.cfg.Cgroup != nil {
		cgroup = c.cfg.Cgroup(n.name)
	}
	p, err := startProcess(n.name, bin, c.args(n), c.env(n), n.logPath, n.pidPath, cgroup)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.proc, n.startOffset, n.killed = p, off, false
	n.managed, n.startedAt = c.cfg.RestartPolicy == RestartAlways, time.Now()
	c.mu.Unlock()
	go c.supervise(n, p)
	if n.role == RoleWorkflow {
		c.cfg.Logf("%s pid=%d ops=%s metrics=%s log=%s", n.name, p.pid(), c.OpsURL(n.name), c.MetricsURL(n.name), n.logPath)
	} else {
		c.cfg.Logf("%s pid=%d http=%s admin=%s metrics=%s log=%s", n.name, p.pid(), c.APIURL(n.name), c.AdminURL(n.name), c.MetricsURL(n.name), n.logPath)
	}
	return nil
}

// waitAllReady waits for every API's readiness lines, each API log on its
// own, failing early if any node exits.
func (c *Cluster) waitAllReady(ctx context.Context) error {
	var waits []logWait
	for _, api := range c.apis {
		n := c.nodes[api]
		want := []Matcher{Exact(ReadyHTTPLine(api))}
		for _, wf := range c.workflows {
			want = append(want, Exact(ReadyRouteLine(api, wf)))
		}
		waits = append(waits, logWait{path: n.logPath, from: n.startOffset, want: Lines(want...)})
	}
	return c.wait(ctx, c.order, waits)
}

type logWait struct {
	path string
	from int64
	want []Want
}

// wait runs the log waits concurrently, each on its own file, and fails as
// soon as one fails or one of the watched nodes exits.
func (c *Cluster) wait(ctx context.Context, watch []string, waits []logWait) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, name := range watch {
		n := c.nodes[name]
		c.mu.Lock()
		p, killed := n.proc, n.killed
		c.mu.Unlock()
		if p == nil || killed {
			// A node killed on purpose is not watched.
			continue
		}
		go func() {
			select {
			case <-p.exited:
				cancel(fmt.Errorf("%w: %s pid %d (%v); log %s:\n%s", ErrNodeExited, name, p.pid(), p.waitErr, n.logPath, Tail(n.logPath, 20)))
			case <-ctx.Done():
			}
		}()
	}
	errs := make([]error, len(waits))
	var wg sync.WaitGroup
	for i, w := range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = WaitLines(ctx, w.path, w.from, c.cfg.Poll, w.want...)
		}()
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("cluster: not ready: %w\nlog %s:\n%s", err, waits[i].path, Tail(waits[i].path, 20))
		}
	}
	return nil
}

func (c *Cluster) node(name string) (*node, error) {
	n, ok := c.nodes[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	return n, nil
}

// Kill sends SIGKILL to the node's process and waits until it is reaped:
// a crash, with no graceful drain. It first takes the node out of
// supervision: the caller restarts it (Restart), or nobody does.
func (c *Cluster) Kill(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	p := n.proc
	n.killed = true
	n.managed = false
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	c.cfg.Logf("SIGKILL %s pid=%d", name, p.pid())
	return p.kill()
}

// Drain stops the node as a planned stop does: out of supervision, then
// SIGTERM, which makes a workflow member hand its live orders to the
// members still running before it leaves, and SIGKILL only after
// StopGrace. The caller restarts it (Restart), or nobody does.
func (c *Cluster) Drain(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	p := n.proc
	n.killed = true // stopped on purpose: its exit is no failure
	n.managed = false
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	c.cfg.Logf("SIGTERM %s pid=%d (drain)", name, p.pid())
	return p.stop(c.cfg.StopGrace)
}

// SetBinary makes name's next start (Restart) run bin, an executable of
// another build; "" goes back to its role's (Config.APIBin or
// WorkflowBin). The running incarnation is not touched: stop it first.
func (c *Cluster) SetBinary(name, bin string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.bin = bin
	c.mu.Unlock()
	return nil
}

// Restart starts a stopped or killed node again under the same name, as a
// new incarnation, and hands it back to the supervisor (with
// RestartAlways), its log opened in append mode, and waits for the lines
// its new incarnation writes after the restart: an API's own readiness
// lines (docs/contract.md, "Readiness lines"), or for a workflow node the
// line of WorkflowJoined in its own log. (The APIs announce a workflow's
// object route once per node name for their lifetime, so a restarted
// workflow-a is not announced again.)
func (c *Cluster) Restart(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	p := n.proc
	c.mu.Unlock()
	if p != nil && p.running() {
		return fmt.Errorf("%w: %s pid %d", ErrNodeRunning, name, p.pid())
	}
	if err := c.startNode(n); err != nil {
		return err
	}
	var want []Matcher
	if n.role == RoleAPI {
		want = append(want, Exact(ReadyHTTPLine(name)))
		for _, wf := range c.workflows {
			want = append(want, Exact(ReadyRouteLine(name, wf)))
		}
	} else {
		want = append(want, WorkflowJoined(name))
	}
	return c.wait(ctx, c.order, []logWait{{path: n.logPath, from: n.startOffset, want: Lines(want...)}})
}

// WorkflowJoined matches the structured (JSON) log record an
// order-workflow process writes once its member has joined the cluster:
// {"msg":"order-workflow started","node":<name>,...} as one whole line.
// It gates a restart only; it is never a success criterion.
func WorkflowJoined(node string) Matcher {
	return MatchFunc(`{"msg":"order-workflow started","node":"`+node+`",...}`, func(line string) bool {
		if !strings.HasPrefix(line, "{") {
			return false
		}
		var rec struct {
			Msg  string `json:"msg"`
			Node string `json:"node"`
		}
		return json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "order-workflow started" && rec.Node == node
	})
}

// Stop stops the APIs, then the workflow nodes one after another (each
// drains its live orders to a member still running), then Redis: every
// process by its PID, SIGTERM first and SIGKILL after StopGrace. It is safe
// to call more than once.
func (c *Cluster) Stop() error {
	// Out of supervision first, and no restart under way: a node that
	// exits from here on stays down.
	c.mu.Lock()
	c.stopping = true
	for _, n := range c.nodes {
		n.managed = false
	}
	c.mu.Unlock()
	c.closeOnce.Do(func() { close(c.closing) })
	c.restarting.Wait()
	var errs []error
	stop := func(names []string) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, name := range names {
			n := c.nodes[name]
			c.mu.Lock()
			p := n.proc
			c.mu.Unlock()
			if p == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.stop(c.cfg.StopGrace); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	stop(c.apis)
	for i := len(c.workflows) - 1; i >= 0; i-- {
		stop(c.workflows[i : i+1])
	}
	if r := c.redisServer(); r != nil {
		if err := r.Stop(); err != nil {
			errs = append(errs, err)
		}
		os.Remove(c.redisPIDPath())
	}
	if c.ha != nil {
		if err := c.ha.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.stopRedisCluster(); err != nil {
		errs = append(errs, err)
	}
	if err := c.stopArchive(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startArchive starts the PostgreSQL archive under RunDir/archive
// (kept across restarts, as Redis' data is), logging to
// RunDir/postgres.log.
func (c *Cluster) startArchive(ctx context.Context) error {
	logPath := filepath.Join(c.cfg.RunDir, "postgres.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	a, err := pgserver.Start(ctx, pgserver.Config{Dir: filepath.Join(c.cfg.RunDir, "archive"), Durable: true, Log: lf})
	if err != nil {
		lf.Close()
		return fmt.Errorf("cluster: archive: %w", err)
	}
	c.mu.Lock()
	c.archive, c.archiveLog = a, lf
	c.mu.Unlock()
	c.cfg.Logf("postgres pid=%d url=%s", a.PID(), a.URL())
	return nil
}

func (c *Cluster) stopArchive() error {
	c.mu.Lock()
	a, lf := c.archive, c.archiveLog
	c.archive, c.archiveLog = nil, nil
	c.mu.Unlock()
	if a == nil {
		return nil
	}
	err := a.Stop()
	lf.Close()
	return err
}

// KillArchive SIGKILLs the archive's PostgreSQL (every backend with it);
// its data stays for RestartArchive.
func (c *Cluster) KillArchive() error {
	c.mu.Lock()
	a := c.archive
	c.mu.Unlock()
	if a == nil {
		return fmt.Errorf("%w: no archive", ErrConfig)
	}
	return a.Kill()
}

// RestartArchive starts the archive again, on its data and port, after
// KillArchive.
func (c *Cluster) RestartArchive(ctx context.Context) error {
	c.mu.Lock()
	a := c.archive
	c.mu.Unlock()
	if a == nil {
		return fmt.Errorf("%w: no archive", ErrConfig)
	}
	return a.Restart(ctx)
}

// ArchiveURL is the archive's PostgreSQL URL; "" without Config.Archive.
func (c *Cluster) ArchiveURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.archive == nil {
		return ""
	}
	return c.archive.URL()
}

// Workflows names this cluster's workflow nodes, in start order.
func (c *Cluster) Workflows() []string { return append([]string(nil), c.workflows...) }

// APIs names this cluster's API nodes, in start order.
func (c *Cluster) APIs() []string { return append([]string(nil), c.apis...) }

// MaxNodesPerRole bounds Config.APIs and Config.Workflows: node names run
// from -a to -z.
const MaxNodesPerRole = 26

// NodeNames is the node names of a role for a member count, in start
// order: <role>-a, <role>-b, ...; n zero means the default two of
// docs/contract.md, "Evidence lines" (APINodes, WorkflowNodes).
func NodeNames(role Role, n int) ([]string, error) {
	def := APINodes
	if role == RoleWorkflow {
		def = WorkflowNodes
	}
	return nodeNames(role, n, def)
}

func nodeNames(role Role, n int, def []string) ([]string, error) {
	if n < 0 || n > MaxNodesPerRole {
		return nil, fmt.Errorf("%w: %d %s nodes (at most %d)", ErrConfig, n, role, MaxNodesPerRole)
	}
	if n == 0 {
		return append([]string(nil), def...), nil
	}
	names := make([]string, 0, n)
	for i := range n {
		names = append(names, string(role)+"-"+string(rune('a'+i)))
	}
	return names, nil
}

// RedisURL is the URL of the cluster's Redis (every store shares it).
func (c *Cluster) RedisURL() string {
	if c.redisCluster != nil {
		return c.redisCluster.URL()
	}
	if c.ha != nil {
		return c.ha.sentinelURL()
	}
	return "redis://127.0.0.1:" + strconv.Itoa(c.port) + "/0"
}

// replicated: every Redis of the cluster has a replica, and the nodes
// wait for it.
func (c *Cluster) replicated() bool {
	return c.cfg.RedisHA != "" || (c.cfg.RedisCluster && c.cfg.RedisClusterReplicas > 0)
}

// RedisPID is the redis-server's PID (the first master's with
// Config.RedisCluster, RedisMasters has them all; the current primary's
// with Config.RedisHA, 0 when no sentinel answers).
func (c *Cluster) RedisPID() int {
	if c.redisCluster != nil {
		return c.redisCluster.PIDs()[0]
	}
	if c.ha != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return c.ha.primaryPID(ctx)
	}
	return c.redisServer().PID()
}

// redisServer is the current redis-server; RestartRedis replaces it.
func (c *Cluster) redisServer() *redisserver.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.redis
}

// RedisPort is the redis-server's TCP port on 127.0.0.1.
func (c *Cluster) RedisPort() int { return c.port }

// RunDir is the absolute run directory.
func (c *Cluster) RunDir() string { return c.cfg.RunDir }

// APIURL is the public base URL of an API node, e.g. http://127.0.0.1:8081.
func (c *Cluster) APIURL(name string) string {
	n, ok := c.nodes[name]
	if !ok || n.role != RoleAPI {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(n.httpPort)
}

// OpsURL is the base URL of a workflow node's operations listener
// (/healthz, /readyz), e.g. http://127.0.0.1:40123.
func (c *Cluster) OpsURL(name string) string {
	n, ok := c.nodes[name]
	if !ok || n.role != RoleWorkflow {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(n.opsPort)
}

// MetricsURL is the base URL of a node's Prometheus listener (GET
// /metrics), e.g. http://127.0.0.1:40127.
func (c *Cluster) MetricsURL(name string) string {
	n, ok := c.nodes[name]
	if !ok {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(n.metricsPort)
}

// LogPath is the node's log file.
func (c *Cluster) LogPath(name string) string {
	if n, ok := c.nodes[name]; ok {
		return n.logPath
	}
	return ""
}

// PID is the PID of the node's current incarnation, 0 if never started.
func (c *Cluster) PID(name string) int {
	n, ok := c.nodes[name]
	if !ok {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.pid()
}

// Running reports whether the node's current incarnation runs.
func (c *Cluster) Running(name string) bool {
	n, ok := c.nodes[name]
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.proc != nil && n.proc.running()
}

// State describes the running processes for a state file.
func (c *Cluster) State() State {
	st := State{RunDir: c.cfg.RunDir, AdminTokenFile: AdminTokenPath(c.cfg.RunDir)}
	if r := c.redisServer(); r != nil {
		st.Redis = ProcessState{Name: "redis", PID: r.PID(), URL: c.RedisURL(), Log: filepath.Join(c.cfg.RunDir, "redis.log")}
		st.Redis.StartTime, _ = processStartTime(st.Redis.PID)
	}
	c.mu.Lock()
	if a := c.archive; a != nil {
		st.Archive = ProcessState{Name: "postgres", PID: a.PID(), URL: a.URL(), Log: filepath.Join(c.cfg.RunDir, "postgres.log")}
		st.Archive.StartTime, _ = processStartTime(st.Archive.PID)
	}
	c.mu.Unlock()
	c.redisClusterState(&st)
	if c.ha != nil {
		c.ha.state(&st, c.RedisURL())
	}
	for _, name := range c.order {
		n := c.nodes[name]
		ps := ProcessState{Name: name, Role: n.role, PID: c.PID(name), Log: n.logPath, AutomanagedPort: n.automanagedPort, MetricsURL: c.MetricsURL(name)}
		if n.role == RoleAPI {
			ps.URL = c.APIURL(name)
			ps.AdminURL = c.AdminURL(name)
		} else {
			ps.OpsURL = c.OpsURL(name)
		}
		if ps.PID != 0 {
			ps.StartTime, _ = processStartTime(ps.PID)
		}
		st.Nodes = append(st.Nodes, ps)
	}
	return st
}

// Tail returns the last n lines of the file at path, for error messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
