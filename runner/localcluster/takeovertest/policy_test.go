package takeovertest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// policyAfter is the -takeover-after of the policy test's APIs.
const policyAfter = time.Second

// TestTakeoverPolicy: with -takeover-after on the APIs, the command that
// finds a killed owner's order still ends 503 OWNER_GONE; the API then
// takes the order over once the owner's gone record is policyAfter old,
// and a new attempt succeeds and finishes the order, its held effect made
// once.
func TestTakeoverPolicy(t *testing.T) {
	e := startCluster(t, "SHOPPINGMALL_TAKEOVER_AFTER="+policyAfter.String())
	victim := localcluster.WorkflowA
	onVictim, elsewhere := e.holdOn(victim, everyStep[:1])
	all := append(append([]heldOrder{}, onVictim...), elsewhere...)
	ctx := ctxT(t, time.Minute)
	for _, h := range elsewhere {
		require.NoError(t, e.fx.ReleaseEffectGate(ctx, h.key))
	}
	h := onVictim[0]

	killedAt := time.Now()
	require.NoError(t, e.c.Kill(victim))
	var first time.Time
	var answers []string
	require.Eventually(t, func() bool {
		_, rep, err := e.api.Continue(ctx, h.orderID)
		if err != nil {
			return false
		}
		answers = append(answers, rep.String())
		if rep.Status == http.StatusServiceUnavailable && rep.Error != nil && rep.Error.Reason == "OWNER_GONE" && first.IsZero() {
			first = time.Now()
		}
		return rep.Status == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "no new attempt succeeded: %v", answers)
	servedAt := time.Now()
	require.False(t, first.IsZero(), "a command found the owner gone and ended OWNER_GONE first: %v", answers)

	g, gone, err := e.loc.IsGone(ctx, h.member)
	require.NoError(t, err)
	require.True(t, gone)
	ops, err := e.rel.Operations(ctx, h.orderID)
	require.NoError(t, err)
	require.Len(t, ops, 1)
	op := ops[0]
	require.Equal(t, relocation.KindTakeover, op.Kind)
	require.True(t, strings.HasPrefix(op.Caller, "policy -takeover-after="+policyAfter.String()+" at api-"), "caller %q", op.Caller)
	require.Equal(t, relocation.OpCommitted, op.State)
	require.GreaterOrEqual(t, op.StartedAtUnixMs-g.LeftAtUnixMs, policyAfter.Milliseconds(),
		"not taken over before the gone record was %s old", policyAfter)

	final := e.waitTerminal(orderIDs(all), 30*time.Second)
	for _, o := range all {
		require.Equal(t, o.c.final, final[o.orderID])
		e.checkReadModelIsTheFold(o.orderID, e.checkStream(o.orderID, o.c.events))
	}
	e.checkEffects(all)
	t.Logf("FIGURE takeover policy (-takeover-after %s): SIGKILL → first OWNER_GONE %s → recorded gone at +%s → taken over at +%s → a new attempt served %s after the kill",
		policyAfter, first.Sub(killedAt).Round(time.Millisecond), time.UnixMilli(g.LeftAtUnixMs).Sub(killedAt).Round(time.Millisecond),
		time.UnixMilli(op.StartedAtUnixMs).Sub(killedAt).Round(time.Millisecond), servedAt.Sub(killedAt).Round(time.Millisecond))
}
