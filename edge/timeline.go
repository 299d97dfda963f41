package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// The per-order timeline (GET /admin/orders/{orderId}/timeline) puts one
// order's whole life in one list for an operator: its events with the
// fence each was written under, every ownership change, its relocation and
// takeover operations, and what its external effects answered first. It
// only reads, through the stores' read methods: it never reaches the
// order's grain, so asking about an unknown or ownerless order activates
// nothing and leaves no key behind. Assembly is buildTimeline's, a pure
// function; this file reads the stores.

// TimelineEvents reads an order's event stream (eventstore.Store).
type TimelineEvents interface {
	// Load returns every event of the order in version order, each with
	// the fence its writer held, or none for an unknown order. It has no
	// side effect.
	Load(ctx context.Context, orderID string) ([]eventstore.Envelope, error)
}

// TimelineOwnership reads the Location Store: the order's record, its
// ownership history and the member id → node name mapping.
type TimelineOwnership interface {
	Authority
	// History returns the identity's ownership changes, oldest first; none
	// for a never-seen identity. It has no side effect.
	History(ctx context.Context, kind, id string) ([]location.OwnershipEvent, error)
}

// TimelineOperations reads the Relocation Store's operation log.
type TimelineOperations interface {
	// Operations returns every relocation and takeover of the order,
	// oldest first; none for an order without operations. It has no side
	// effect.
	Operations(ctx context.Context, orderID string) ([]relocation.Operation, error)
}

// Timeline holds what the per-order timeline reads. Every method it
// calls only reads.
type Timeline struct {
	Events     TimelineEvents
	Ownership  TimelineOwnership
	Operations TimelineOperations
	// Inventory and Payment read the effect records by the order's
	// deterministic ReservationId and PaymentId.
	Inventory commerce.ReservationRecords
	Payment   commerce.AuthorizationRecords
	// Now is the reply's clock; optional, default time.Now.
	Now func() time.Time
}

// missing names the dependencies t lacks, for Config.check.
func (t *Timeline) missing() []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, d := range []struct {
		ok   bool
		name string
	}{
		{t.Events != nil, "Timeline.Events"}, {t.Ownership != nil, "Timeline.Ownership"},
		{t.Operations != nil, "Timeline.Operations"}, {t.Inventory != nil, "Timeline.Inventory"},
		{t.Payment != nil, "Timeline.Payment"},
	} {
		if !d.ok {
			out = append(out, d.name)
		}
	}
	return out
}

// Timeline entry kinds.
const (
	EntryEvent     = "event"
	EntryOwnership = "ownership"
	EntryOperation = "operation"
	EntryEffect    = "effect"
)

// Effects of the timeline: which module call an effect entry is.
const (
	EffectReservation   = "reservation"
	EffectRelease       = "release"
	EffectAuthorization = "authorization"
)

// TimelineEntry is one thing that happened to the order. AtUnixMs and
// Kind are always set; the other fields belong to one kind each and are
// left out when empty.
type TimelineEntry struct {
	AtUnixMs int64  `json:"atUnixMs"`
	Kind     string `json:"kind"`

	// event: the envelope, and the writer's fence (FenceGeneration,
	// FenceEpoch; 0 for entries written before fences were recorded).
	Version         int64  `json:"version,omitempty"`
	EventType       string `json:"eventType,omitempty"`
	EventID         string `json:"eventId,omitempty"`
	SourceCommandID string `json:"sourceCommandId,omitempty"`
	FenceGeneration int64  `json:"fenceGeneration,omitempty"`
	FenceEpoch      int64  `json:"fenceEpoch,omitempty"`

	// ownership: Change is the Location Store's kind (activation, close,
	// idle, release, relocation, takeover, discard, repair); Member the
	// member id it names, Node that member's node name, Generation the
	// generation it names (location.OwnershipEvent).
	Change     string `json:"change,omitempty"`
	Member     string `json:"member,omitempty"`
	Node       string `json:"node,omitempty"`
	Generation int64  `json:"generation,omitempty"`

	// operation (AtUnixMs is its start): OperationKind is relocation or
	// takeover; Source and Target are node names; Generation is the one
	// the operation found, NewGeneration a takeover's after it; Member is
	// the member id a takeover retired.
	OperationID     string `json:"operationId,omitempty"`
	OperationKind   string `json:"operationKind,omitempty"`
	OperationState  string `json:"operationState,omitempty"`
	Source          string `json:"source,omitempty"`
	Target          string `json:"target,omitempty"`
	NewGeneration   int64  `json:"newGeneration,omitempty"`
	Caller          string `json:"caller,omitempty"`
	Error           string `json:"error,omitempty"`
	UpdatedAtUnixMs int64  `json:"updatedAtUnixMs,omitempty"`

	// effect: Effect is reservation, release or authorization; EffectID
	// the deterministic id; Result the first result (accepted or rejected,
	// released, accepted or declined) with its Reason; Calls how often the
	// module was called with the id; Amount what an authorization
	// captured. The modules keep no time: the entry stands at the event
	// that recorded the result (RecordedByVersion). An effect no event
	// records yet (Unrecorded: made, then its owner stopped before the
	// append) stands after the last event, the earliest it can have been
	// made.
	Effect            string `json:"effect,omitempty"`
	EffectID          string `json:"effectId,omitempty"`
	Result            string `json:"result,omitempty"`
	Reason            string `json:"reason,omitempty"`
	Calls             int64  `json:"calls,omitempty"`
	Amount            int64  `json:"amount,omitempty"`
	RecordedByVersion int64  `json:"recordedByVersion,omitempty"`
	Unrecorded        bool   `json:"unrecorded,omitempty"`
}

// TimelineAuthority is the order's Location record as it stands.
type TimelineAuthority struct {
	// Status is Missing, Creating, Ready or Moving.
	Status     string `json:"status"`
	Member     string `json:"member,omitempty"`
	Node       string `json:"node,omitempty"`
	Generation int64  `json:"generation"`
}

// TimelineReply is the reply of GET /admin/orders/{orderId}/timeline.
type TimelineReply struct {
	OrderID    string `json:"orderId"`
	AsOfUnixMs int64  `json:"asOfUnixMs"`
	// State is the read model's projection (the contract's OrderState
	// JSON), null when the order has none; StateVersion the stream
	// version it reflects.
	State        json.RawMessage   `json:"state"`
	StateVersion int64             `json:"stateVersion"`
	Authority    TimelineAuthority `json:"authority"`
	// Entries are in time order (buildTimeline says how ties and clock
	// differences between members are resolved).
	Entries []TimelineEntry `json:"entries"`
	// Archived is set for an archived order: its events come from the
	// archive, its state from its sealed record, and Authority is
	// Archived at the generation the order was sealed at; its ownership
	// history and operations left Redis with it.
	Archived *TimelineArchived `json:"archived,omitempty"`
}

// TimelineArchived says when an archived order was sealed and compacted,
// and the last version its archived history holds.
type TimelineArchived struct {
	SealedAtUnixMs   int64 `json:"sealedAtUnixMs"`
	ArchivedAtUnixMs int64 `json:"archivedAtUnixMs"`
	Version          int64 `json:"version"`
}

// AuthorityArchived is TimelineAuthority.Status of an archived order: it
// has no Location record, and nothing activates it again.
const AuthorityArchived = "Archived"

// registerTimeline adds the timeline route to the admin router r; without
// a Config.Timeline there is none.
func (s *Server) registerTimeline(r gin.IRoutes) {
	if s.cfg.Timeline == nil {
		return
	}
	r.GET("/admin/orders/:orderId/timeline", handle(s.adminTimeline))
}

// adminTimeline is GET /admin/orders/{orderId}/timeline. An order that no
// store knows (no event, projection, ownership history or operation) is
// 404 NOT_FOUND.
func (s *Server) adminTimeline(w http.ResponseWriter, r *http.Request) {
	id, err := pathOrderID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	rep, err := s.timeline(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("timeline of order %s: %w", id, err))
		return
	}
	s.writeJSON(w, http.StatusOK, rep)
}

func (s *Server) timeline(ctx context.Context, id string) (*TimelineReply, error) {
	tl := s.cfg.Timeline
	now := time.Now()
	if tl.Now != nil {
		now = tl.Now()
	}
	if s.cfg.Streams != nil {
		p, err := s.cfg.Streams.Presence(ctx, id)
		if err != nil {
			return nil, err
		}
		if p.Tier == eventstore.TierArchived {
			return s.archivedTimeline(ctx, id, now)
		}
	}
	var in timelineInput
	var err error
	if in.Events, err = tl.Events.Load(ctx, id); err != nil {
		return nil, err
	}
	state, version, err := s.cfg.ReadModel.Get(ctx, id)
	if err != nil && !errors.Is(err, readmodel.ErrNotFound) {
		return nil, err
	}
	if in.History, err = tl.Ownership.History(ctx, grain.KindName, id); err != nil {
		return nil, err
	}
	if in.Operations, err = tl.Operations.Operations(ctx, id); err != nil {
		return nil, err
	}
	if len(in.Events) == 0 && state == nil && len(in.History) == 0 && len(in.Operations) == 0 {
		return nil, fmt.Errorf("%w: no store knows order %s", ErrNotFound, id)
	}
	rec, err := tl.Ownership.Get(ctx, grain.KindName, id)
	if err != nil {
		return nil, err
	}
	if err := s.timelineEffects(ctx, id, &in); err != nil {
		return nil, err
	}
	if len(in.History) > 0 || rec.Owner != "" {
		if in.Names, err = tl.Ownership.MemberNames(ctx); err != nil {
			return nil, err
		}
	}
	rep := &TimelineReply{
		OrderID: id, AsOfUnixMs: now.UnixMilli(), StateVersion: version,
		Authority: TimelineAuthority{Status: string(rec.Status), Member: rec.Owner, Node: in.Names[rec.Owner], Generation: rec.Generation},
		Entries:   buildTimeline(in),
	}
	if rec.Status == location.Missing {
		rep.Authority.Status = "Missing"
	}
	if state != nil {
		if rep.State, err = contracts.MarshalJSON(state); err != nil {
			return nil, fmt.Errorf("encoding the projection: %w", err)
		}
	}
	return rep, nil
}

// timelineEffects reads what the order's external effects answered first
// into in.
func (s *Server) timelineEffects(ctx context.Context, id string, in *timelineInput) error {
	tl := s.cfg.Timeline
	var err error
	if in.Reservation, err = found(tl.Inventory.Reservation(ctx, order.ReservationID(id))); err != nil {
		return err
	}
	in.Authorization, err = found(tl.Payment.Authorization(ctx, order.PaymentID(id)))
	return err
}

// archivedTimeline is the timeline of an archived order: its events from
// the archive (ArchivedOrders.History), its effects' first results (the
// modules keep them), its final state from its sealed record. Without
// the archive, or with the archive down, it is 503 STORE_UNAVAILABLE,
// never a timeline without the events.
func (s *Server) archivedTimeline(ctx context.Context, id string, now time.Time) (*TimelineReply, error) {
	if s.cfg.Archive == nil {
		return nil, errNoArchive
	}
	rec, events, err := s.cfg.Archive.History(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errArchiveUnavailable, err)
	}
	in := timelineInput{Events: events}
	if err := s.timelineEffects(ctx, id, &in); err != nil {
		return nil, err
	}
	rep := &TimelineReply{
		OrderID: id, AsOfUnixMs: now.UnixMilli(),
		Authority: TimelineAuthority{Status: AuthorityArchived, Generation: rec.Fence.Generation},
		Entries:   buildTimeline(in),
		Archived:  &TimelineArchived{SealedAtUnixMs: rec.SealedAtUnixMs, ArchivedAtUnixMs: rec.ArchivedAtUnixMs, Version: rec.Version},
	}
	state, version, err := readmodel.KeptState(rec)
	if err != nil {
		return nil, err
	}
	rep.StateVersion = version
	if rep.State, err = contracts.MarshalJSON(state); err != nil {
		return nil, fmt.Errorf("encoding the kept state: %w", err)
	}
	return rep, nil
}

// found turns a record read's ErrNotFound into no record.
func found[T any](rec T, err error) (*T, error) {
	switch {
	case errors.Is(err, commerce.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &rec, nil
}
