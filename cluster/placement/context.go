package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
)

// ContextProducer returns a cluster.ContextProducer for
// cluster.WithClusterContextProducer. The stock context retries a nil pid
// until the timeout and answers an untyped error; ours answers a dead owner
// with ErrUnavailable at once and fails in-flight requests when the owner
// leaves.
func ContextProducer(l *Lookup) pcluster.ContextProducer {
	return func(c *pcluster.Cluster) pcluster.Context { return &Context{lookup: l} }
}

// Context is the cluster context for grains placed by a Lookup.
type Context struct {
	lookup *Lookup
}

var _ pcluster.Context = (*Context)(nil)

// Request sends message to the identity's owner and waits for its reply.
// Errors: ErrUnavailable (owner gone, before or during the call),
// ErrTimeout, ErrNoMember, ErrStoreUnavailable, ErrOverloaded (the
// grain's mailbox or every eligible member had no room; nothing was
// done). A command the owner did not
// process (dead letter, or a Retry answer while it moves) is resent to the
// new owner within the same deadline.
func (c *Context) Request(identity, kind string, message any, opts ...pcluster.GrainCallOption) (any, error) {
	cfg := pcluster.NewGrainCallOptions(c.lookup.cluster)
	for _, o := range opts {
		o(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	return c.RequestContext(ctx, identity, kind, message)
}

// RequestContext is Request bounded by ctx instead of a timeout option.
//
// A message is resent only when it provably was not processed: a Retry
// answer, or a dead letter (no such grain at that pid). Never after a
// timeout, since the owner may have run it. A dead letter from the pid the
// Location record still names, at a live owner member, means that record
// points at a grain that does not exist (its open failed after the record
// was written, or it stopped without releasing): the record is released
// and the message resent once, so the next activation serves it.
//
// The call is one client span (trace.go), whatever its resends, and each
// message sent carries its trace context to the grain.
func (c *Context) RequestContext(ctx context.Context, identity, kind string, message any) (any, error) {
	ctx, span := c.lookup.startCall(ctx, kind, identity, message)
	resends := 0
	res, err := c.request(ctx, identity, kind, message, &resends)
	endCall(span, resends, err)
	return res, err
}

func (c *Context) request(ctx context.Context, identity, kind string, message any, resends *int) (any, error) {
	// A resend waits for the new owner to settle: short waits, since a
	// caller is waiting on the answer.
	wait := retry.Backoff(time.Millisecond, 64*time.Millisecond)
	repaired := false
	for attempt := 0; ; attempt++ {
		*resends = attempt
		// A new identity's first command travels with its activation.
		pid, res, err := c.lookup.resolveSending(ctx, kind, identity, message)
		if pid == nil && err != nil {
			return nil, err
		}
		switch {
		case err != nil:
			// Recorded at pid, and the command delivered, but unanswered:
			// it may have run, so it is not resent.
			return nil, err
		case res == nil:
			res, err = c.await(ctx, pid, message)
		}
		var retry, dead bool
		switch {
		case errors.Is(err, actor.ErrDeadLetter), errors.Is(err, remote.ErrDeadLetter):
			retry, dead = true, true
		case err != nil:
			return nil, err
		default:
			if o, ok := res.(*Overloaded); ok {
				// Not processed, but not resent either: the grain had no
				// room, and a resend would only add to its load.
				return nil, fmt.Errorf("%w: %s/%s: %s", ErrOverloaded, kind, identity, o.GetReason())
			}
			if _, ok := res.(*Retry); ok {
				retry = true
			} else if _, ok := res.(*actor.DeadLetterResponse); ok {
				retry, dead = true, true
			}
		}
		if !retry {
			return res, nil
		}
		c.lookup.Forget(kind, identity, pid)
		if dead {
			released, err := c.lookup.repairDeadPID(ctx, kind, identity, pid)
			if err != nil {
				return nil, err
			}
			if released {
				if repaired {
					return nil, fmt.Errorf("%w: %s/%s: a second activation did not answer either", location.ErrTimeout, kind, identity)
				}
				repaired = true
				continue
			}
		}
		t := time.NewTimer(wait.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %s/%s did not settle on an owner", location.ErrTimeout, kind, identity)
		case <-t.C:
		}
	}
}

func (c *Context) await(ctx context.Context, pid *actor.PID, message any) (any, error) {
	timeout := time.Until(deadline(ctx))
	if timeout <= 0 {
		return nil, location.ErrTimeout
	}
	left := c.lookup.leaveSignal(pid.Address)
	select {
	case <-left:
		return nil, c.lookup.lostOwner(ctx, pid.Address, "has left")
	default:
	}
	remoteOwner := pid.Address != c.lookup.selfAddress()
	if remoteOwner && c.lookup.linkDown(pid.Address) {
		// Nothing is sent: it would only wait out the deadline.
		return nil, c.lookup.lostOwner(ctx, pid.Address, "takes no connection from here; nothing was sent")
	}
	sys := c.lookup.cluster.ActorSystem
	f := c.requestFuture(ctx, pid, message, timeout)
	done := awaitFuture(f)
	// probe fires once the call was left unanswered for linkProbeAfter;
	// checked then waits for the dial's verdict (link.go).
	var probe <-chan time.Time
	if remoteOwner && timeout > linkProbeAfter {
		t := time.NewTimer(linkProbeAfter)
		defer t.Stop()
		probe = t.C
	}
	var checked <-chan struct{}
	var down func() bool
	for {
		select {
		case r := <-done:
			if errors.Is(r.err, actor.ErrTimeout) || errors.Is(r.err, remote.ErrTimeout) {
				return nil, fmt.Errorf("%w: no reply from %s", location.ErrTimeout, pid)
			}
			return r.res, r.err
		case <-left:
			endFuture(sys, f)
			return nil, c.lookup.lostOwner(ctx, pid.Address, "left during the request")
		case <-probe:
			probe = nil
			checked, down = c.lookup.probeLink(pid.Address)
		case <-checked:
			checked = nil
			if down() {
				endFuture(sys, f)
				return nil, c.lookup.lostOwner(ctx, pid.Address, "takes no connection from here during the request")
			}
		case <-ctx.Done():
			endFuture(sys, f)
			return nil, fmt.Errorf("%w: no reply from %s", location.ErrTimeout, pid)
		}
	}
}

// futureResult is what a future resolved to.
type futureResult struct {
	res any
	err error
}

// awaitFuture waits for f on a goroutine of its own, so the caller can
// wait for other things too. A caller that stops waiting before f
// resolves ends f (endFuture), so that the goroutine ends with the call:
// otherwise it would outlive it until f's own timeout, and calls that
// give up early (a caller's deadline, an owner seen leaving) would pile
// up goroutines beyond what is in flight.
func awaitFuture(f *actor.Future) <-chan futureResult {
	done := make(chan futureResult, 1)
	go func() {
		res, err := f.Result()
		done <- futureResult{res, err}
	}()
	return done
}

// endFuture resolves f now, if it has not resolved yet, releasing its
// waiter; a reply that comes later goes to the dead letters, as one to a
// future that timed out does.
func endFuture(sys *actor.ActorSystem, f *actor.Future) {
	// Only a future still registered: stopping one that resolved
	// meanwhile would reach the dead-letter process instead.
	if p, ok := sys.ProcessRegistry.Get(f.PID()); ok {
		p.Stop(f.PID())
	}
}

func deadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(time.Minute)
}

// RequestFuture implements cluster.Context.
func (c *Context) RequestFuture(identity, kind string, message any, opts ...pcluster.GrainCallOption) (*actor.Future, error) {
	cfg := pcluster.NewGrainCallOptions(c.lookup.cluster)
	for _, o := range opts {
		o(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	pid, err := c.lookup.Resolve(ctx, kind, identity)
	if err != nil {
		return nil, err
	}
	return c.lookup.cluster.ActorSystem.Root.RequestFuture(pid, message, cfg.Timeout), nil
}

// NewContext returns a context over the lookup's cluster, for typed
// clients that want ctx-bounded calls.
func NewContext(l *Lookup) *Context { return &Context{lookup: l} }
