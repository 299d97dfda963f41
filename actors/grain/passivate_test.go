package grain

import (
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// hostLog is what a grain told its activator about its work.
type hostLog struct {
	mu     sync.Mutex
	work   []bool // each WorkLeft change: true = work left
	stayed int
}

func (h *hostLog) lastWork() (left, reported bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.work) == 0 {
		return false, false
	}
	return h.work[len(h.work)-1], true
}

func (h *hostLog) stays() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stayed
}

// spawnHosted is spawn with the grain's reports to its activator logged.
func (e *env) spawnHosted(id string, gen int64) (*actor.PID, *hostLog) {
	log := &hostLog{}
	act := placement.NewActivation(workflowtest.Kind, id, gen, placement.ActivationReason_ACTIVATION_REASON_COLD, e.place,
		func(_ *actor.PID, err error, failure placement.ActivationFailure) {
			e.opens <- opened{err: err, failure: failure}
		})
	act.WatchHost(func(_ *actor.PID, left bool) {
		log.mu.Lock()
		log.work = append(log.work, left)
		log.mu.Unlock()
	}, func(*actor.PID) {
		log.mu.Lock()
		log.stayed++
		log.mu.Unlock()
	})
	return e.sys.Root.Spawn(placement.WithActivation(props(e.cfg), act)), log
}

// A finished order reports that it has no work left, and passivates when
// its member asks it to make room: it releases its identity, keeping the
// generation, and stops.
func TestFinishedOrderPassivatesWhenAskedForRoom(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	pid, log := e.spawnHosted("o-1", 2)
	require.NoError(t, e.waitOpened().err)
	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed }, "the order finishes")
	e.eventually(func() bool { left, ok := log.lastWork(); return ok && !left }, "and reports no work left")

	e.sys.Root.Send(pid, &placement.Passivate{})
	e.eventually(func() bool { return e.stopped(pid) }, "a grain with no work left passivates when asked")
	require.Equal(t, []location.Generation{location.KeepGeneration}, e.place.releases())
	require.Zero(t, log.stays())
}

// An order with work left reports it, and never passivates to make room:
// asked, it stays and says so, and finishes its work once it can.
func TestOrderWithWorkLeftStaysWhenAskedForRoom(t *testing.T) {
	e := newEnv(t)
	e.started("o-1")
	e.inv.failures.Store(1 << 30)
	pid, log := e.spawnHosted("o-1", 2)
	require.NoError(t, e.waitOpened().err)
	e.eventually(func() bool { return e.inv.calls.Load() > 2 }, "the step is being retried")
	left, reported := log.lastWork()
	require.True(t, reported && left, "the grain reports work left")

	e.sys.Root.Send(pid, &placement.Passivate{})
	e.eventually(func() bool { return log.stays() == 1 }, "it answers that it stays")
	require.False(t, e.stopped(pid))
	require.Empty(t, e.place.releases(), "an order with work left is never passivated to make room")

	e.inv.failures.Store(0)
	e.eventually(func() bool { return statusOf(t, e.deps.Events.Types("o-1")) == order.StatusConfirmed }, "the order finishes where it is")
	e.eventually(func() bool { left, _ := log.lastWork(); return !left }, "and then reports no work left")
}
