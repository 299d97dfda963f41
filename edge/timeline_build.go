package edge

import (
	"slices"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// timelineInput is everything one order's timeline is assembled from, as
// the stores answered.
type timelineInput struct {
	Events     []eventstore.Envelope     // version order
	History    []location.OwnershipEvent // oldest first
	Operations []relocation.Operation    // oldest first
	Names      map[string]string         // member id → node name
	// Reservation and Authorization are nil when the module recorded no
	// result under the order's id.
	Reservation   *commerce.ReservationRecord
	Authorization *commerce.AuthorizationRecord
}

// buildTimeline turns what the stores answered into one list in time
// order. It is a pure function of its input.
//
// Each source keeps its own order whatever the clocks say: events by
// version, ownership changes and operations as their stores list them.
// Their times come from different members' clocks, so a plain sort by time
// could show version 5 before version 4; instead the sources are merged,
// always taking the earliest of their next entries (mergeTimeline). An
// effect goes with the events, just before the event that recorded its
// result.
func buildTimeline(in timelineInput) []TimelineEntry {
	ownership := make([]TimelineEntry, 0, len(in.History))
	for _, h := range in.History {
		ownership = append(ownership, TimelineEntry{AtUnixMs: h.AtUnixMs, Kind: EntryOwnership,
			Change: string(h.Kind), Member: h.Member, Node: in.Names[h.Member], Generation: h.Generation})
	}
	ops := make([]TimelineEntry, 0, len(in.Operations))
	for _, op := range in.Operations {
		kind := string(op.Kind)
		if op.Kind == relocation.KindRelocation {
			kind = "relocation"
		}
		ops = append(ops, TimelineEntry{AtUnixMs: op.StartedAtUnixMs, Kind: EntryOperation,
			OperationID: op.ID, OperationKind: kind, OperationState: string(op.State), Source: op.Source, Target: op.Target,
			Generation: op.Generation, NewGeneration: op.NewGeneration, Member: op.Member, Node: in.Names[op.Member],
			Caller: op.Caller, Error: op.Error, UpdatedAtUnixMs: op.UpdatedAtUnixMs})
	}
	// At equal times: an operation is recorded before the ownership change
	// it makes, and an owner is activated before it appends.
	return mergeTimeline(ops, ownership, eventsWithEffects(in))
}

// pendingEffect is an effect entry and the event types that record its
// result.
type pendingEffect struct {
	entry      TimelineEntry
	recordedBy []string
}

func timelineEffects(in timelineInput) []pendingEffect {
	var out []pendingEffect
	if r := in.Reservation; r != nil {
		e := TimelineEntry{Kind: EntryEffect, Effect: EffectReservation, EffectID: r.ReservationID,
			Result: "accepted", Calls: r.ReserveCalls}
		if !r.Reserve.GetAccepted() {
			e.Result, e.Reason = "rejected", r.Reserve.GetReason()
		}
		out = append(out, pendingEffect{e, []string{order.TypeInventoryReserved, order.TypeInventoryReservationFailed}})
		if r.Release != nil {
			e := TimelineEntry{Kind: EntryEffect, Effect: EffectRelease, EffectID: r.ReservationID,
				Result: "released", Calls: r.ReleaseCalls}
			if !r.Release.GetReleased() {
				e.Result, e.Reason = "refused", r.Release.GetReason()
			}
			out = append(out, pendingEffect{e, []string{order.TypeInventoryReleased}})
		}
	}
	if a := in.Authorization; a != nil {
		e := TimelineEntry{Kind: EntryEffect, Effect: EffectAuthorization, EffectID: a.PaymentID,
			Result: "accepted", Calls: a.Calls, Amount: a.Captured}
		if !a.Result.GetAccepted() {
			e.Result, e.Reason = "declined", a.Result.GetReason()
		}
		out = append(out, pendingEffect{e, []string{order.TypePaymentAuthorized, order.TypePaymentFailed}})
	}
	return out
}

// eventsWithEffects lists the events in version order, each effect just
// before the first event that records its result, at that event's time;
// an effect no event records follows the last event, at its time.
func eventsWithEffects(in timelineInput) []TimelineEntry {
	effects := timelineEffects(in)
	out := make([]TimelineEntry, 0, len(in.Events)+len(effects))
	var last int64
	for _, ev := range in.Events {
		for i := range effects {
			e := &effects[i]
			if e.recordedBy != nil && slices.Contains(e.recordedBy, ev.EventType) {
				e.entry.AtUnixMs, e.entry.RecordedByVersion = ev.CreatedAtUnixMs, ev.Version
				out = append(out, e.entry)
				e.recordedBy = nil // placed
			}
		}
		out = append(out, TimelineEntry{AtUnixMs: ev.CreatedAtUnixMs, Kind: EntryEvent, Version: ev.Version,
			EventType: ev.EventType, EventID: ev.EventID, SourceCommandID: ev.SourceCommandID,
			FenceGeneration: ev.FenceGeneration, FenceEpoch: ev.FenceEpoch})
		last = ev.CreatedAtUnixMs
	}
	for _, e := range effects {
		if e.recordedBy != nil {
			e.entry.AtUnixMs, e.entry.Unrecorded = last, true
			out = append(out, e.entry)
		}
	}
	return out
}

// mergeTimeline merges sequences into one, each keeping its own order:
// it always takes the earliest of the sequences' next entries, the
// earlier sequence (in argument order) at equal times. Sorted inputs give
// a sorted output; an input out of time order (clocks of different
// members) stays in its own order and the others interleave around it.
func mergeTimeline(seqs ...[]TimelineEntry) []TimelineEntry {
	n := 0
	for _, s := range seqs {
		n += len(s)
	}
	out := make([]TimelineEntry, 0, n)
	next := make([]int, len(seqs))
	for len(out) < n {
		pick := -1
		for i, s := range seqs {
			if next[i] < len(s) && (pick < 0 || s[next[i]].AtUnixMs < seqs[pick][next[pick]].AtUnixMs) {
				pick = i
			}
		}
		out = append(out, seqs[pick][next[pick]])
		next[pick]++
	}
	return out
}
