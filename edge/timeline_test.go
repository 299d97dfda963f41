package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

func at(ms int64, kind, tag string) TimelineEntry {
	return TimelineEntry{AtUnixMs: ms, Kind: kind, EventID: tag}
}

func tags(es []TimelineEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.EventID
	}
	return out
}

func TestMergeTimelineKeepsEachSourcesOrder(t *testing.T) {
	ops := []TimelineEntry{at(10, EntryOperation, "op1"), at(40, EntryOperation, "op2")}
	own := []TimelineEntry{at(5, EntryOwnership, "own1"), at(10, EntryOwnership, "own2"), at(50, EntryOwnership, "own3")}
	// The events come from two members' clocks: version 3 carries an
	// earlier time than version 2. It stays after version 2.
	evs := []TimelineEntry{at(6, EntryEvent, "v1"), at(30, EntryEvent, "v2"), at(20, EntryEvent, "v3"), at(45, EntryEvent, "v4")}

	got := mergeTimeline(ops, own, evs)
	require.Equal(t, []string{"own1", "v1", "op1", "own2", "v2", "v3", "op2", "v4", "own3"}, tags(got),
		"earliest next entry first; at 10 the operation before the ownership change; v3 never before v2")
	require.Empty(t, mergeTimeline(nil, []TimelineEntry{}))
	require.Equal(t, []string{"v1", "v2", "v3", "v4"}, tags(mergeTimeline(evs)))
}

func TestBuildTimelinePlacesEffectsAtTheEventsThatRecordThem(t *testing.T) {
	id := "ord-1"
	ev := func(v, ms int64, typ string, gen, epoch int64) eventstore.Envelope {
		return eventstore.Envelope{EventID: order.EventID(id, v), OrderID: id, EventType: typ, Version: v,
			SourceCommandID: fmt.Sprintf("cmd-%d", v), CreatedAtUnixMs: ms, FenceGeneration: gen, FenceEpoch: epoch}
	}
	declined := "card declined"
	in := timelineInput{
		Events: []eventstore.Envelope{
			ev(1, 100, order.TypeOrderStarted, 1, 1),
			ev(2, 110, order.TypeInventoryReserved, 1, 1),
			ev(3, 300, order.TypePaymentFailed, 2, 1),
		},
		History: []location.OwnershipEvent{
			{Kind: location.OwnershipActivated, Member: "m-a", Generation: 1, AtUnixMs: 99},
			{Kind: location.OwnershipTakenOver, Member: "m-a", Generation: 2, AtUnixMs: 200},
			{Kind: location.OwnershipActivated, Member: "m-b", Generation: 3, AtUnixMs: 250},
		},
		Operations: []relocation.Operation{{ID: "tk-1", OrderID: id, Kind: relocation.KindTakeover, Source: "workflow-a",
			Generation: 1, NewGeneration: 2, Member: "m-a", Caller: "ops", State: relocation.OpCommitted,
			StartedAtUnixMs: 200, UpdatedAtUnixMs: 201}},
		Names: map[string]string{"m-a": "workflow-a", "m-b": "workflow-b"},
		Reservation: &commerce.ReservationRecord{ReservationID: order.ReservationID(id),
			Reserve: &contracts.ReserveInventoryRes{Accepted: true}, Release: &contracts.ReleaseInventoryRes{Released: true},
			ReserveCalls: 1, ReleaseCalls: 2},
		Authorization: &commerce.AuthorizationRecord{PaymentID: order.PaymentID(id),
			Result: &contracts.AuthorizePaymentRes{Reason: &declined}, Calls: 2},
	}
	got := buildTimeline(in)
	want := []TimelineEntry{
		{AtUnixMs: 99, Kind: EntryOwnership, Change: "activation", Member: "m-a", Node: "workflow-a", Generation: 1},
		{AtUnixMs: 100, Kind: EntryEvent, Version: 1, EventType: order.TypeOrderStarted, EventID: order.EventID(id, 1),
			SourceCommandID: "cmd-1", FenceGeneration: 1, FenceEpoch: 1},
		{AtUnixMs: 110, Kind: EntryEffect, Effect: EffectReservation, EffectID: "rsv-ord-1", Result: "accepted", Calls: 1,
			RecordedByVersion: 2},
		{AtUnixMs: 110, Kind: EntryEvent, Version: 2, EventType: order.TypeInventoryReserved, EventID: order.EventID(id, 2),
			SourceCommandID: "cmd-2", FenceGeneration: 1, FenceEpoch: 1},
		{AtUnixMs: 200, Kind: EntryOperation, OperationID: "tk-1", OperationKind: "takeover", OperationState: "committed",
			Source: "workflow-a", Generation: 1, NewGeneration: 2, Member: "m-a", Node: "workflow-a", Caller: "ops",
			UpdatedAtUnixMs: 201},
		{AtUnixMs: 200, Kind: EntryOwnership, Change: "takeover", Member: "m-a", Node: "workflow-a", Generation: 2},
		{AtUnixMs: 250, Kind: EntryOwnership, Change: "activation", Member: "m-b", Node: "workflow-b", Generation: 3},
		{AtUnixMs: 300, Kind: EntryEffect, Effect: EffectAuthorization, EffectID: "pay-ord-1", Result: "declined",
			Reason: declined, Calls: 2, RecordedByVersion: 3},
		{AtUnixMs: 300, Kind: EntryEvent, Version: 3, EventType: order.TypePaymentFailed, EventID: order.EventID(id, 3),
			SourceCommandID: "cmd-3", FenceGeneration: 2, FenceEpoch: 1},
		// No InventoryReleasedEvent yet: the release was made, not recorded.
		{AtUnixMs: 300, Kind: EntryEffect, Effect: EffectRelease, EffectID: "rsv-ord-1", Result: "released", Calls: 2,
			Unrecorded: true},
	}
	require.Equal(t, want, got)

	// A rejected reservation and no authorization.
	why := "insufficient stock for sku-a"
	in = timelineInput{
		Events: []eventstore.Envelope{ev(1, 100, order.TypeOrderStarted, 1, 1), ev(2, 120, order.TypeInventoryReservationFailed, 1, 1)},
		Reservation: &commerce.ReservationRecord{ReservationID: "rsv-ord-1",
			Reserve: &contracts.ReserveInventoryRes{Reason: &why}, ReserveCalls: 1},
	}
	got = buildTimeline(in)
	require.Len(t, got, 3)
	require.Equal(t, TimelineEntry{AtUnixMs: 120, Kind: EntryEffect, Effect: EffectReservation, EffectID: "rsv-ord-1",
		Result: "rejected", Reason: why, Calls: 1, RecordedByVersion: 2}, got[1])
}

// Fakes of the timeline's stores.

type fakeTimelineStores struct {
	events  map[string][]eventstore.Envelope
	history map[string][]location.OwnershipEvent
	records map[string]location.Record
	names   map[string]string
	ops     map[string][]relocation.Operation
	rsv     map[string]commerce.ReservationRecord
	pay     map[string]commerce.AuthorizationRecord
	err     error
}

func (f *fakeTimelineStores) Load(_ context.Context, id string) ([]eventstore.Envelope, error) {
	return f.events[id], f.err
}

func (f *fakeTimelineStores) History(_ context.Context, kind, id string) ([]location.OwnershipEvent, error) {
	if kind != grain.KindName {
		return nil, fmt.Errorf("kind %q", kind)
	}
	return f.history[id], nil
}

func (f *fakeTimelineStores) Get(_ context.Context, _, id string) (location.Record, error) {
	return f.records[id], nil
}

func (f *fakeTimelineStores) MemberNames(context.Context) (map[string]string, error) {
	return f.names, nil
}

func (f *fakeTimelineStores) Operations(_ context.Context, id string) ([]relocation.Operation, error) {
	return f.ops[id], nil
}

func (f *fakeTimelineStores) Reservation(_ context.Context, id string) (commerce.ReservationRecord, error) {
	r, ok := f.rsv[id]
	if !ok {
		return r, fmt.Errorf("%w: %s", commerce.ErrNotFound, id)
	}
	return r, nil
}

func (f *fakeTimelineStores) Authorization(_ context.Context, id string) (commerce.AuthorizationRecord, error) {
	r, ok := f.pay[id]
	if !ok {
		return r, fmt.Errorf("%w: %s", commerce.ErrNotFound, id)
	}
	return r, nil
}

func timelineEnv(t *testing.T) (*env, *fakeTimelineStores) {
	f := &fakeTimelineStores{
		events: map[string][]eventstore.Envelope{"ord-1": {{EventID: "evt-ord-1-1", OrderID: "ord-1", EventType: order.TypeOrderStarted,
			Version: 1, CreatedAtUnixMs: 1000, FenceGeneration: 1, FenceEpoch: 1}}},
		history: map[string][]location.OwnershipEvent{"ord-1": {{Kind: location.OwnershipActivated, Member: "m-a", Generation: 1, AtUnixMs: 999}},
			"ord-gone": {{Kind: location.OwnershipActivated, Member: "m-a", Generation: 1, AtUnixMs: 5}}},
		records: map[string]location.Record{"ord-1": {Status: location.Ready, Owner: "m-a", Generation: 1}},
		names:   map[string]string{"m-a": "workflow-a"},
		ops:     map[string][]relocation.Operation{},
		rsv:     map[string]commerce.ReservationRecord{},
		pay:     map[string]commerce.AuthorizationRecord{},
	}
	e := newEnv(t, withAdmin(), func(c *Config) {
		c.Timeline = &Timeline{Events: f, Ownership: f, Operations: f, Inventory: f, Payment: f,
			Now: func() time.Time { return time.UnixMilli(5000) }}
	})
	return e, f
}

func TestTimelineRoute(t *testing.T) {
	e, f := timelineEnv(t)
	st := &contracts.OrderState{OrderId: "ord-1", Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: 1000}
	e.rm.put(st)

	w := e.admin("GET", "/admin/orders/ord-1/timeline", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rep TimelineReply
	dec := json.NewDecoder(strings.NewReader(w.Body.String()))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep))
	require.Equal(t, "ord-1", rep.OrderID)
	require.EqualValues(t, 5000, rep.AsOfUnixMs)
	require.Equal(t, TimelineAuthority{Status: "Ready", Member: "m-a", Node: "workflow-a", Generation: 1}, rep.Authority)
	require.Equal(t, []TimelineEntry{
		{AtUnixMs: 999, Kind: EntryOwnership, Change: "activation", Member: "m-a", Node: "workflow-a", Generation: 1},
		{AtUnixMs: 1000, Kind: EntryEvent, Version: 1, EventType: order.TypeOrderStarted, EventID: "evt-ord-1-1", FenceGeneration: 1, FenceEpoch: 1},
	}, rep.Entries)
	got := &contracts.OrderState{}
	require.NoError(t, contracts.UnmarshalJSON(rep.State, got))
	require.True(t, proto.Equal(st, got), "the read model's state, in the contract's JSON")
	require.EqualValues(t, 1, rep.StateVersion)
	require.Zero(t, e.orders.calls(), "the timeline never reaches the grain")

	// Known only to the Location Store: listed, with no state.
	w = e.admin("GET", "/admin/orders/ord-gone/timeline", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `"state":null`)
	require.Contains(t, w.Body.String(), `"authority":{"status":"Missing","generation":0}`)

	w = e.admin("GET", "/admin/orders/ord-unknown/timeline", "")
	require.Equal(t, http.StatusNotFound, w.Code, w.Body.String())
	require.Equal(t, CodeNotFound, decodeError(t, w).Code)

	w = e.admin("GET", "/admin/orders/a%7Bb/timeline", "")
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Equal(t, "orderId", decodeError(t, w).Field)

	f.err = fmt.Errorf("%w: down", errkind.New(errkind.StoreUnavailable, "store"))
	w = e.admin("GET", "/admin/orders/ord-1/timeline", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, ReasonStoreUnavailable, decodeError(t, w).Reason)
}

func TestTimelineNeedsTheTokenAndTheAdminListener(t *testing.T) {
	e, _ := timelineEnv(t)
	for _, auth := range []string{"", "Bearer wrong"} {
		w := serveAs(e.srv.AdminHandler(), "GET", "/admin/orders/ord-1/timeline", "", auth)
		require.Equal(t, http.StatusUnauthorized, w.Code, "authorization %q", auth)
		require.Equal(t, CodeUnauthenticated, decodeError(t, w).Code)
	}
	w := e.do("GET", "/admin/orders/ord-1/timeline", "")
	require.Equal(t, http.StatusNotFound, w.Code, "never on the public handler")

	// Without a Timeline the route does not exist.
	plain := newEnv(t, withAdmin())
	w = plain.admin("GET", "/admin/orders/ord-1/timeline", "")
	require.Equal(t, http.StatusNotFound, w.Code)

	_, err := New(Config{NodeID: "n", Idempotency: e.idem, Carts: e.carts, ReadModel: e.rm, Orders: e.orders, Topology: e.topo,
		Timeline: &Timeline{}})
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "Timeline.Events")
}
