package workflow_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// A start whose append landed but whose reply was lost (a Redis restart
// mid-call) is finished by the owner's next step: projection and mapping,
// then the rest of the order, with no retry of the start from the client.
func TestStartInDoubtIsFinishedByTheNextStep(t *testing.T) {
	e := newEnv(t)
	o := e.open("o-1", 1)
	req := e.d.StartReq("o-1", "key-1", methodOK)
	e.d.Events.LoseNextAppendReply(fmt.Errorf("%w: EOF", eventstore.ErrUnavailable))

	_, recorded, err := e.svc.Start(e.ctx, o, req)
	require.ErrorIs(t, err, eventstore.ErrUnavailable)
	require.False(t, recorded, "the outcome is unknown to the caller")
	require.True(t, e.svc.NeedsWork(o), "an order whose start may have landed has work left")
	require.Equal(t, commerce.MappingPending, e.d.Idempotency.Status("key-1"))

	for e.svc.NeedsWork(o) {
		_, err := e.svc.Step(e.ctx, o)
		require.NoError(t, err)
	}
	require.Equal(t, commerce.MappingStarted, e.d.Idempotency.Status("key-1"), "the mapping was marked by the owner")
	require.Equal(t, successOrder, e.d.Events.Types("o-1"))
	require.Equal(t, order.StatusConfirmed, o.State().Status)
}

// A start whose append did not land leaves nothing to do: the order does
// not exist, and no step invents it.
func TestStartThatDidNotLandLeavesNoWork(t *testing.T) {
	e := newEnv(t)
	o := e.open("o-1", 1)
	e.d.Events.FailNextAppend(fmt.Errorf("%w: EOF", eventstore.ErrUnavailable))
	_, _, err := e.svc.Start(e.ctx, o, e.d.StartReq("o-1", "key-1", methodOK))
	require.Error(t, err)
	_, err = e.svc.Step(e.ctx, o)
	require.NoError(t, err)
	require.False(t, o.Exists())
	require.False(t, e.svc.NeedsWork(o))
	require.Empty(t, e.d.Events.Types("o-1"))
}

// Which failures the owner retries and which wait for an operator.
func TestPermanentVersusTransient(t *testing.T) {
	for _, c := range []struct {
		err       error
		permanent bool
	}{
		{eventstore.ErrUnavailable, false},
		{commerce.ErrUnavailable, false},
		{fmt.Errorf("unclassified: %w", fmt.Errorf("boom")), false},
		{eventstore.ErrCorrupt, true},
		{commerce.ErrCorrupt, true},
		{workflow.ErrReleaseRefused, true},
		{workflow.ErrConflict, true},
		{workflow.ErrFenced, true},
		{workflow.ErrNotFound, true},
	} {
		require.Equal(t, c.permanent, workflow.Permanent(fmt.Errorf("step: %w", c.err)), "%v", c.err)
	}
}
