// Package selfcheck owns the runner-only /self-check/ hooks of CommerceApi
// (docs/contract.md, "Runner-only hooks" and "Smoke run"): the runner calls
// them to prepare fixtures (a pending idempotency mapping, interrupt gates,
// a skipped terminal projection, a deleted projection) and to collect
// server-side evidence (the stream, the authority record, module call
// counts, repeated effects). The client scenario never does.
//
// It is test machinery outside the production edge: edge/edgenode mounts
// it on the admin listener (edge.Mount) only when the process runs with
// -self-check; otherwise its paths do not exist. Its request and reply
// bodies live in selfcheckapi, which the runner imports without this
// package.
//
// It may import edge (the mount and its reply helpers), the contracts, the
// domain and the value types of the stores; it reaches every store and the
// grain through the interfaces below and must not construct a store or
// import runner/....
package selfcheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck/selfcheckapi"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// Idempotency reserves IdempotencyKey → OrderId mappings.
type Idempotency interface {
	// Reserve maps key to candidate (pending) unless the key is already
	// mapped, atomically, and returns the mapping in force and whether this
	// call created it.
	Reserve(ctx context.Context, key string, candidate commerce.Mapping) (commerce.Mapping, bool, error)
}

// Resumer wakes an order's grain through its cluster identity.
type Resumer interface {
	// ResumeOrder kicks the order's background continuation and returns
	// its state.
	ResumeOrder(ctx context.Context, req *contracts.ResumeOrderReq) (*contracts.ResumeOrderRes, error)
}

// Fixtures arms the runner's interrupt points, keyed by the idempotency key
// whose start they affect.
type Fixtures interface {
	// ArmGate arms mode for the start of idempotencyKey.
	ArmGate(ctx context.Context, idempotencyKey string, mode fixture.GateMode) error
	// ReleaseGate removes the gate; releasing an absent gate is no error.
	ReleaseGate(ctx context.Context, idempotencyKey string) error
	// ArmSkipTerminalProjection makes the terminal event of that order be
	// recorded without its projection, once.
	ArmSkipTerminalProjection(ctx context.Context, idempotencyKey string) error
}

// EventStream reads an order's event stream.
type EventStream interface {
	// Load returns every event in version order; none for an unknown order.
	Load(ctx context.Context, orderID string) ([]eventstore.Envelope, error)
}

// Authority reads the Location Store.
type Authority interface {
	// Get returns the order's authority record; Missing with generation 0
	// for a never-activated identity.
	Get(ctx context.Context, kind, id string) (location.Record, error)
	// MemberNames returns the member id → node name mapping.
	MemberNames(ctx context.Context) (map[string]string, error)
}

// Relocations reads the Relocation Store's operation records.
type Relocations interface {
	// Operations returns the order's relocation operations, oldest first.
	Operations(ctx context.Context, orderID string) ([]relocation.Operation, error)
}

// FirstEnvelopes reads each order's first activation envelope.
type FirstEnvelopes interface {
	// LoadFirst returns the StartOrderWorkflowReq that first activated the
	// order, or an error wrapping a not-found sentinel.
	LoadFirst(ctx context.Context, orderID string) (*contracts.StartOrderWorkflowReq, error)
}

// Projections deletes read-model records.
type Projections interface {
	// Delete removes the projection; deleting an absent one is no error.
	Delete(ctx context.Context, orderID string) error
}

// Inventory is the part of the seeded inventory module the evidence hooks
// observe and repeat.
type Inventory interface {
	// Reserve returns the first result for the reservation id.
	Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error)
	// Stock returns a SKU's available quantity.
	Stock(ctx context.Context, sku string) (int64, error)
	// ReserveCalls and ReleaseCalls count calls per reservation id.
	ReserveCalls(ctx context.Context, reservationID string) (int64, error)
	ReleaseCalls(ctx context.Context, reservationID string) (int64, error)
}

// Payment is the part of the seeded payment module the evidence hooks
// observe and repeat.
type Payment interface {
	// Authorize returns the first result for the payment id.
	Authorize(ctx context.Context, req *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error)
	// AuthorizeCalls counts calls per payment id.
	AuthorizeCalls(ctx context.Context, paymentID string) (int64, error)
	// Captured returns the amount authorized under the payment id.
	Captured(ctx context.Context, paymentID string) (int64, error)
}

// Config holds what the hooks need. Every field is required.
type Config struct {
	Idempotency Idempotency
	Orders      Resumer
	Fixtures    Fixtures
	Events      EventStream
	Authority   Authority
	Relocations Relocations
	Envelopes   FirstEnvelopes
	Projections Projections
	Inventory   Inventory
	Payment     Payment
}

// ErrConfig: the configuration cannot build the hooks.
var ErrConfig = errors.New("selfcheck: invalid configuration")

// Hooks are the /self-check/ routes; an edge.Mount.
type Hooks struct {
	cfg Config
}

var _ edge.Mount = (*Hooks)(nil)

// New checks cfg and returns the hooks, ready to be mounted.
func New(cfg Config) (*Hooks, error) {
	var missing []string
	for _, f := range []struct {
		ok   bool
		name string
	}{
		{cfg.Idempotency != nil, "Idempotency"}, {cfg.Orders != nil, "Orders"}, {cfg.Fixtures != nil, "Fixtures"},
		{cfg.Events != nil, "Events"}, {cfg.Authority != nil, "Authority"}, {cfg.Relocations != nil, "Relocations"},
		{cfg.Envelopes != nil, "Envelopes"}, {cfg.Projections != nil, "Projections"},
		{cfg.Inventory != nil, "Inventory"}, {cfg.Payment != nil, "Payment"},
	} {
		if !f.ok {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %v", ErrConfig, missing)
	}
	return &Hooks{cfg: cfg}, nil
}

// Mount implements edge.Mount.
func (h *Hooks) Mount(r edge.AdminRouter) {
	hk := &hooks{Hooks: h, r: r}
	r.Handle(http.MethodPost, selfcheckapi.PendingMappingPath, hk.pendingMapping)
	r.Handle(http.MethodPost, selfcheckapi.GatesPath, hk.armGate)
	r.Handle(http.MethodPost, selfcheckapi.GatesReleasePath, hk.releaseGate)
	r.Handle(http.MethodPost, selfcheckapi.SkipTerminalProjectionPath, hk.skipTerminalProjection)
	r.Handle(http.MethodDelete, selfcheckapi.ProjectionRoute, hk.deleteProjection)
	r.Handle(http.MethodGet, selfcheckapi.EvidenceRoute, hk.orderEvidence)
	r.Handle(http.MethodPost, selfcheckapi.RepeatEffectsRoute, hk.repeatEffects)
}

// hooks are the handlers of one mount.
type hooks struct {
	*Hooks
	r edge.AdminRouter
}

// pendingMapping is POST /self-check/pending-mapping: it reserves a pending
// idempotency mapping with the OrderId POST /orders derives for its key
// and does not start the order, as if a start had crashed between the
// reservation and the grain call.
func (h *hooks) pendingMapping(w http.ResponseWriter, r *http.Request) {
	req := h.r.DecodeStartOrder(w, r)
	if req == nil {
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	fp := commerce.Fingerprint(req.CartId, req.ShippingAddressId, req.PaymentMethodId)
	m, _, err := h.cfg.Idempotency.Reserve(ctx, req.IdempotencyKey, commerce.Mapping{
		OrderID: h.r.OrderIDFor(req.IdempotencyKey), Status: commerce.MappingPending, Fingerprint: fp,
	})
	if err != nil {
		h.r.Fail(w, r, fmt.Errorf("reserve idempotency key: %w", err))
		return
	}
	if m.Fingerprint != fp {
		h.r.Fail(w, r, edge.ErrIdempotencyKeyReused)
		return
	}
	h.r.JSON(w, http.StatusOK, selfcheckapi.PendingMappingReply{OrderID: m.OrderID})
}

var gateModes = map[string]fixture.GateMode{selfcheckapi.GateStop: fixture.GateStop, selfcheckapi.GateHold: fixture.GateHold}

// armGate is POST /self-check/gates: the background continuation of the
// order that key will start stops ("stop") or parks ("hold") at
// InventoryReserved.
func (h *hooks) armGate(w http.ResponseWriter, r *http.Request) {
	var b selfcheckapi.GateRequest
	if !h.r.DecodeJSON(w, r, &b) {
		return
	}
	m, ok := gateModes[b.Mode]
	var err error
	if !ok {
		err = &edge.FieldError{Field: "mode", Reason: fmt.Sprintf("must be %q or %q", selfcheckapi.GateStop, selfcheckapi.GateHold)}
	}
	if err == nil {
		err = h.r.CheckID("idempotencyKey", b.IdempotencyKey)
	}
	if err != nil {
		h.r.Fail(w, r, err)
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	if err := h.cfg.Fixtures.ArmGate(ctx, b.IdempotencyKey, m); err != nil {
		h.r.Fail(w, r, fmt.Errorf("arm gate: %w", err))
		return
	}
	h.r.JSON(w, http.StatusOK, struct{}{})
}

// releaseGate is POST /self-check/gates/release: it removes the gate and
// wakes the order's grain through its cluster identity, wherever it lives
// now.
func (h *hooks) releaseGate(w http.ResponseWriter, r *http.Request) {
	var b selfcheckapi.ReleaseRequest
	if !h.r.DecodeJSON(w, r, &b) {
		return
	}
	err := h.r.CheckID("idempotencyKey", b.IdempotencyKey)
	if err == nil {
		err = h.r.CheckID("orderId", b.OrderID)
	}
	if err != nil {
		h.r.Fail(w, r, err)
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	if err := h.cfg.Fixtures.ReleaseGate(ctx, b.IdempotencyKey); err != nil {
		h.r.Fail(w, r, fmt.Errorf("release gate: %w", err))
		return
	}
	res, err := h.cfg.Orders.ResumeOrder(ctx, &contracts.ResumeOrderReq{OrderId: b.OrderID})
	if err != nil {
		h.r.Fail(w, r, fmt.Errorf("resume order %s: %w", b.OrderID, err))
		return
	}
	st, err := contracts.MarshalJSON(res.GetState())
	if err != nil {
		h.r.Fail(w, r, fmt.Errorf("encode state of order %s: %w", b.OrderID, err))
		return
	}
	h.r.JSON(w, http.StatusOK, selfcheckapi.ReleaseReply{State: st})
}

// skipTerminalProjection is POST /self-check/skip-terminal-projection: the
// terminal event of the order that key starts is recorded without its
// projection, once.
func (h *hooks) skipTerminalProjection(w http.ResponseWriter, r *http.Request) {
	var b selfcheckapi.SkipTerminalProjectionRequest
	if !h.r.DecodeJSON(w, r, &b) {
		return
	}
	if err := h.r.CheckID("idempotencyKey", b.IdempotencyKey); err != nil {
		h.r.Fail(w, r, err)
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	if err := h.cfg.Fixtures.ArmSkipTerminalProjection(ctx, b.IdempotencyKey); err != nil {
		h.r.Fail(w, r, fmt.Errorf("arm skip terminal projection: %w", err))
		return
	}
	h.r.JSON(w, http.StatusOK, struct{}{})
}

// deleteProjection is DELETE /self-check/orders/{orderId}/projection.
func (h *hooks) deleteProjection(w http.ResponseWriter, r *http.Request) {
	id, err := h.r.OrderID(r)
	if err != nil {
		h.r.Fail(w, r, err)
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	if err := h.cfg.Projections.Delete(ctx, id); err != nil {
		h.r.Fail(w, r, fmt.Errorf("delete projection of order %s: %w", id, err))
		return
	}
	h.r.JSON(w, http.StatusOK, struct{}{})
}

// orderEvidence is GET /self-check/orders/{orderId}/evidence: the real
// stream, the authority record and the module call counts, read from the
// stores. It prints `shoppingmall-evidence order=<OrderId> events=<N>`.
func (h *hooks) orderEvidence(w http.ResponseWriter, r *http.Request) {
	id, err := h.r.OrderID(r)
	if err != nil {
		h.r.Fail(w, r, err)
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	ev, err := h.collectEvidence(ctx, id)
	if err != nil {
		h.r.Fail(w, r, fmt.Errorf("evidence of order %s: %w", id, err))
		return
	}
	h.r.Evidence(fmt.Sprintf("shoppingmall-evidence order=%s events=%d", id, len(ev.Events)))
	h.r.JSON(w, http.StatusOK, ev)
}

func (h *hooks) collectEvidence(ctx context.Context, id string) (*selfcheckapi.Evidence, error) {
	envs, err := h.cfg.Events.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return nil, fmt.Errorf("%w: order %s has no event stream", edge.ErrNotFound, id)
	}
	ev := &selfcheckapi.Evidence{OrderID: id, Events: make([]selfcheckapi.EvidenceEvent, len(envs)),
		ReservationID: order.ReservationID(id), PaymentID: order.PaymentID(id), Relocations: []selfcheckapi.RelocationView{}}
	for i, e := range envs {
		ev.Events[i] = selfcheckapi.EvidenceEvent{EventID: e.EventID, EventType: e.EventType, Version: e.Version,
			SourceCommandID: e.SourceCommandID, CreatedAtUnixMs: e.CreatedAtUnixMs}
	}
	rec, err := h.cfg.Authority.Get(ctx, grain.KindName, id)
	if err != nil {
		return nil, err
	}
	ev.Generation, ev.OwnerMember, ev.Authority = rec.Generation, rec.Owner, string(rec.Status)
	if rec.Status == location.Missing {
		ev.Authority = "Missing"
	}
	if rec.Owner != "" {
		names, err := h.cfg.Authority.MemberNames(ctx)
		if err != nil {
			return nil, err
		}
		ev.OwnerNode = names[rec.Owner]
	}
	if ev.ReserveCalls, err = h.cfg.Inventory.ReserveCalls(ctx, ev.ReservationID); err != nil {
		return nil, err
	}
	if ev.ReleaseCalls, err = h.cfg.Inventory.ReleaseCalls(ctx, ev.ReservationID); err != nil {
		return nil, err
	}
	if ev.AuthorizeCalls, err = h.cfg.Payment.AuthorizeCalls(ctx, ev.PaymentID); err != nil {
		return nil, err
	}
	ops, err := h.cfg.Relocations.Operations(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		ev.Relocations = append(ev.Relocations, selfcheckapi.RelocationView{ID: op.ID, Source: op.Source, Target: op.Target,
			Generation: op.Generation, State: string(op.State)})
	}
	return ev, nil
}

// same reports whether a repeat returned the first result. The stream
// records the domain's default reason where the module gave none, so an
// empty repeated reason matches any recorded one.
func same(first, repeat selfcheckapi.EffectResult) bool {
	return first.Accepted == repeat.Accepted && (repeat.Reason == "" || repeat.Reason == first.Reason)
}

// repeatEffects is POST /self-check/orders/{orderId}/repeat-effects: it
// calls the inventory and payment modules again with the order's
// deterministic ids and compares with the outcomes the stream recorded.
// The calls are counted like any other, so collect counts before.
func (h *hooks) repeatEffects(w http.ResponseWriter, r *http.Request) {
	id, err := h.r.OrderID(r)
	if err != nil {
		h.r.Fail(w, r, err)
		return
	}
	ctx, cancel := h.r.Context(r)
	defer cancel()
	res, err := h.repeat(ctx, id)
	if err != nil {
		h.r.Fail(w, r, fmt.Errorf("repeat effects of order %s: %w", id, err))
		return
	}
	h.r.JSON(w, http.StatusOK, res)
}

func (h *hooks) repeat(ctx context.Context, id string) (*selfcheckapi.RepeatEffects, error) {
	envs, err := h.cfg.Events.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return nil, fmt.Errorf("%w: order %s has no event stream", edge.ErrNotFound, id)
	}
	reserved, paid, err := recordedOutcomes(envs)
	if err != nil {
		return nil, err
	}
	if reserved == nil {
		return nil, fmt.Errorf("%w: order %s records no reservation outcome yet", edge.ErrFailedPrecondition, id)
	}
	first, err := h.cfg.Envelopes.LoadFirst(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &selfcheckapi.RepeatEffects{SameResults: true, NothingMoved: true}

	rr := &selfcheckapi.ReservationRepeat{First: *reserved}
	if rr.StockBefore, err = h.stock(ctx, first.GetLines()); err != nil {
		return nil, err
	}
	inv, err := h.cfg.Inventory.Reserve(ctx, &contracts.ReserveInventoryReq{
		OrderId: id, ReservationId: order.ReservationID(id), Lines: first.GetLines(),
	})
	if err != nil {
		return nil, err
	}
	rr.Repeat = selfcheckapi.EffectResult{Accepted: inv.GetAccepted(), Reason: inv.GetReason()}
	if rr.StockAfter, err = h.stock(ctx, first.GetLines()); err != nil {
		return nil, err
	}
	out.Reservation = rr
	out.SameResults = out.SameResults && same(rr.First, rr.Repeat)
	for sku, n := range rr.StockBefore {
		out.NothingMoved = out.NothingMoved && rr.StockAfter[sku] == n
	}

	if paid != nil {
		pr := &selfcheckapi.PaymentRepeat{First: *paid}
		pid := order.PaymentID(id)
		if pr.CapturedBefore, err = h.cfg.Payment.Captured(ctx, pid); err != nil {
			return nil, err
		}
		pay, err := h.cfg.Payment.Authorize(ctx, &contracts.AuthorizePaymentReq{
			OrderId: id, PaymentId: pid, PaymentMethodId: first.GetPaymentMethodId(),
			Amount: first.GetAmount(), Currency: first.GetCurrency(),
		})
		if err != nil {
			return nil, err
		}
		pr.Repeat = selfcheckapi.EffectResult{Accepted: pay.GetAccepted(), Reason: pay.GetReason()}
		if pr.CapturedAfter, err = h.cfg.Payment.Captured(ctx, pid); err != nil {
			return nil, err
		}
		out.Payment = pr
		out.SameResults = out.SameResults && same(pr.First, pr.Repeat)
		out.NothingMoved = out.NothingMoved && pr.CapturedBefore == pr.CapturedAfter
	}
	return out, nil
}

// recordedOutcomes returns the reservation and payment outcomes the
// stream records, nil where it records none. It reads the events as the
// workflow does (contracts.UnmarshalStoredJSON): a field another build
// added to an event of the same schema version is ignored, so that a
// mixed-version cluster's self-check does not call a readable stream
// corrupt.
func recordedOutcomes(envs []eventstore.Envelope) (reserved, paid *selfcheckapi.EffectResult, err error) {
	for _, e := range envs {
		switch e.EventType {
		case order.TypeInventoryReserved:
			reserved = &selfcheckapi.EffectResult{Accepted: true}
		case order.TypeInventoryReservationFailed:
			var m contracts.InventoryReservationFailedEvent
			if err := contracts.UnmarshalStoredJSON(e.Data, &m); err != nil {
				return nil, nil, fmt.Errorf("%w: %s at version %d: %w", eventstore.ErrCorrupt, e.EventType, e.Version, err)
			}
			reserved = &selfcheckapi.EffectResult{Reason: m.GetReason()}
		case order.TypePaymentAuthorized:
			paid = &selfcheckapi.EffectResult{Accepted: true}
		case order.TypePaymentFailed:
			var m contracts.PaymentFailedEvent
			if err := contracts.UnmarshalStoredJSON(e.Data, &m); err != nil {
				return nil, nil, fmt.Errorf("%w: %s at version %d: %w", eventstore.ErrCorrupt, e.EventType, e.Version, err)
			}
			paid = &selfcheckapi.EffectResult{Reason: m.GetReason()}
		}
	}
	return reserved, paid, nil
}

func (h *hooks) stock(ctx context.Context, lines []*contracts.OrderLine) (map[string]int64, error) {
	out := make(map[string]int64, len(lines))
	for _, l := range lines {
		n, err := h.cfg.Inventory.Stock(ctx, l.GetSku())
		if err != nil {
			return nil, err
		}
		out[l.GetSku()] = n
	}
	return out, nil
}
