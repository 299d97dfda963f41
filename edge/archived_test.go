package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// fakeArchive is the cold tier's answers.
type fakeArchive struct {
	rec     eventstore.SealedRecord
	events  []eventstore.Envelope
	state   *contracts.OrderState
	err     error
	history int
	rebuilt int
}

func (f *fakeArchive) History(context.Context, string) (eventstore.SealedRecord, []eventstore.Envelope, error) {
	f.history++
	return f.rec, f.events, f.err
}

func (f *fakeArchive) Rebuild(context.Context, string) (*contracts.OrderState, bool, error) {
	f.rebuilt++
	if f.err != nil {
		return nil, false, f.err
	}
	return f.state, false, nil
}

// archivedEnv is an API whose event store reports ord-arc archived, a
// Confirmed order at version 7, generation 3, with the archive given when
// withArchive.
func archivedEnv(t *testing.T, withArchive bool) (*env, *fakeArchive, *contracts.OrderState) {
	st := &contracts.OrderState{OrderId: "ord-arc", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 1700}
	b, err := readmodel.EncodeState(st)
	require.NoError(t, err)
	// The name the read model keeps its state under (readmodel.KeptState).
	rec := eventstore.SealedRecord{Fence: eventstore.Fence{Generation: 3, Epoch: 9}, SealedAtUnixMs: 5000, ArchivedAtUnixMs: 5100,
		Version: 7, Kept: map[string]string{"readmodel.state": string(b)}}
	got, _, err := readmodel.KeptState(rec)
	require.NoError(t, err)
	require.True(t, proto.Equal(st, got), "the fake sealed record keeps the state where the read model reads it")
	arch := &fakeArchive{rec: rec, state: st, events: []eventstore.Envelope{
		{EventID: "evt-ord-arc-1", OrderID: "ord-arc", EventType: order.TypeOrderStarted, Version: 1, CreatedAtUnixMs: 1000, FenceGeneration: 3, FenceEpoch: 9},
		{EventID: "evt-ord-arc-7", OrderID: "ord-arc", EventType: order.TypeOrderConfirmed, Version: 7, CreatedAtUnixMs: 1700, FenceGeneration: 3, FenceEpoch: 9},
	}}
	f := &fakeTimelineStores{rsv: nil, pay: nil}
	e := newEnv(t, withAdmin(), func(c *Config) {
		c.Streams = &fakeStreams{archived: map[string]eventstore.SealedRecord{"ord-arc": rec}}
		c.Timeline = &Timeline{Events: f, Ownership: f, Operations: f, Inventory: f, Payment: f}
		if withArchive {
			c.Archive = arch
		}
	})
	// Nothing about an archived order is read from the read model or the
	// hot stores: their keys are gone.
	e.rm.err = fmt.Errorf("the read model must not be read")
	f.err = fmt.Errorf("the hot event stream must not be read")
	return e, arch, st
}

// TestAnArchivedOrderAnswersWithoutItsGrain: continue answers the final
// state the sealed record keeps; rebuild-projection and the timeline
// answer from the archive, the timeline marked archived; none of them
// calls the grain (whose activation would write a Location record and a
// generation). Without the archive, or with the archive down, the two
// that need it are 503 STORE_UNAVAILABLE, never 404 or 500.
func TestAnArchivedOrderAnswersWithoutItsGrain(t *testing.T) {
	e, arch, st := archivedEnv(t, true)

	w := e.do("POST", "/orders/ord-arc/continue", "{}")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	cont := &contracts.ContinueOrderWorkflowRes{}
	require.NoError(t, contracts.UnmarshalJSON(w.Body.Bytes(), cont))
	require.True(t, proto.Equal(st, cont.GetState()), "continue answers the kept final state")
	require.Zero(t, arch.history+arch.rebuilt, "continue needs no archive read")

	w = e.do("POST", "/orders/ord-arc/rebuild-projection", "{}")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	reb := &contracts.RebuildOrderProjectionRes{}
	require.NoError(t, contracts.UnmarshalJSON(w.Body.Bytes(), reb))
	require.True(t, proto.Equal(st, reb.GetState()))
	require.Equal(t, 1, arch.rebuilt)

	w = e.admin("GET", "/admin/orders/ord-arc/timeline", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rep TimelineReply
	dec := json.NewDecoder(strings.NewReader(w.Body.String()))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep))
	require.Equal(t, &TimelineArchived{SealedAtUnixMs: 5000, ArchivedAtUnixMs: 5100, Version: 7}, rep.Archived)
	require.Equal(t, TimelineAuthority{Status: AuthorityArchived, Generation: 3}, rep.Authority)
	require.EqualValues(t, 7, rep.StateVersion)
	require.Len(t, rep.Entries, 2)
	require.Equal(t, order.TypeOrderConfirmed, rep.Entries[1].EventType, "the events come from the archive")
	got := &contracts.OrderState{}
	require.NoError(t, contracts.UnmarshalJSON(rep.State, got))
	require.True(t, proto.Equal(st, got))
	// Operator commands that need an owner are refused: nothing owns an
	// archived order, and reaching its grain would activate it.
	for _, op := range []string{"relocate", "close"} {
		w := e.admin("POST", "/admin/orders/ord-arc/"+op, "{}")
		require.Equal(t, http.StatusConflict, w.Code, w.Body.String())
		p := decodeError(t, w)
		require.Equal(t, CodeFailedPrecondition, p.Code)
		require.Contains(t, p.Message, "archived")
	}
	require.Zero(t, e.orders.calls(), "no grain call for an archived order")

	// The archive is down: continue still answers; the others are 503.
	arch.err = fmt.Errorf("read: %w", errkind.New(errkind.StoreUnavailable, "archive: unavailable"))
	require.Equal(t, http.StatusOK, e.do("POST", "/orders/ord-arc/continue", "{}").Code)
	for _, w := range []*httptest.ResponseRecorder{
		e.do("POST", "/orders/ord-arc/rebuild-projection", "{}"),
		e.admin("GET", "/admin/orders/ord-arc/timeline", ""),
	} {
		require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
		p := decodeError(t, w)
		require.Equal(t, ReasonStoreUnavailable, p.Reason)
		require.Contains(t, p.Message, "archive")
		require.NotEmpty(t, w.Header().Get("Retry-After"))
	}

	// An API without the archive says so.
	plain, _, _ := archivedEnv(t, false)
	require.Equal(t, http.StatusOK, plain.do("POST", "/orders/ord-arc/continue", "{}").Code)
	for _, w := range []*httptest.ResponseRecorder{
		plain.do("POST", "/orders/ord-arc/rebuild-projection", "{}"),
		plain.admin("GET", "/admin/orders/ord-arc/timeline", ""),
	} {
		require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
		p := decodeError(t, w)
		require.Equal(t, ReasonStoreUnavailable, p.Reason)
		require.Contains(t, p.Message, "not configured")
	}
	require.Zero(t, e.orders.calls()+plain.orders.calls(), "no grain call for an archived order")
}
