package clustertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// The hosting cap, seen from a caller: a kind of grain whose identity
// says whether it has work left ("busy-..." always has, "done-..." never
// has), hosted on members with small limits.

const capKind = "clustertest.capped"

// cappedGrain answers a StringValue with "pong <id>", reports its work
// as its identity says, and passivates when asked only if it has none.
type cappedGrain struct {
	act  *placement.Activation
	busy bool
}

func (g *cappedGrain) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		act, ok := placement.ActivationOf(ctx)
		if !ok {
			ctx.Stop(ctx.Self())
			return
		}
		g.act, g.busy = act, strings.HasPrefix(act.Identity, "busy-")
		act.WorkLeft(ctx.Self(), g.busy)
	case *placement.Passivate:
		if g.busy {
			g.act.Stays(ctx.Self())
			return
		}
		g.act.Leaving(ctx.Self())
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.act.Lookup.Release(c, g.act.Kind, g.act.Identity, ctx.Self(), location.KeepGeneration); err != nil {
			g.act.Stays(ctx.Self())
			return
		}
		ctx.Poison(ctx.Self())
	case *wrapperspb.StringValue:
		ctx.Respond(wrapperspb.String(m.GetValue() + " " + g.act.Identity))
	}
}

func (h *harness) startCapped(name string, limits placement.Limits, reg *telemetry.Registry) *cluster.Member {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kind := pcluster.NewKind(capKind, actor.PropsFromProducer(func() actor.Actor { return &cappedGrain{} }))
	m, err := cluster.Start(ctx, cluster.Config{
		NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger(name),
		FrameworkLogLevel: quietFramework, Kinds: []*pcluster.Kind{kind}, Limits: limits, Metrics: reg,
	})
	require.NoError(h.t, err)
	h.t.Cleanup(func() { m.Crash() })
	return m
}

// callCapped pings id through ctx and tells how long the answer took.
func callCapped(t *testing.T, c *placement.Context, id string) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := c.RequestContext(ctx, id, capKind, wrapperspb.String("pong"))
	took := time.Since(start)
	if err == nil {
		require.Equal(t, "pong "+id, res.(*wrapperspb.StringValue).GetValue())
	}
	return took, err
}

func requireOverloaded(t *testing.T, took time.Duration, err error, what string) {
	t.Helper()
	require.ErrorIs(t, err, placement.ErrOverloaded, what)
	require.Equal(t, errkind.Overloaded, errkind.Of(err), "%s: OVERLOADED, never NO_ELIGIBLE_MEMBER or a timeout: %v", what, err)
	require.Less(t, took, time.Second, "%s: answered at once, not after an activation timeout", what)
	t.Logf("%s: OVERLOADED after %s", what, took.Round(time.Microsecond))
}

func refusals(t *testing.T, reg *telemetry.Registry, limit string) float64 {
	t.Helper()
	v, err := telemetry.Sum(reg.Gatherer(), placement.MetricOverloadRefusals, map[string]string{placement.LabelLimit: limit})
	require.NoError(t, err)
	return v
}

// Beyond its hosting cap a member passivates the grains with no work
// left, the one idle longest first, and never one with work left; once
// every hosted grain has work left, a new activation is refused with
// OVERLOADED at once, and counted.
func TestHostingCapPassivatesOnlyGrainsWithNoWorkLeft(t *testing.T) {
	h := newHarness(t)
	reg := telemetry.NewRegistry()
	host := h.startCapped("host-a", placement.Limits{MaxHosted: 3}, reg)
	a := h.startAPI("api-a")
	require.Eventually(t, func() bool { return len(a.member.Lookup.Eligible(capKind)) == 1 }, 10*time.Second, 10*time.Millisecond)
	c := placement.NewContext(a.member.Lookup)
	ctx := ctxT(t, 30*time.Second)
	status := func(id string) location.Record {
		rec, err := h.stores.Location.Get(ctx, capKind, id)
		require.NoError(t, err)
		return rec
	}

	for _, id := range []string{"done-1", "done-2", "busy-1"} {
		_, err := callCapped(t, c, id)
		require.NoError(t, err, id)
	}
	busy1 := status("busy-1")
	require.Equal(t, location.Ready, busy1.Status)

	// At the cap: the first to have no work left makes room.
	_, err := callCapped(t, c, "busy-2")
	require.NoError(t, err, "an activation beyond the cap is admitted while a grain with no work left can go")
	require.Eventually(t, func() bool { return status("done-1").Status == location.Missing }, 10*time.Second, 10*time.Millisecond,
		"done-1, idle longest, was passivated to make room")
	require.Equal(t, location.Ready, status("done-2").Status, "one passivation per activation")

	_, err = callCapped(t, c, "busy-3")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return status("done-2").Status == location.Missing }, 10*time.Second, 10*time.Millisecond,
		"done-2 made room next")

	// Every hosted grain has work left now.
	took, err := callCapped(t, c, "busy-4")
	requireOverloaded(t, took, err, "an activation when every hosted grain has work left")
	require.Equal(t, location.Missing, status("busy-4").Status, "nothing was recorded for the refused activation")
	require.Equal(t, 1.0, refusals(t, reg, placement.LimitHosted))
	passivated, err := telemetry.Sum(reg.Gatherer(), placement.MetricPassivationsForRoom, nil)
	require.NoError(t, err)
	require.Equal(t, 2.0, passivated)

	for _, id := range []string{"busy-1", "busy-2", "busy-3"} {
		rec := status(id)
		require.Equal(t, location.Ready, rec.Status, "%s has work left and is never passivated", id)
		require.Equal(t, host.ID(), rec.Owner)
		_, err := callCapped(t, c, id)
		require.NoError(t, err, "%s still serves", id)
	}
	require.Equal(t, busy1.PIDID, status("busy-1").PIDID, "the same grain, never passivated and activated again")
	hosted, err := host.Lookup.Hosted()
	require.NoError(t, err)
	require.Len(t, hosted, 3, "the member hosts its cap")
}

// A member with no room refuses at once, and the cold activation moves on
// to a member that has room; only when none has is it OVERLOADED, and
// never NO_ELIGIBLE_MEMBER.
func TestFullMemberIsSkippedAndNoRoomIsOverloaded(t *testing.T) {
	h := newHarness(t)
	regA, regB := telemetry.NewRegistry(), telemetry.NewRegistry()
	h.startCapped("host-a", placement.Limits{MaxHosted: 3}, regA)
	h.startCapped("host-b", placement.Limits{MaxHosted: 1}, regB)
	a := h.startAPI("api-a")
	require.Eventually(t, func() bool { return len(a.member.Lookup.Eligible(capKind)) == 2 }, 10*time.Second, 10*time.Millisecond)
	c := placement.NewContext(a.member.Lookup)

	// Round-robin asks the full host-b for one of these four whichever
	// member it starts with: that one must move on to host-a.
	for _, id := range []string{"busy-1", "busy-2", "busy-3", "busy-4"} {
		_, err := callCapped(t, c, id)
		require.NoError(t, err, "%s: a full member is skipped for one with room", id)
	}
	require.Equal(t, 1.0, refusals(t, regB, placement.LimitHosted), "host-b refused once, and the activation moved on")

	var wg sync.WaitGroup
	errs := make([]error, 4)
	took := make([]time.Duration, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i], errs[i] = callCapped(t, c, "busy-more-"+string(rune('a'+i)))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		requireOverloaded(t, took[i], err, "with no room on any member")
	}
}

const openKind = "clustertest.slow-open"

// slowOpener is a grain that opens its state only once its test lets it
// (gate), counting the opens begun.
type slowOpener struct {
	gate  <-chan struct{}
	began func()
	act   *placement.Activation
}

func (*slowOpener) OpensOnStart() {}

func (g *slowOpener) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		act, ok := placement.ActivationOf(ctx)
		if !ok {
			ctx.Stop(ctx.Self())
			return
		}
		g.act = act
		g.began()
		self, gate := ctx.Self(), g.gate
		// The open of a store that is slow to answer, off the turn.
		go func() {
			<-gate
			act.Opened(self)
		}()
	case *wrapperspb.StringValue:
		ctx.Respond(wrapperspb.String(m.GetValue() + " " + g.act.Identity))
	}
}

// Activations in progress are capped: while MaxActivations grains are
// still opening, the next activation is refused with OVERLOADED at once
// (and counted), and those in progress complete.
func TestActivationsInProgressAreCapped(t *testing.T) {
	h := newHarness(t)
	reg := telemetry.NewRegistry()
	gate := make(chan struct{})
	var mu sync.Mutex
	opening := 0
	kind := pcluster.NewKind(openKind, actor.PropsFromProducer(func() actor.Actor {
		return &slowOpener{gate: gate, began: func() { mu.Lock(); opening++; mu.Unlock() }}
	}))
	ctx := ctxT(t, 30*time.Second)
	m, err := cluster.Start(ctx, cluster.Config{
		NodeName: "host-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger("host-a"),
		FrameworkLogLevel: quietFramework, Kinds: []*pcluster.Kind{kind}, Limits: placement.Limits{MaxActivations: 2}, Metrics: reg,
	})
	require.NoError(t, err)
	t.Cleanup(m.Crash)
	a := h.startAPI("api-a")
	require.Eventually(t, func() bool { return len(a.member.Lookup.Eligible(openKind)) == 1 }, 10*time.Second, 10*time.Millisecond)
	c := placement.NewContext(a.member.Lookup)
	call := func(id string) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.RequestContext(cctx, id, openKind, wrapperspb.String("pong"))
		return time.Since(start), err
	}

	errs := make(chan error, 2)
	for _, id := range []string{"slow-1", "slow-2"} {
		go func() { _, err := call(id); errs <- err }()
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return opening == 2 }, 5*time.Second, time.Millisecond,
		"both activations are opening")
	took, err := call("slow-3")
	requireOverloaded(t, took, err, "an activation while the cap of activations is opening")
	require.Equal(t, 1.0, refusals(t, reg, placement.LimitActivations))

	close(gate)
	for range 2 {
		require.NoError(t, <-errs, "the activations in progress complete")
	}
	_, err = call("slow-3")
	require.NoError(t, err, "with the opens done there is room again")
}

const holdKind = "clustertest.holding"

// holdingGrain holds its turn on a "hold" request until its test lets it
// go (gate), so that what follows queues in its mailbox.
type holdingGrain struct {
	gate  <-chan struct{}
	began chan<- struct{}
}

func (g *holdingGrain) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*wrapperspb.StringValue); ok {
		if m.GetValue() == "hold" {
			g.began <- struct{}{}
			<-g.gate
		}
		ctx.Respond(wrapperspb.String("done " + m.GetValue()))
	}
}

// A grain whose mailbox is full answers the next request from another
// member at once with Overloaded, which the caller gets as OVERLOADED;
// the requests it queued are all served once it moves on.
func TestFullMailboxIsOverloadedAcrossMembers(t *testing.T) {
	h := newHarness(t)
	reg := telemetry.NewRegistry()
	gate, began := make(chan struct{}), make(chan struct{}, 1)
	kind := pcluster.NewKind(holdKind, actor.PropsFromProducer(func() actor.Actor {
		return &holdingGrain{gate: gate, began: began}
	}))
	ctx := ctxT(t, 30*time.Second)
	m, err := cluster.Start(ctx, cluster.Config{
		NodeName: "host-a", Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger("host-a"),
		FrameworkLogLevel: quietFramework, Kinds: []*pcluster.Kind{kind}, Limits: placement.Limits{MailboxCapacity: 2}, Metrics: reg,
	})
	require.NoError(t, err)
	t.Cleanup(m.Crash)
	a := h.startAPI("api-a")
	require.Eventually(t, func() bool { return len(a.member.Lookup.Eligible(holdKind)) == 1 }, 10*time.Second, 10*time.Millisecond)
	c := placement.NewContext(a.member.Lookup)
	type answer struct {
		msg  string
		took time.Duration
		err  error
	}
	call := func(msg string, out chan<- answer) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		res, err := c.RequestContext(cctx, "order-1", holdKind, wrapperspb.String(msg))
		if err == nil && res.(*wrapperspb.StringValue).GetValue() != "done "+msg {
			err = errors.New("unexpected reply " + res.(*wrapperspb.StringValue).GetValue())
		}
		out <- answer{msg, time.Since(start), err}
	}

	held := make(chan answer, 1)
	go call("hold", held)
	<-began
	// Three more while the grain holds its turn: two fit its mailbox.
	answers := make(chan answer, 3)
	for _, msg := range []string{"a", "b", "c"} {
		go call(msg, answers)
	}
	first := <-answers
	requireOverloaded(t, first.took, first.err, "the request beyond the mailbox's capacity")
	require.Equal(t, 1.0, refusals(t, reg, placement.LimitMailbox))
	t.Logf("refused %q after %s, while the grain still held its turn", first.msg, first.took.Round(time.Microsecond))

	close(gate)
	require.NoError(t, (<-held).err)
	for range 2 {
		r := <-answers
		require.NoError(t, r.err, "%q was queued and is served", r.msg)
	}
}
