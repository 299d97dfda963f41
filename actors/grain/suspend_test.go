package grain

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// suspendablePlacement is fakePlacement with the member-wide switch of
// placement.Lookup.Suspended.
type suspendablePlacement struct {
	*fakePlacement
	suspended atomic.Bool
}

func (p *suspendablePlacement) Suspended() bool { return p.suspended.Load() }

// While its member is suspended, a grain runs no turn of its own (its
// background step stays parked, with no attempt counted) and answers
// every command STORE_UNAVAILABLE; on Resumed it goes on at once and
// finishes the order.
func TestSuspendedMemberRunsNoTurnUntilResumed(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	p := &suspendablePlacement{fakePlacement: e.place}
	p.suspended.Store(true)
	act := placement.NewActivation(workflowtest.Kind, "o-1", 2, placement.ActivationReason_ACTIVATION_REASON_COLD, p,
		func(*actor.PID, error, placement.ActivationFailure) {})
	pid := e.sys.Root.Spawn(placement.WithActivation(props(e.cfg), act))

	res, err := e.sys.Root.RequestFuture(pid, &contracts.ContinueOrderWorkflowReq{OrderId: "o-1"}, 2*time.Second).Result()
	require.NoError(t, err)
	we, ok := res.(*contracts.WorkflowError)
	require.True(t, ok, "a suspended member's grain answers an error, not %T", res)
	require.ErrorIs(t, fromWire(we), ErrStoreUnavailable, "a suspended member's grain answers STORE_UNAVAILABLE: %v", res)
	require.Never(t, func() bool { return e.inv.calls.Load() > 0 || e.place.confirmsAsked() > 0 }, 300*time.Millisecond, 5*time.Millisecond,
		"a suspended member's grain touched a store")
	require.Equal(t, []string{"OrderStartedEvent"}, e.deps.Events.Types("o-1"))

	p.suspended.Store(false)
	began := time.Now()
	e.sys.Root.Send(pid, &placement.Resumed{})
	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed },
		"the resumed grain finishes its order by itself")
	require.Less(t, time.Since(began), suspendedRecheck, "Resumed fired the parked step at once, not at its recheck")
	require.Equal(t, int32(1), e.inv.calls.Load())
}
