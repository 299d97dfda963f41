package grain

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// Terminal notices over the cluster link: a caller that starts an order
// and serves notices (ServeNotices) asks, in a header of its start
// (NoticeTo), to be told of the order's end. The grain that records the
// start then sends the caller the order's state, over the link the call
// came on, once the order is terminal: Confirmed or Failed, as its
// projection stored it. No field is added to the spec's messages: the
// header says how to treat the start, never what it asks.
//
// A notice is at most once: it is sent by the grain incarnation that
// recorded the start, from memory. A grain that stops before the end (a
// relocation, a passivation, a fence) sends the order's state as it
// leaves, not terminal, so that the caller stops counting on it; a crash
// or a link that drops loses it. Whoever relies on it keeps a way to
// learn the end without it (readmodel.StartTracker).

const (
	// NoticeHeader carries the address of the member whose NoticesName
	// actor the start's grain tells of the order's end.
	NoticeHeader = "shoppingmall-notice-to"
	// NoticesName is the name of the actor ServeNotices spawns.
	NoticesName = "shoppingmall-terminal-notices"
)

// NoticeTo returns ctx whose order start asks its grain to tell the
// notices actor at address (ServeNotices, on the caller's member) of the
// order's end.
func NoticeTo(ctx context.Context, address string) context.Context {
	return placement.WithHeader(ctx, NoticeHeader, address)
}

// ServeNotices spawns, in sys, the actor the grains send their terminal
// notices to, and returns its address for NoticeTo. deliver is called on
// the actor's goroutine with each notice's state, terminal or, from a
// grain that left before the end, not; linkLost whenever the link to a
// member dropped, which may have lost a notice. Neither may block.
func ServeNotices(sys *actor.ActorSystem, deliver func(*contracts.OrderState), linkLost func()) (address string, err error) {
	pid, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if st, ok := ctx.Message().(*contracts.OrderState); ok {
			deliver(st)
		}
	}), NoticesName)
	if err != nil {
		return "", fmt.Errorf("grain: serve terminal notices: %w", err)
	}
	sys.EventStream.Subscribe(func(ev any) {
		if _, ok := ev.(*remote.EndpointTerminatedEvent); ok {
			linkLost()
		}
	})
	return pid.Address, nil
}

// noticeTo is the address a start asked the grain to tell of the order's
// end: its NoticeHeader, "" when it asked for nothing.
func noticeTo(ctx actor.Context) string {
	h := ctx.MessageHeader()
	if h == nil {
		return ""
	}
	return h.Get(NoticeHeader)
}

// tellStarter sends the order's state to the member its start asked to
// be told, once the order is terminal; once.
func (g *orderGrain) tellStarter(ctx actor.Context) {
	if g.noticeTo == "" || !g.order.Exists() || !g.order.State().Status.Terminal() {
		return
	}
	ctx.Send(actor.NewPID(g.noticeTo, NoticesName), g.cfg.Service.View(g.order))
	g.noticeTo = ""
}

// tellLeaving sends the order's state, not terminal, to the member its
// start asked to be told of the end, as the grain stops before it: that
// member stops counting on this grain's notice (a relocation, a
// passivation, a fence).
func (g *orderGrain) tellLeaving(ctx actor.Context) {
	if g.noticeTo == "" || !g.order.Exists() {
		return
	}
	ctx.Send(actor.NewPID(g.noticeTo, NoticesName), g.cfg.Service.View(g.order))
	g.noticeTo = ""
}
