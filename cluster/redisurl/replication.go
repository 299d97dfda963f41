package redisurl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replication is how many replicas of a Redis must hold a write before
// the call that sent it returns: every write command (and every pipeline
// holding one) is followed by WAIT Replicas Timeout on the same
// connection (WaitForReplicas). The zero value sends no WAIT.
//
// It is configured, never detected from the topology: a replica that is
// down when a process starts must make writes fail as in doubt, not turn
// the guarantee off.
type Replication struct {
	// Replicas is WAIT's numreplicas; 0 sends no WAIT.
	Replicas int
	// Timeout bounds one WAIT; a WAIT that ends with fewer replicas is a
	// write in doubt (ErrReplicationShortfall). Default 1 s.
	Timeout time.Duration
	// Shortfalls, if set, is called once per write that fewer than
	// Replicas confirmed within Timeout: the operator's signal that the
	// deployment has fewer live replicas than the writes wait for.
	Shortfalls func()
}

// DefaultReplicationTimeout is Replication.Timeout's default.
const DefaultReplicationTimeout = time.Second

// ErrBadReplication: a Replication that cannot be honoured.
var ErrBadReplication = errors.New("redisurl: bad replication setting")

// Validate reports a negative replica count or timeout.
func (r Replication) Validate() error {
	if r.Replicas < 0 {
		return fmt.Errorf("%w: %d wait replicas", ErrBadReplication, r.Replicas)
	}
	if r.Timeout < 0 || r.Timeout >= ioTimeout {
		// A WAIT that outlasts the connection's read timeout would read
		// as a dead server, not as a shortfall.
		return fmt.Errorf("%w: wait timeout %s, want under the clients' %s read timeout", ErrBadReplication, r.Timeout, ioTimeout)
	}
	return nil
}

func (r Replication) withDefaults() Replication {
	if r.Timeout == 0 {
		r.Timeout = DefaultReplicationTimeout
	}
	return r
}

// ErrReplicationShortfall: a write was applied on the primary but fewer
// replicas than Replication.Replicas confirmed it within the timeout. Its
// outcome is in doubt, like a timeout's: a failover now could lose it. It
// is no Redis reply, so every store reads it as its Unavailable (503
// STORE_UNAVAILABLE), and the owner's step retries, idempotently.
var ErrReplicationShortfall = errors.New("redisurl: write not confirmed by enough replicas (WAIT)")

// waitHook follows every write with WAIT on the same connection. go-redis
// gives a command no connection of its own to come back to, and WAIT
// counts the writes of the connection it is sent on, so a write command is
// sent as a pipeline of itself and WAIT on the client the hook is on, and
// a pipeline with a write gets WAIT appended. It is the innermost hook of
// its client, so the outer hooks (metrics, traces) see the command as the
// store sent it, WAIT included in its time.
type waitHook struct {
	rep    Replication
	client *redis.Client
}

type waitingKey struct{}

func (h *waitHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *waitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(waitingKey{}) != nil || !writes(cmd) {
			return next(ctx, cmd)
		}
		var wait *redis.IntCmd
		_, _ = h.client.Pipelined(context.WithValue(ctx, waitingKey{}, true), func(p redis.Pipeliner) error {
			_ = p.Process(ctx, cmd)
			wait = redis.NewIntCmd(ctx, "wait", h.rep.Replicas, h.rep.Timeout.Milliseconds())
			_ = p.Process(ctx, wait)
			return nil
		})
		if cmd.Err() == nil {
			if err := h.confirmed(wait); err != nil {
				cmd.SetErr(err)
			}
		}
		return cmd.Err()
	}
}

func (h *waitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(waitingKey{}) != nil || !slices.ContainsFunc(cmds, writes) {
			return next(ctx, cmds)
		}
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			// A transaction's replies are read by shape; nothing may follow
			// its EXEC. The stores' transactions only read.
			err := fmt.Errorf("%w: a transaction that writes cannot be followed by WAIT", ErrBadReplication)
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		wait := redis.NewIntCmd(ctx, "wait", h.rep.Replicas, h.rep.Timeout.Milliseconds())
		err := next(ctx, append(cmds[:len(cmds):len(cmds)], wait))
		if werr := h.confirmed(wait); werr != nil {
			for _, c := range cmds {
				if c.Err() == nil && writes(c) {
					c.SetErr(werr)
				}
			}
			return cmp.Or(err, werr)
		}
		return err
	}
}

// confirmed checks WAIT's answer: the number of replicas that hold the
// connection's writes.
func (h *waitHook) confirmed(wait *redis.IntCmd) error {
	if wait == nil {
		return fmt.Errorf("%w: no WAIT was sent", ErrReplicationShortfall)
	}
	n, err := wait.Result()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrReplicationShortfall, err)
	}
	if n < int64(h.rep.Replicas) {
		if h.rep.Shortfalls != nil {
			h.rep.Shortfalls()
		}
		return fmt.Errorf("%w: %d of %d replicas within %s", ErrReplicationShortfall, n, h.rep.Replicas, h.rep.Timeout)
	}
	return nil
}

// readOnly are the commands the stores send that write nothing; any other
// command is taken for a write, so that a new one waits rather than not.
var readOnly = map[string]bool{
	"get": true, "mget": true, "strlen": true, "exists": true, "type": true, "ttl": true, "pttl": true,
	"hget": true, "hmget": true, "hgetall": true, "hexists": true, "hlen": true, "hkeys": true, "hvals": true, "hscan": true,
	"xrange": true, "xrevrange": true, "xlen": true, "xread": true, "xinfo": true,
	"smembers": true, "sismember": true, "scard": true, "sscan": true,
	"zrange": true, "zrangebyscore": true, "zrevrange": true, "zrevrangebyscore": true, "zcard": true, "zscore": true, "zscan": true,
	"lrange": true, "llen": true, "scan": true, "keys": true, "dbsize": true, "dump": true, "object": true, "memory": true,
	"evalsha_ro": true, "eval_ro": true, "script": true,
	"ping": true, "echo": true, "time": true, "info": true, "config": true, "role": true, "cluster": true, "command": true,
	"hello": true, "auth": true, "select": true, "client": true, "readonly": true, "readwrite": true, "wait": true,
	"sentinel": true, "slowlog": true, "latency": true, "lastsave": true, "quit": true,
	"multi": true, "exec": true, "discard": true,
	"subscribe": true, "psubscribe": true, "ssubscribe": true, "unsubscribe": true, "punsubscribe": true, "sunsubscribe": true,
}

func writes(cmd redis.Cmder) bool { return !readOnly[cmd.Name()] }

// WaitForReplicas makes every client in clients WAIT for rep's replicas
// after each write, once per client; the zero Replication adds nothing.
// Call it once every clone of a client (WithTimeout) exists: a clone
// made later inherits a hook bound to the client it was cloned from, and
// the hook must be each client's innermost. On a Redis Cluster the hook sits on each
// node's client (go-redis' OnNewNode, before the first command creates
// one): the cluster client sends a command, or a pipeline's share of one
// node, through that node's client, so WAIT goes on the connection that
// wrote, to the key's master, and counts that master's replicas. A MOVED
// or ASK reply is the write's own error; the cluster client follows it to
// the right node, whose client waits there.
func WaitForReplicas(rep Replication, clients ...redis.UniversalClient) error {
	if rep.Replicas == 0 {
		return nil
	}
	rep = rep.withDefaults()
	done := map[redis.UniversalClient]bool{}
	for _, c := range clients {
		if done[c] {
			continue
		}
		done[c] = true
		switch rc := c.(type) {
		case *redis.Client:
			rc.AddHook(&waitHook{rep: rep, client: rc})
		case *redis.ClusterClient:
			rc.OnNewNode(func(n *redis.Client) { n.AddHook(&waitHook{rep: rep, client: n}) })
		default:
			return fmt.Errorf("%w: waiting for replicas needs a go-redis client or cluster client, not %T", ErrBadReplication, c)
		}
	}
	return nil
}
