package localcluster

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// RestartPolicy is what the cluster does when a managed node's process
// exits on its own.
type RestartPolicy string

const (
	// RestartAlways starts the node again under the same name, with
	// backoff, as Kubernetes' restartPolicy Always would.
	RestartAlways RestartPolicy = "Always"
	// RestartNever leaves it down.
	RestartNever RestartPolicy = "Never"
)

const (
	defaultRestartBackoff = 250 * time.Millisecond
	restartBackoffMax     = 10 * time.Second
	// restartStable: an incarnation that ran this long was no crash loop;
	// the next restart starts from the first delay again.
	restartStable = 30 * time.Second
)

// SupervisorRestart is one restart of a node by the supervisor.
type SupervisorRestart struct {
	Node     string
	OldPID   int
	Exit     string // how the old incarnation ended, e.g. "exit status 3"
	ExitedAt time.Time
	NewPID   int
	At       time.Time
}

// supervise waits for incarnation p of n to end and, if the node is still
// managed and p is still its current incarnation, starts it again after
// the node's backoff. A node that Kill, Unmanage or Stop took over, or
// that someone already restarted, is left alone.
func (c *Cluster) supervise(n *node, p *process) {
	<-p.exited
	exitedAt := time.Now()
	select {
	case <-c.started:
	case <-c.closing:
		return
	}
	c.mu.Lock()
	if c.stopping || n.proc != p || !n.managed {
		c.mu.Unlock()
		return
	}
	if n.restartPace == nil || exitedAt.Sub(n.startedAt) >= restartStable {
		// The library's backoff without jitter (a zero
		// RandomizationFactor): a crash loop's delay is a floor, as
		// Kubernetes' CrashLoopBackOff is, and a handful of local
		// processes has no herd for jitter to spread.
		n.restartPace = &backoff.ExponentialBackOff{InitialInterval: c.cfg.RestartBackoff, Multiplier: 2, MaxInterval: restartBackoffMax}
	}
	c.mu.Unlock()
	exit := "exited"
	if p.waitErr != nil {
		exit = p.waitErr.Error()
	}
	for {
		c.mu.Lock()
		delay := n.restartPace.NextBackOff()
		c.mu.Unlock()
		c.cfg.Logf("%s pid=%d ended on its own (%s); the supervisor starts it again in %s", n.name, p.pid(), exit, delay)
		t := time.NewTimer(delay)
		select {
		case <-c.closing:
			t.Stop()
			return
		case <-t.C:
		}
		c.mu.Lock()
		if c.stopping || n.proc != p || !n.managed {
			c.mu.Unlock()
			return
		}
		c.restarting.Add(1)
		c.mu.Unlock()
		err := c.startNode(n)
		if err != nil {
			c.restarting.Done()
			c.cfg.Logf("%s: supervisor restart failed: %v", n.name, err)
			continue
		}
		c.mu.Lock()
		r := SupervisorRestart{Node: n.name, OldPID: p.pid(), Exit: exit, ExitedAt: exitedAt, NewPID: n.proc.pid(), At: time.Now()}
		n.restarts = append(n.restarts, r)
		c.mu.Unlock()
		c.restarting.Done()
		c.cfg.Logf("%s restarted by the supervisor: pid=%d (was pid=%d, %s)", n.name, r.NewPID, r.OldPID, exit)
		if c.cfg.OnRestart != nil {
			c.cfg.OnRestart(n.name, r.NewPID)
		}
		return
	}
}

// Restarts lists the supervisor's restarts of the node, oldest first: a
// workflow or API node, or a Redis Cluster node by its State name
// (redis-1, redis-1-r1).
func (c *Cluster) Restarts(name string) []SupervisorRestart {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return append([]SupervisorRestart(nil), c.redisRestarts[name]...)
	}
	return append([]SupervisorRestart(nil), n.restarts...)
}

// Managed reports whether the supervisor restarts the node when its
// current incarnation exits.
func (c *Cluster) Managed(name string) bool {
	n, ok := c.nodes[name]
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.managed
}

// Unmanage takes the node out of supervision without signalling it, for
// a caller about to stop it by other means (its PID): from then on the
// caller holds it, and Restart hands it back.
func (c *Cluster) Unmanage(name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.managed = false
	c.mu.Unlock()
	return nil
}

func (r SupervisorRestart) String() string {
	return fmt.Sprintf("%s pid %d (%s) → pid %d after %s", r.Node, r.OldPID, r.Exit, r.NewPID, r.At.Sub(r.ExitedAt).Round(time.Millisecond))
}
