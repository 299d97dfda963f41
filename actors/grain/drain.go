package grain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// DrainReq asks a grain to leave its member for a graceful stop. Only the
// draining member sends it, to its own grains' local pids, so it never
// crosses the network and is a plain Go value rather than a contract.
type DrainReq struct {
	// NoPeer: the drainer saw no other member hosting the kind. A
	// non-terminal order is then closed at once: a relocation attempt
	// could only roll back, costing round trips and leaving an aborted
	// relocation record per order for an operator to wade through.
	NoPeer bool
}

// DrainRes is the answer to DrainReq.
type DrainRes struct{ Outcome DrainOutcome }

// DrainOutcome is what a drained grain did with its order's authority.
type DrainOutcome int

const (
	// Zero is left unused so that an unset outcome is never mistaken for
	// a real one.
	_ DrainOutcome = iota
	// DrainNotFound: the grain had no stream; its authority and the
	// generation it took were given back.
	DrainNotFound
	// DrainReleased: the order is terminal; its authority was released
	// where it stood. Moving it would cost a replay on another member
	// for an order that will only ever be read.
	DrainReleased
	// DrainRelocated: another member owns the order now, same generation.
	DrainRelocated
	// DrainClosed: the order is not terminal and no other member could
	// take it; its authority was released and it resumes on its next
	// command once a workflow member is up.
	DrainClosed
	// DrainLeft: the grain had already decided to stop (idle passivation,
	// close, relocation or a newer owner) before the request reached it,
	// so nothing of this member's is left to hand off.
	DrainLeft
)

func (o DrainOutcome) String() string {
	switch o {
	case DrainNotFound:
		return "not-found"
	case DrainReleased:
		return "released-terminal"
	case DrainRelocated:
		return "relocated"
	case DrainClosed:
		return "closed"
	case DrainLeft:
		return "left"
	}
	return fmt.Sprintf("DrainOutcome(%d)", int(o))
}

// Drain sends req to the order grain at pid, hosted by this process, and
// waits up to timeout for its outcome.
func Drain(root *actor.RootContext, pid *actor.PID, req *DrainReq, timeout time.Duration) (DrainOutcome, error) {
	res, err := root.RequestFuture(pid, req, timeout).Result()
	switch {
	case errors.Is(err, actor.ErrDeadLetter):
		// It stopped between the listing and this request.
		return DrainLeft, nil
	case errors.Is(err, actor.ErrTimeout):
		return 0, fmt.Errorf("%w: drain of grain %s took over %s", location.ErrTimeout, pid.GetId(), timeout)
	case err != nil:
		return 0, fmt.Errorf("%w: drain of grain %s: %w", ErrInternal, pid.GetId(), err)
	}
	switch r := res.(type) {
	case *DrainRes:
		return r.Outcome, nil
	case *placement.Retry:
		return DrainLeft, nil
	case *contracts.WorkflowError:
		return 0, fromWire(r)
	}
	return 0, fmt.Errorf("%w: unexpected drain reply %T", ErrInternal, res)
}

// drain hands the order off for a graceful stop of this member.
func (g *orderGrain) drain(ctx actor.Context, c context.Context, req *DrainReq) (any, error) {
	exists := g.order.Exists()
	if !exists || g.order.State().Status.Terminal() {
		g.retire(ctx)
		if err := g.act.Lookup.Release(c, g.act.Kind, g.act.Identity, ctx.Self(), generationToRelease(exists)); err != nil {
			return nil, err
		}
		g.leave(ctx, keepRecord)
		if !exists {
			return &DrainRes{Outcome: DrainNotFound}, nil
		}
		return &DrainRes{Outcome: DrainReleased}, nil
	}
	if !req.NoPeer {
		_, err := g.relocate(ctx, c, &contracts.RelocateOrderReq{OrderId: g.act.Identity})
		if err == nil {
			return &DrainRes{Outcome: DrainRelocated}, nil
		}
		// A peer that left or refused in the meantime rolls the move back:
		// closing is then the only hand-off left. Any other failure
		// happened after the target took over and is not ours to undo.
		if !errors.Is(err, ErrFailedPrecondition) {
			return nil, err
		}
	}
	if _, err := g.close(ctx, c); err != nil {
		return nil, err
	}
	return &DrainRes{Outcome: DrainClosed}, nil
}
