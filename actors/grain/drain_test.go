package grain

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// answering replies to DrainReq with reply, or not at all when it is nil.
type answering struct{ reply any }

func (a answering) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*DrainReq); ok && a.reply != nil {
		ctx.Respond(a.reply)
	}
}

func TestDrainReadsEveryReplyAGrainCanGive(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	spawn := func(reply any) *actor.PID {
		return sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return answering{reply} }))
	}

	out, err := Drain(sys.Root, spawn(&DrainRes{Outcome: DrainRelocated}), &DrainReq{}, time.Second)
	require.NoError(t, err)
	require.Equal(t, DrainRelocated, out)

	out, err = Drain(sys.Root, spawn(&placement.Retry{Reason: "owner is leaving"}), &DrainReq{}, time.Second)
	require.NoError(t, err)
	require.Equal(t, DrainLeft, out, "a grain already leaving has nothing left to hand off")

	_, err = Drain(sys.Root, spawn(&contracts.WorkflowError{Reason: contracts.ErrorReason_ERROR_REASON_NOT_FOUND, Message: "x"}), &DrainReq{}, time.Second)
	require.ErrorIs(t, err, workflow.ErrNotFound)

	_, err = Drain(sys.Root, spawn(&contracts.CloseOrderRes{}), &DrainReq{}, time.Second)
	require.ErrorIs(t, err, ErrInternal)

	_, err = Drain(sys.Root, spawn(nil), &DrainReq{}, 50*time.Millisecond)
	require.ErrorIs(t, err, location.ErrTimeout)

	stopped := spawn(nil)
	require.NoError(t, sys.Root.StopFuture(stopped).Wait())
	out, err = Drain(sys.Root, stopped, &DrainReq{}, time.Second)
	require.NoError(t, err)
	require.Equal(t, DrainLeft, out, "a grain that stopped after the listing is not a failure")
}
