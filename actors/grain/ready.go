package grain

import (
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// carryReady hands a new order's start the writes that record this grain
// Ready, when its activator left the commit to the grain (it does only
// where the Location Store can spell the commit out as writes in the
// start's slot: location.Redis.ReadyWritesFor, on one server): the start's
// append then carries them (workflow.Order.CarryFirstWrite), and the one
// round trip records the activation and the order. It reports whether
// the start carries them; otherwise the caller makes sure of the record
// before anything is written (placement.Activation.EnsureReady).
func (g *orderGrain) carryReady(starting bool) bool {
	if !starting || !g.order.Deferred() {
		return false
	}
	w, ok := g.act.TakeReady()
	if !ok {
		return false
	}
	if !g.order.CarryFirstWrite(readyCompanions(w)) {
		// Taken but not carried: the activator makes the commit, and
		// EnsureReady waits for nobody. Not reached while the order is
		// Deferred, which the check above made sure of.
		g.act.ReadyWritten(placement.ReadyNotWritten)
		return false
	}
	return true
}

// readyCompanions is w as the writes of the start's append, as the
// Location Store spells them (location.ReadyWrites.AddTo).
func readyCompanions(w location.ReadyWrites) []eventstore.Companion {
	var ws eventstore.Writes
	w.AddTo(&ws)
	return ws
}

// readyWrite tells the activation what came of the writes a start
// carried (workflow.Order.FirstWritten).
func readyWrite(w workflow.FirstWrite) placement.ReadyWrite {
	switch w {
	case workflow.FirstWriteLanded:
		return placement.ReadyLanded
	case workflow.FirstWriteRefused:
		return placement.ReadyLockLost
	case workflow.FirstWriteInDoubt:
		return placement.ReadyInDoubt
	}
	return placement.ReadyNotWritten
}
