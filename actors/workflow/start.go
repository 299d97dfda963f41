package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// Start records the order's OrderStartedEvent and Created projection and
// marks the idempotency mapping started (docs/contract.md,
// "Directions and completion", "Start and success" and
// "Duplicate start and resume").
//
// A start whose sourceCommandId is already the order's start records
// nothing and returns the fold with recorded=false, but still writes the
// projection at the current version and marks the mapping started: a
// start that crashed between those steps is repaired by its retry. A
// different start for a started order is ErrConflict, and the same
// idempotency key with another cart, shipping address or payment method
// is ErrKeyReused (see sameRequest).
//
// A new order's start is one unit of work (readmodel.Committer): the event, its
// projection, the first envelope and the mapping's started mark, one
// round trip. For a repeated start: projection + MarkStarted = 2.
//
// A non-nil error means the command did not complete; recorded still
// tells whether this call appended the event, and state is the fold when
// it did.
func (s *Service) Start(ctx context.Context, o *Order, req *contracts.StartOrderWorkflowReq) (state *contracts.OrderState, recorded bool, err error) {
	carried := len(o.firstWrite) > 0
	// Carried writes ride in this start's append or in none.
	defer func() { o.firstWrite = nil }()
	if err := validateStart(o, req); err != nil {
		return nil, false, err
	}
	if err := s.refreshIfStale(ctx, o); err != nil {
		return nil, false, err
	}
	if o.state.Started {
		st, err := s.startAgain(ctx, o, req)
		return st, false, err
	}

	cmd := order.StartOrder{
		OrderID: req.OrderId, CartID: req.CartId, ShippingAddressID: req.ShippingAddressId,
		SourceCommandID: req.SourceCommandId, Lines: domainLines(req.Lines),
		Amount: req.Amount, Currency: req.Currency,
	}
	ev, err := order.Start(o.state, cmd)
	if err != nil {
		if errors.Is(err, order.ErrInvalidCommand) {
			return nil, false, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		return nil, false, fmt.Errorf("start order %s: %w", o.id, err)
	}
	now := s.cfg.Now()
	marked, err := s.appendWith(ctx, o, Project, req, pending{ev: ev, sourceCommandID: req.SourceCommandId, at: now})
	if err != nil {
		if carried {
			// The writes it carried say whether this order may write at
			// all: without them landed, nothing more is written here (no
			// answer from the stream, whose projection write would come
			// first). An outcome in doubt is settled as below.
			if o.stale {
				o.startInDoubt = req
			}
			return nil, false, err
		}
		if isAppendRace(err) {
			// Someone recorded a start first; the stream decides whether it
			// was this command.
			if err := s.reload(ctx, o); err != nil {
				return nil, false, err
			}
			if !o.state.Started {
				return nil, false, fmt.Errorf("order %s: start lost a race but the stream holds no start: %w", o.id, err)
			}
			st, err := s.startAgain(ctx, o, req)
			return st, false, err
		}
		if o.stale {
			// The append's outcome is unknown: should it have landed, the
			// owner's next step finds this start in the stream and
			// finishes it (projection, mapping) without a client retry.
			o.startInDoubt = req
		}
		return nil, false, err
	}
	o.start = req

	// The event is recorded; whatever follows fails or not, this node
	// started the order.
	defer s.writeEvidence(fmt.Sprintf("shoppingmall-order started order=%s spot=%s", o.id, s.SpotID(o.id)))
	// The mapping turns started only after the projection exists
	// (docs/contract.md, "Idempotency mapping"): in the start's own step,
	// unless the mapping that names this order is not where the step
	// looked (one of the old layout), which MarkStarted also finds.
	if marked {
		return view(o.state), true, nil
	}
	if err := s.cfg.Idempotency.MarkStarted(ctx, req.IdempotencyKey, o.id); err != nil {
		o.unmarkedKey = req.IdempotencyKey
		return view(o.state), true, fmt.Errorf("mark idempotency key of order %s started: %w", o.id, err)
	}
	return view(o.state), true, nil
}

// startAgain answers a start for an order whose stream already holds one.
func (s *Service) startAgain(ctx context.Context, o *Order, req *contracts.StartOrderWorkflowReq) (*contracts.OrderState, error) {
	if o.state.StartSourceCommandID != req.SourceCommandId {
		return nil, fmt.Errorf("%w: order %s was started by %q, not %q", ErrConflict, o.id, o.state.StartSourceCommandID, req.SourceCommandId)
	}
	if err := s.sameRequest(ctx, o, req); err != nil {
		return nil, err
	}
	if err := s.project(ctx, o.state); err != nil {
		return nil, err
	}
	if err := s.cfg.Idempotency.MarkStarted(ctx, req.IdempotencyKey, o.id); err != nil {
		o.unmarkedKey = req.IdempotencyKey
		return nil, fmt.Errorf("mark idempotency key of order %s started: %w", o.id, err)
	}
	if o.unmarkedKey == req.IdempotencyKey {
		o.unmarkedKey = ""
	}
	// The projection and the mapping may have been current already, so
	// nothing above need have written: the start this answer acknowledges
	// may be an earlier attempt's, in doubt.
	if err := s.barrier(ctx, o); err != nil {
		return nil, err
	}
	return view(o.state), nil
}

// sameRequest refuses a repeated start whose key is the recorded start's
// but whose request is not. The API compares the request with the key's
// mapping first; this is the judgement that still holds when that mapping
// was lost (a store failover), since the OrderId is derived from the key
// and a reused key reaches the order it started. The cart and the
// shipping address are in the OrderStartedEvent, the payment method only
// in the first envelope: a start whose envelope cannot be found is judged
// by the event alone, because refusing it would refuse the key's own
// retry too.
func (s *Service) sameRequest(ctx context.Context, o *Order, req *contracts.StartOrderWorkflowReq) error {
	if o.state.CartID != req.CartId || o.state.ShippingAddressID != req.ShippingAddressId {
		return fmt.Errorf("%w: order %s was started for cart %q and address %q", ErrKeyReused, o.id, o.state.CartID, o.state.ShippingAddressID)
	}
	first := o.start
	if first == nil {
		var err error
		first, err = s.cfg.Envelopes.LoadFirst(ctx, o.id)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("load first envelope of order %s: %w", o.id, err)
		}
	}
	if first.GetPaymentMethodId() != req.PaymentMethodId {
		return fmt.Errorf("%w: order %s was started with another payment method", ErrKeyReused, o.id)
	}
	return nil
}

func validateStart(o *Order, req *contracts.StartOrderWorkflowReq) error {
	if req == nil {
		return fmt.Errorf("%w: nil start request", ErrInvalidArgument)
	}
	var bad []string
	for _, f := range []struct{ name, v string }{
		{"orderId", req.OrderId}, {"cartId", req.CartId}, {"shippingAddressId", req.ShippingAddressId},
		{"paymentMethodId", req.PaymentMethodId}, {"idempotencyKey", req.IdempotencyKey},
		{"sourceCommandId", req.SourceCommandId},
	} {
		if strings.TrimSpace(f.v) == "" {
			bad = append(bad, f.name+" is empty")
		}
	}
	if req.OrderId != "" && req.OrderId != o.id {
		bad = append(bad, fmt.Sprintf("orderId %q is not this order %q", req.OrderId, o.id))
	}
	// The dedupe of a retried start, and whatever is keyed by a start
	// before its OrderId exists, go by the start's deterministic
	// sourceCommandId; any other value would silently miss them.
	if req.IdempotencyKey != "" && req.SourceCommandId != "" && req.SourceCommandId != order.StartSourceCommandID(req.IdempotencyKey) {
		bad = append(bad, fmt.Sprintf("sourceCommandId %q is not the start command of its idempotencyKey", req.SourceCommandId))
	}
	if len(req.Lines) == 0 {
		bad = append(bad, "lines is empty")
	}
	for i, l := range req.Lines {
		if l.GetSku() == "" {
			bad = append(bad, fmt.Sprintf("lines[%d].sku is empty", i))
		}
		if l.GetQuantity() < 1 {
			bad = append(bad, fmt.Sprintf("lines[%d].quantity is %d", i, l.GetQuantity()))
		}
	}
	if req.Amount < 0 {
		bad = append(bad, fmt.Sprintf("amount is %d", req.Amount))
	}
	if !validCurrency(req.Currency) {
		bad = append(bad, fmt.Sprintf("currency %q is not a three-letter code", req.Currency))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: start order: %s", ErrInvalidArgument, strings.Join(bad, "; "))
	}
	return nil
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for _, r := range c {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// pending is an event to append with the command it records.
type pending struct {
	ev              order.Event
	sourceCommandID string
	at              int64
}

// append records evs as the next events, in one append, under the owner's
// fence and, on success, folds them in. With Project the append carries
// the projection of the new fold (readmodel.Committer). The events are
// folded before they are written, so the stream never holds an event the
// domain cannot replay. A lost race comes back as the store's
// ErrDuplicateCommand or ErrVersionConflict; a fenced owner as ErrFenced;
// an unknown outcome marks the fold stale. Any error means the fold is
// where it was.
func (s *Service) append(ctx context.Context, o *Order, p Projection, evs ...pending) error {
	_, err := s.appendWith(ctx, o, p, nil, evs...)
	return err
}

// writeSchema is the schema this member's writes stamp now: the lower of
// the compatibility level and what this build writes.
func (s *Service) writeSchema() int {
	own := s.codec().Schema
	if s.cfg.SchemaLevel == nil {
		return own
	}
	return max(1, min(s.cfg.SchemaLevel(), own))
}

// codec is the event codec this Service reads and writes with.
func (s *Service) codec() Codec {
	if s.cfg.Codec != nil {
		return *s.cfg.Codec
	}
	return Events
}

// appendWith is append that, given the start request of a new order,
// also saves its envelope (the first one: once the event exists, any
// later owner must be able to find the payment method it needs) and
// marks its mapping started in the same step, with the writes the order
// carries (CarryFirstWrite); marked reports the mark. Without a request
// it is append.
func (s *Service) appendWith(ctx context.Context, o *Order, p Projection, start *contracts.StartOrderWorkflowReq, evs ...pending) (marked bool, err error) {
	next := o.state
	envs := make([]eventstore.Envelope, 0, len(evs))
	types := make([]string, 0, len(evs))
	schema := s.writeSchema()
	for _, pe := range evs {
		eventType, data, err := s.codec().Encode(pe.ev, schema)
		if err != nil {
			return false, err
		}
		if next, err = order.Apply(next, pe.ev, pe.at); err != nil {
			// The domain produced this event from this fold; refusing it
			// is a domain bug, caught before anything is recorded.
			return false, fmt.Errorf("%w: order %s: own %s does not fold: %w", ErrConflict, o.id, eventType, err)
		}
		envs = append(envs, eventstore.Envelope{
			EventID: pe.ev.ID(), OrderID: o.id, EventType: eventType,
			SourceCommandID: pe.sourceCommandID, CreatedAtUnixMs: pe.at, Data: data, Schema: schema,
		})
		types = append(types, eventType)
	}
	// The first event stands for the batch in doubt: it lands with the
	// others or not at all.
	doubt := &inDoubt{version: o.state.Version + 1, eventID: envs[0].EventID, eventTypes: types}
	var version int64
	switch {
	case p == Project && start != nil:
		with := o.firstWrite
		o.firstWrite = nil
		version, marked, err = s.commitStart(ctx, o, envs, next, start, with)
		switch {
		case len(with) == 0:
		case err == nil:
			o.firstWritten = FirstWriteLanded
		case errors.Is(err, eventstore.ErrPrecondition):
			o.firstWritten = FirstWriteRefused
		case !errors.Is(err, eventstore.ErrFenced) && !isAppendRace(err):
			// No answer the script gave: the writes may stand.
			o.firstWritten = FirstWriteInDoubt
		}
	case p == Project:
		var out eventstore.Outcome
		out, err = s.cfg.Commits.Commit(ctx, eventstore.NewUnit(o.id, o.state.Version, o.fence, envs), view(next))
		version = out.Version
	default:
		version, err = s.cfg.Events.Append(ctx, o.id, o.state.Version, o.fence, envs)
	}
	// Whatever the store answered, it has now been asked.
	o.deferred = false
	switch {
	case err == nil:
	case errors.Is(err, eventstore.ErrFenced):
		return false, fmt.Errorf("append %s to order %s: %w", strings.Join(types, "+"), o.id, err)
	case isAppendRace(err):
		// The stream may hold this very append, landed by an earlier
		// attempt: the reload the caller makes tells, for the metrics.
		o.inDoubt = doubt
		return false, err
	default:
		o.stale = true
		o.inDoubt = doubt
		return false, fmt.Errorf("append %s to order %s: %w", strings.Join(types, "+"), o.id, err)
	}
	if next.Version != version {
		o.stale = true
		// The store says it recorded the events elsewhere than the fold
		// expects: the reload finds out where, if anywhere.
		doubt.version = version - int64(len(envs)) + 1
		o.inDoubt = doubt
		return false, fmt.Errorf("%w: order %s: append returned version %d, fold is at %d", eventstore.ErrVersionConflict, o.id, version, next.Version)
	}
	o.state = next
	for _, t := range types {
		s.metrics.recorded(t)
	}
	return marked, nil
}

// commitStart commits a new order's start as one unit: the start's
// events and the projection of next, the first envelope (SET NX), the
// mapping's started mark, then with, the writes the order carried. Each
// store adds its own writes; marked tells whether the mark wrote.
func (s *Service) commitStart(ctx context.Context, o *Order, envs []eventstore.Envelope, next order.State, start *contracts.StartOrderWorkflowReq, with []eventstore.Companion) (version int64, marked bool, err error) {
	u := eventstore.NewUnit(o.id, o.state.Version, o.fence, envs)
	if err := s.cfg.Envelopes.AddFirst(u, start); err != nil {
		return 0, false, fmt.Errorf("first envelope of order %s: %w", o.id, err)
	}
	mark, err := s.cfg.Idempotency.AddStartedMark(u, start.GetIdempotencyKey())
	if err != nil {
		return 0, false, fmt.Errorf("started mark of order %s: %w", o.id, err)
	}
	u.Add(with...)
	out, err := s.cfg.Commits.Commit(ctx, u, view(next))
	if err != nil {
		return out.Version, false, err
	}
	return out.Version, out.Wrote(mark), nil
}
