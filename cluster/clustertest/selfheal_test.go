package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// allKeys lists every key of the harness' Redis, whatever its prefix.
func (h *harness) allKeys(t *testing.T) []string {
	t.Helper()
	c := h.redis.Client()
	defer c.Close()
	var out []string
	iter := c.Scan(ctxT(t, 5*time.Second), 0, "*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	require.NoError(t, iter.Err())
	slices.Sort(out)
	return out
}

// docs/contract.md, "An unknown order stays unknown", and the probe rule:
// continue or rebuild of an id with no stream answers NotFound and stores
// nothing under any prefix.
func TestProbesOfUnknownIdsLeaveNoKey(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	// The member-name records are written in the background at start.
	require.Eventually(t, func() bool {
		names, err := h.stores.Location.MemberNames(context.Background())
		return err == nil && len(names) == 2
	}, 10*time.Second, 10*time.Millisecond, "member names published")
	before := h.allKeys(t)

	for i := range 5 {
		id := fmt.Sprintf("unknown-%d", i)
		err := answered(t, func() error {
			_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: id})
			return err
		})
		require.ErrorIs(t, err, workflow.ErrNotFound)
		err = answered(t, func() error {
			_, err := a.client.RebuildOrderProjection(ctxT(t, 10*time.Second), &contracts.RebuildOrderProjectionReq{OrderId: id})
			return err
		})
		require.ErrorIs(t, err, workflow.ErrNotFound)
	}
	// The probe's grain gives its authority back after it answered.
	var after []string
	require.Eventually(t, func() bool { after = h.allKeys(t); return slices.Equal(before, after) }, 5*time.Second, 10*time.Millisecond,
		"keys after the probes: %v, before: %v", &after, before)
}

// A Ready record that names a grain which no longer exists on a live
// member (it stopped without releasing) is repaired by the first caller
// that gets a dead letter from it: the record is released and the call
// resent once, to a new activation of the next generation.
func TestDeadLetterFromARecordedPidRepairsTheRecord(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)

	rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	dead := actor.NewPID(rec.PIDAddress, rec.PIDID)
	// Stopping the grain directly skips its release: the record goes on
	// naming a pid that no longer exists.
	require.NoError(t, w.Member.System.Root.StopFuture(dead).Wait())

	res, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: req.OrderId})
	require.NoError(t, err, "the call is served by a new activation, not answered TIMEOUT forever")
	require.Equal(t, contracts.OrderStatus_Confirmed, res.GetState().GetStatus())
	now, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, req.OrderId)
	require.NoError(t, err)
	require.Equal(t, location.Ready, now.Status)
	require.Equal(t, rec.Generation+1, now.Generation)
	require.NotEqual(t, rec.PIDID, now.PIDID)
	require.Equal(t, success, h.eventTypes(t, req.OrderId), "no step ran twice")
}

// An activation whose grain cannot open its stream is never recorded
// Ready: the creation is rolled back, callers get an error at once (not a
// timeout), and the next call activates again.
func TestFailedOpenIsNotRecordedReady(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	id := "corrupt-1"
	c := h.redis.Client()
	defer c.Close()
	// An entry no workflow wrote: the stream cannot be replayed.
	require.NoError(t, c.XAdd(ctxT(t, 5*time.Second), &redis.XAddArgs{
		Stream: "sm:es:{" + id + "}:stream", Values: map[string]any{"garbage": "x"},
	}).Err())

	for range 3 {
		began := time.Now()
		_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: id})
		require.Error(t, err)
		require.False(t, errors.Is(err, location.ErrTimeout), "not a timeout: %v", err)
		require.Less(t, time.Since(began), 3*time.Second)
		rec, err := h.stores.Location.Get(ctxT(t, 5*time.Second), grain.KindName, id)
		require.NoError(t, err)
		require.NotEqual(t, location.Ready, rec.Status, "a grain that could not open is never recorded Ready")
	}
}

// Cold starts succeed while one workflow member's activator does not
// answer: the lookup asks the next member while it holds (and extends) the
// creation lock. The log proves the frozen member was asked first.
func TestColdStartSkipsAFrozenMember(t *testing.T) {
	h := newHarness(t)
	frozen := h.startWorkflow("workflow-a")
	h.startWorkflow("workflow-b")
	var logs lockedBuffer
	m, err := cluster.Start(ctxT(t, 20*time.Second), cluster.Config{
		NodeName: "api-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location,
		Logger:            slog.New(slog.NewTextHandler(io.MultiWriter(&logs, tlogWriter{t}), &slog.HandlerOptions{Level: slog.LevelWarn})),
		FrameworkLogLevel: quietFramework,
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Crash() })
	client := grain.NewClient(m.Lookup)
	waitMembers(t, m.Lookup, 2)

	activator := actor.NewPID(frozen.Member.Address(), placement.ActivatorName)
	proc, ok := frozen.Member.System.ProcessRegistry.GetLocal(placement.ActivatorName)
	require.True(t, ok)
	proc.SendSystemMessage(activator, &actor.SuspendMailbox{})
	t.Cleanup(func() { proc.SendSystemMessage(activator, &actor.ResumeMailbox{}) })

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
			_, _, errs[i] = client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err, "a frozen member does not fail a cold start")
	}
	require.Contains(t, logs.String(), "trying next member")
	require.Contains(t, logs.String(), "member="+frozen.Member.ID(), "the frozen member was the first one asked")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An activation request that reaches a member after its requester gave up
// (a member frozen while the request waited in its mailbox) must not open
// the order: the activator refuses it and hosts nothing.
func TestLateActivationIsRefused(t *testing.T) {
	h := newHarness(t)
	w := h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	waitMembers(t, a.member.Lookup, 1)
	req := h.startReq(t, commerce.DemoCartOK, commerce.DemoMethodOK)
	_, _, err := a.client.StartOrderWorkflow(ctxT(t, 10*time.Second), req)
	require.NoError(t, err)
	h.waitStatus(t, req.OrderId, contracts.OrderStatus_Confirmed)
	_, err = a.client.CloseOrder(ctxT(t, 10*time.Second), &contracts.CloseOrderReq{OrderId: req.OrderId})
	require.NoError(t, err)
	require.Eventually(t, func() bool { hosted, _ := w.Member.Lookup.Hosted(); return len(hosted) == 0 }, 5*time.Second, 10*time.Millisecond, "the closed grain stopped")

	res, err := a.member.System.Root.RequestFuture(actor.NewPID(w.Member.Address(), placement.ActivatorName), &placement.Activate{
		Kind: grain.KindName, Identity: req.OrderId, Generation: 2,
		Reason: placement.ActivationReason_ACTIVATION_REASON_COLD, DeadlineUnixMs: time.Now().Add(-time.Second).UnixMilli(),
	}, 5*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, placement.ActivationFailure_ACTIVATION_FAILURE_EXPIRED, res.(*placement.Activated).GetFailure())
	hosted, err := w.Member.Lookup.Hosted()
	require.NoError(t, err)
	require.Empty(t, hosted, "nothing was spawned")
	c := h.redis.Client()
	defer c.Close()
	gen, err := c.HGet(ctxT(t, 5*time.Second), "sm:es:{"+req.OrderId+"}:fence", "gen").Int64()
	require.NoError(t, err)
	require.EqualValues(t, 1, gen, "the stream's fence was not raised by the late request")
}

// A probe right behind another probe of the same unknown id, through
// another API, is answered NotFound too: the first probe's grain retires
// from its activator before it gives its record back, so the second
// activation gets a new grain, never the one that is stopping.
func TestBackToBackProbesOfOneUnknownIdAreNotFound(t *testing.T) {
	h := newHarness(t)
	h.startWorkflow("workflow-a")
	a := h.startAPI("api-a")
	b := h.startAPI("api-b")
	waitMembers(t, a.member.Lookup, 1)
	waitMembers(t, b.member.Lookup, 1)
	for i := range 20 {
		id := fmt.Sprintf("unknown-b2b-%d", i)
		_, err := a.client.ContinueOrderWorkflow(ctxT(t, 10*time.Second), &contracts.ContinueOrderWorkflowReq{OrderId: id})
		require.ErrorIs(t, err, workflow.ErrNotFound)
		_, err = b.client.RebuildOrderProjection(ctxT(t, 10*time.Second), &contracts.RebuildOrderProjectionReq{OrderId: id})
		require.ErrorIs(t, err, workflow.ErrNotFound)
		_, err = a.client.RebuildOrderProjection(ctxT(t, 10*time.Second), &contracts.RebuildOrderProjectionReq{OrderId: id})
		require.ErrorIs(t, err, workflow.ErrNotFound)
	}
}
