package takeovertest

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

func orderIDs(hs []heldOrder) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.orderID)
	}
	sort.Strings(out)
	return out
}

// TestTakeoverAfterAKill: orders are held at every step, each after its
// module call and before its append, on workflow-a, which is then
// SIGKILLed. Its orders answer OWNER_GONE (nothing fails over by itself)
// until the operator takes the member over with the CLI; then the next
// command activates each on the live member, which replays and finishes
// it. Every order ends terminal, each reservation and authorization
// exists once (effect records and stock), and no stream has a gap or a
// duplicate.
func TestTakeoverAfterAKill(t *testing.T) {
	e := startCluster(t)
	victim := localcluster.WorkflowA
	onVictim, elsewhere := e.holdOn(victim, everyStep)
	all := append(append([]heldOrder{}, onVictim...), elsewhere...)
	ctx := ctxT(t, 2*time.Minute)

	// Each victim order has made its step's effect and not recorded it.
	for _, h := range onVictim {
		e.checkHeld(h)
	}

	// A client of each victim order waits for its outcome on api-a, which
	// started it and counts on its owner's notice over the cluster link:
	// the kill drops that link, and the waits must end once their orders
	// do under the next owner, not when their time runs out.
	waits := make(map[string]<-chan lastWait, len(onVictim))
	for _, h := range onVictim {
		waits[h.orderID] = e.waitUntilTerminal(ctx, h.orderID)
	}

	killedAt := time.Now()
	require.NoError(t, e.c.Kill(victim))
	// The default stays: its orders are Unavailable, OWNER_GONE, and
	// nothing is activated elsewhere.
	probe := onVictim[0].orderID
	var served []string
	require.Eventually(t, func() bool {
		_, rep, err := e.api.Continue(ctx, probe)
		if err != nil {
			return false
		}
		if rep.Status == http.StatusOK {
			served = append(served, rep.String())
		}
		return rep.Status == http.StatusServiceUnavailable && rep.Error != nil && rep.Error.Reason == "OWNER_GONE"
	}, 20*time.Second, 50*time.Millisecond, "no OWNER_GONE after the kill")
	require.Empty(t, served, "a killed owner's order must not be served before a takeover")
	unavailableAt := time.Now()
	// The members that saw it leave record it gone: that record is what
	// every process agrees on, and what the takeover goes by.
	require.Eventually(t, func() bool {
		_, gone, err := e.loc.IsGone(ctx, onVictim[0].member)
		return err == nil && gone
	}, 20*time.Second, 20*time.Millisecond, "%s never recorded gone", victim)
	goneAt := time.Now()
	for _, h := range onVictim {
		rec, err := e.loc.Get(ctx, kind, h.orderID)
		require.NoError(t, err)
		require.Equal(t, location.Record{Status: location.Ready, Owner: h.member, PIDAddress: rec.PIDAddress, PIDID: rec.PIDID, Generation: 1}, rec,
			"order %s: untouched until the takeover", h.orderID)
	}
	// The orders held on the live member go on. The victim's orders keep
	// their gates: they hold generation 1 only, and the next owner is above.
	for _, h := range elsewhere {
		require.NoError(t, e.fx.ReleaseEffectGate(ctx, h.key))
	}

	dryOut := e.cli("takeover", "-member", victim, "-dry-run", "-json")
	dry := decodeReply(t, dryOut)
	require.True(t, dry.DryRun)
	var dryIDs []string
	for _, o := range dry.Orders {
		dryIDs = append(dryIDs, o.OrderID)
		require.Equal(t, "would-take-over", o.Outcome)
	}
	require.Equal(t, orderIDs(onVictim), dryIDs, "the dry run lists exactly the killed member's orders: %s", dryOut)
	rec, err := e.loc.Get(ctx, kind, probe)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status, "a dry run changes nothing")

	rep := decodeReply(t, e.cli("takeover", "-member", victim, "-json"))
	tookAt := time.Now()
	require.Empty(t, rep.Failed)
	byID := map[string]heldOrder{}
	for _, h := range onVictim {
		byID[h.orderID] = h
	}
	require.Len(t, rep.Orders, len(onVictim))
	for _, o := range rep.Orders {
		h, ok := byID[o.OrderID]
		require.True(t, ok, "took over %s, which the victim did not own", o.OrderID)
		require.Equal(t, "taken-over", o.Outcome)
		require.Equal(t, h.member, o.Member)
		require.Equal(t, victim, o.Node)
		require.EqualValues(t, 1, o.OldGeneration)
		require.EqualValues(t, 2, o.NewGeneration)
		require.False(t, o.OwnerLive)

		rec, err := e.loc.Get(ctx, kind, o.OrderID)
		require.NoError(t, err)
		require.Equal(t, location.Record{Generation: 2, TakenOver: true}, rec, "order %s: Missing at generation+1, marked taken over", o.OrderID)
		fence, err := e.rdb.HGetAll(ctx, "sm:es:{"+o.OrderID+"}:fence").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"gen": "2", "epoch": "0"}, fence, "order %s: the fence is past the killed owner", o.OrderID)
		op, err := e.rel.GetOperation(ctx, o.OperationID)
		require.NoError(t, err)
		require.Equal(t, relocation.Operation{ID: o.OperationID, OrderID: o.OrderID, Kind: relocation.KindTakeover,
			Source: victim, Member: h.member, Caller: "cli takeovertest", Generation: 1, NewGeneration: 2,
			State: relocation.OpCommitted, StartedAtUnixMs: op.StartedAtUnixMs, UpdatedAtUnixMs: op.UpdatedAtUnixMs}, op)
		require.GreaterOrEqual(t, op.StartedAtUnixMs, goneAt.UnixMilli()-1000)
	}

	// The next command cold-activates on the live member, which replays
	// and goes on from the next step; the grain then finishes by itself.
	for _, h := range onVictim {
		st, rep, err := e.api.Continue(ctx, h.orderID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "continue %s after the takeover: %s", h.orderID, rep)
		require.NotNil(t, st)
	}
	final := e.waitTerminal(orderIDs(all), 30*time.Second)
	doneAt := time.Now()
	for _, h := range onVictim {
		var w lastWait
		select {
		case w = <-waits[h.orderID]:
		case <-ctx.Done():
			require.FailNow(t, "a client's wait for "+h.orderID+" never ended")
		}
		require.NoError(t, w.err, "wait for %s", h.orderID)
		require.Equal(t, final[h.orderID], w.state.GetStatus().String(), "the wait for %s answered its outcome", h.orderID)
		require.Less(t, w.took, waitTimeout-time.Second, "the wait for %s ended with its order, not with its time (%d waits)", h.orderID, w.calls)
	}

	names, err := e.loc.MemberNames(ctx)
	require.NoError(t, err)
	for _, h := range all {
		require.Equal(t, h.c.final, final[h.orderID], "order %s held at %s", h.orderID, h.c.step)
		evs := e.checkStream(h.orderID, h.c.events)
		e.checkReadModelIsTheFold(h.orderID, evs)
	}
	for _, h := range onVictim {
		rec, err := e.loc.Get(ctx, kind, h.orderID)
		require.NoError(t, err)
		require.Equal(t, location.Ready, rec.Status)
		require.EqualValues(t, 3, rec.Generation, "order %s: activated above the retired generation", h.orderID)
		require.Equal(t, localcluster.WorkflowB, names[rec.Owner])
	}
	e.checkEffects(all)

	// Repeats are harmless: the member has nothing left, and an
	// operation id repeated answers its finished takeover.
	again := decodeReply(t, e.cli("takeover", "-member", victim, "-json"))
	require.Empty(t, again.Orders, "nothing left to take over")
	first := rep.Orders[0]
	status, body := e.admin(http.MethodPost, "/admin/orders/"+first.OrderID+"/takeover?operationId="+first.OperationID)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, "already-taken-over", decodeReply(t, body).Orders[0].Outcome)
	status, body = e.admin(http.MethodPost, "/admin/orders/"+first.OrderID+"/takeover")
	require.Equal(t, http.StatusConflict, status, "a live owner again: no takeover without force: %s", body)

	t.Logf("FIGURE takeover after a kill: %d orders held at every step (%d on %s); SIGKILL → OWNER_GONE answered %s → recorded gone %s → member takeover (dry run, then the takeover, by CLI) done %s → every order terminal %s; kill to terminal %s",
		len(all), len(onVictim), victim, unavailableAt.Sub(killedAt).Round(time.Millisecond), goneAt.Sub(killedAt).Round(time.Millisecond),
		tookAt.Sub(goneAt).Round(time.Millisecond), doneAt.Sub(tookAt).Round(time.Millisecond), doneAt.Sub(killedAt).Round(time.Millisecond))
}

// waitTimeout is a client wait's timeoutMs: the API's most.
const waitTimeout = 30 * time.Second

// lastWait is a client's last wait for an order: the state it answered,
// how long that wait took, and how many waits the client made.
type lastWait struct {
	state *contracts.OrderState
	took  time.Duration
	calls int
	err   error
}

// waitUntilTerminal is a client that waits for orderID's outcome on
// api-a, one bounded wait after the other until one answers a terminal
// state.
func (e *env) waitUntilTerminal(ctx context.Context, orderID string) <-chan lastWait {
	out := make(chan lastWait, 1)
	go func() {
		for calls := 1; ; calls++ {
			began := time.Now()
			st, done, rep, err := e.api.WaitTerminal(ctx, orderID, waitTimeout)
			if err == nil && !rep.OK() {
				err = fmt.Errorf("wait answered %s", rep)
			}
			if err != nil || done {
				out <- lastWait{state: st, took: time.Since(began), calls: calls, err: err}
				return
			}
		}
	}()
	return out
}
