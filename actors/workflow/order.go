package workflow

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// Order is one order as its owner sees it: the fold of its stream and the
// owner's fence. It is not safe for concurrent use: only the owning grain's
// turn touches it.
type Order struct {
	id         string
	generation int64
	fence      eventstore.Fence
	state      order.State
	// start caches the first activation envelope once known, so the
	// payment step after a start in the same activation costs no
	// Relocation Store read.
	start *contracts.StartOrderWorkflowReq
	// stale is set when an append ended with an unknown outcome: the
	// stream may hold an event the fold lacks, so the next command reloads
	// before deciding, instead of calling a module a second time.
	stale bool
	// unmarkedKey is the start's idempotency key while marking it started
	// failed; the owner's next step marks it.
	unmarkedKey string
	// startInDoubt is a start whose append ended with an unknown outcome.
	startInDoubt *contracts.StartOrderWorkflowReq
	// inDoubt is the last append whose outcome is unknown or that lost a
	// race: the next reload counts its event, for the metrics, if the
	// stream holds it.
	inDoubt *inDoubt
	// deferred: made by OpenFresh, and neither read nor written since.
	deferred bool
	// firstWrite rides in the start's append (CarryFirstWrite) until that
	// append was attempted; firstWritten is what came of it.
	firstWrite   []eventstore.Companion
	firstWritten FirstWrite
}

// FirstWrite is what came of the writes an order carried into its first
// append (CarryFirstWrite).
type FirstWrite uint8

const (
	// FirstWriteNotMade: no append carried them (none attempted, or the
	// append's own checks refused it): nothing of them was written.
	FirstWriteNotMade FirstWrite = iota
	// FirstWriteLanded: they landed with the order's start.
	FirstWriteLanded
	// FirstWriteRefused: a Require among them failed; nothing was written.
	FirstWriteRefused
	// FirstWriteInDoubt: the append that carried them has no known
	// outcome (the store did not answer): they may have landed with it.
	FirstWriteInDoubt
)

// CarryFirstWrite hands the order writes of another store's that must
// land with its start's append, in the same atomic step, or not at all
// (an activation recorded Ready by the write that records the order's
// first event). Only a Deferred order takes them; it reports whether it
// took them.
// While it carries them, Start writes nothing but that append: when the
// append is refused or lost, Start returns its error and leaves the rest
// to a later command. FirstWritten tells the outcome. A start that ends
// before its append drops them; so does CarryFirstWrite(nil), for a
// command that never reached Start.
func (o *Order) CarryFirstWrite(with []eventstore.Companion) bool {
	if !o.Deferred() || len(with) == 0 {
		o.firstWrite = nil
		return false
	}
	o.firstWrite = with
	return true
}

// FirstWritten is what came of the writes CarryFirstWrite handed over.
func (o *Order) FirstWritten() FirstWrite {
	if o == nil {
		return FirstWriteNotMade
	}
	return o.firstWritten
}

// Deferred reports whether the order came from OpenFresh and the store
// has not been read or written for it since. A caller about to answer
// from the fold alone (not Start, whose append checks the stream) opens
// it for real first.
func (o *Order) Deferred() bool { return o != nil && o.deferred }

// OrderID is the order's id.
func (o *Order) OrderID() string { return o.id }

// Exists reports whether the stream holds at least one event.
func (o *Order) Exists() bool { return o != nil && o.state.Version > 0 }

// State is the fold of the stream as this owner last saw it.
func (o *Order) State() order.State { return o.state }

// Fence is the owner's write token for this order.
func (o *Order) Fence() eventstore.Fence { return o.fence }

// Generation is the activation generation the order was opened with.
func (o *Order) Generation() int64 { return o.generation }

// Open makes the caller the order's writer at generation and replays its
// stream, in one event-store round trip. An order without a stream is
// returned with Exists() == false; nothing is written for it. A newer owner
// fails with ErrFenced; an undecodable or impossible stream with an error
// wrapping eventstore.ErrCorrupt.
func (s *Service) Open(ctx context.Context, orderID string, generation int64) (*Order, error) {
	if orderID == "" {
		return nil, fmt.Errorf("%w: empty orderId", ErrInvalidArgument)
	}
	fence, envs, err := s.cfg.Events.Open(ctx, orderID, generation)
	if err != nil {
		return nil, fmt.Errorf("open order %s at generation %d: %w", orderID, generation, err)
	}
	st, err := foldEnvelopes(s.codec(), orderID, envs)
	if err != nil {
		return nil, err
	}
	return &Order{id: orderID, generation: generation, fence: fence, state: st}, nil
}

// FencedAt reports the generation an Open refused as ErrFenced found the
// order's stream fenced at, for an activation whose generation came from
// a Location record older than the stream.
func FencedAt(err error) (int64, bool) {
	var fe *eventstore.FencedOpenError
	if errors.As(err, &fe) {
		return fe.Stored.Generation, true
	}
	return 0, false
}

// OpenFresh returns the order as Open returns one without a stream (an
// empty fold, fence (generation, 1)) without asking the store, for an
// activation that can have no predecessor: the first generation of a
// cold activation. For such an order Open only reads and writes nothing,
// so skipping it saves the round trip and changes no outcome. Should the
// stream exist after all (its Location record lost, say), the first
// append is refused exactly as after Open (fenced, or a version conflict
// that reloads); a caller that reads first checks Deferred.
func (s *Service) OpenFresh(orderID string, generation int64) (*Order, error) {
	if orderID == "" {
		return nil, fmt.Errorf("%w: empty orderId", ErrInvalidArgument)
	}
	if generation < 1 {
		return nil, fmt.Errorf("%w: generation %d", ErrInvalidArgument, generation)
	}
	return &Order{id: orderID, generation: generation, fence: eventstore.Fence{Generation: generation, Epoch: 1},
		state: order.State{OrderID: orderID}, deferred: true}, nil
}

// reload replaces the fold with a fresh replay of the stream (one round
// trip). The fence is kept: reloading is not a new activation.
func (s *Service) reload(ctx context.Context, o *Order) error {
	st, envs, err := s.replay(ctx, o.id)
	if err != nil {
		return err
	}
	s.settleInDoubt(o, envs)
	o.state = st
	o.stale = false
	o.deferred = false
	return nil
}

// replay reads and folds the stream; envs are the entries it folded.
func (s *Service) replay(ctx context.Context, orderID string) (order.State, []eventstore.Envelope, error) {
	envs, err := s.cfg.Events.Load(ctx, orderID)
	if err != nil {
		return order.State{}, nil, fmt.Errorf("load order %s: %w", orderID, err)
	}
	st, err := foldEnvelopes(s.codec(), orderID, envs)
	return st, envs, err
}

// refreshIfStale reloads when an earlier append's outcome is unknown.
func (s *Service) refreshIfStale(ctx context.Context, o *Order) error {
	if !o.stale {
		return nil
	}
	return s.reload(ctx, o)
}

// foldEnvelopes decodes and folds a stream. Every envelope must belong to
// the order, sit at its gapless position and agree with its body; anything
// else means the stream was not written by this workflow.
func foldEnvelopes(c Codec, orderID string, envs []eventstore.Envelope) (order.State, error) {
	if len(envs) == 0 {
		return order.State{OrderID: orderID}, nil
	}
	events := make([]order.Event, len(envs))
	at := make([]int64, len(envs))
	for i, env := range envs {
		if want := int64(i + 1); env.Version != want {
			return order.State{}, fmt.Errorf("%w: order %s: entry %d has version %d, want %d", eventstore.ErrCorrupt, orderID, i, env.Version, want)
		}
		if env.OrderID != orderID {
			return order.State{}, fmt.Errorf("%w: order %s: version %d belongs to order %q", eventstore.ErrCorrupt, orderID, env.Version, env.OrderID)
		}
		e, err := c.Decode(env.EventType, env.Schema, env.Data)
		if err != nil {
			return order.State{}, fmt.Errorf("order %s version %d: %w", orderID, env.Version, err)
		}
		if e.Order() != orderID || e.ID() != env.EventID {
			return order.State{}, fmt.Errorf("%w: order %s version %d: body (order %q, event %q) disagrees with envelope (event %q)",
				eventstore.ErrCorrupt, orderID, env.Version, e.Order(), e.ID(), env.EventID)
		}
		events[i] = e
		at[i] = env.CreatedAtUnixMs
	}
	st, err := order.Fold(events, at)
	if err != nil {
		// A stream the domain cannot fold was not produced by the domain.
		return order.State{}, fmt.Errorf("%w: order %s: %w", eventstore.ErrCorrupt, orderID, err)
	}
	if st.Version != int64(len(envs)) {
		return order.State{}, fmt.Errorf("%w: order %s: fold reached version %d of %d", eventstore.ErrCorrupt, orderID, st.Version, len(envs))
	}
	return st, nil
}

// Replay is the contract view of the fold of envs, an order's whole
// stream from wherever it is kept (the hot stream, the archive): the
// events alone rebuild the state (spec §7.4). A stream this workflow did
// not write is eventstore.ErrCorrupt; an empty one has no view (nil).
func Replay(orderID string, envs []eventstore.Envelope) (*contracts.OrderState, error) {
	st, err := foldEnvelopes(Events, orderID, envs)
	if err != nil {
		return nil, err
	}
	return view(st), nil
}

// View is the contract view of the order's fold. Optional fields are set
// only once known; UpdatedAtUnixMs is the last event's createdAt. An order
// without a stream has no view: nil.
func (s *Service) View(o *Order) *contracts.OrderState { return view(o.state) }

func view(st order.State) *contracts.OrderState {
	if st.Version == 0 {
		return nil
	}
	v := &contracts.OrderState{
		OrderId:         st.OrderID,
		Status:          contractStatus(st.Status),
		UpdatedAtUnixMs: st.UpdatedAtUnixMs,
	}
	if st.ShippingAddressID != "" {
		v.ShippingAddressId = proto.String(st.ShippingAddressID)
	}
	if st.ReservationID != "" {
		v.ReservationId = proto.String(st.ReservationID)
	}
	if st.PaymentID != "" {
		v.PaymentId = proto.String(st.PaymentID)
	}
	if st.Started {
		v.Amount = proto.Int64(st.Amount)
	}
	if st.Currency != "" {
		v.Currency = proto.String(st.Currency)
	}
	if st.Reason != "" {
		v.Reason = proto.String(st.Reason)
	}
	return v
}

func contractStatus(s order.Status) contracts.OrderStatus {
	switch s {
	case order.StatusCreated:
		return contracts.OrderStatus_Created
	case order.StatusInventoryReserved:
		return contracts.OrderStatus_InventoryReserved
	case order.StatusPaymentAuthorized:
		return contracts.OrderStatus_PaymentAuthorized
	case order.StatusConfirmed:
		return contracts.OrderStatus_Confirmed
	case order.StatusFailed:
		return contracts.OrderStatus_Failed
	}
	return contracts.OrderStatus_ORDER_STATUS_UNSPECIFIED
}

// project writes the fold as the projection of its version (one round
// trip). A projection of a newer version is left alone by the store.
func (s *Service) project(ctx context.Context, st order.State) error {
	if _, err := s.cfg.ReadModel.Put(ctx, st.OrderID, st.Version, view(st)); err != nil {
		return fmt.Errorf("project order %s version %d: %w", st.OrderID, st.Version, err)
	}
	return nil
}

// isAppendRace reports an append that lost to an event already in the
// stream: a retried append that landed, or a start recorded by another
// command. Either way the stream, not this fold, is right.
func isAppendRace(err error) bool {
	return errors.Is(err, eventstore.ErrDuplicateCommand) || errors.Is(err, eventstore.ErrVersionConflict)
}
