package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// The /self-check/ hooks exist only when Config.SelfCheck is set. The
// runner calls them to prepare fixtures and to collect server-side
// evidence; the client scenario never does (spec §9, §10).

// pendingMapping is POST /self-check/pending-mapping: it reserves a pending
// idempotency mapping with a fresh OrderId and does not start the order,
// as if a start had crashed between the reservation and the grain call.
func (s *Server) pendingMapping(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, err := decodeStartOrder(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	fp := commerce.Fingerprint(req.CartId, req.ShippingAddressId, req.PaymentMethodId)
	m, _, err := s.cfg.Idempotency.Reserve(ctx, req.IdempotencyKey, commerce.Mapping{
		OrderID: s.newOrderID(), Status: commerce.MappingPending, Fingerprint: fp,
	})
	if err != nil {
		s.fail(w, r, fmt.Errorf("reserve idempotency key: %w", err))
		return
	}
	if m.Fingerprint != fp {
		s.fail(w, r, ErrIdempotencyKeyReused)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"orderId": m.OrderID})
}

type gateBody struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Mode           string `json:"mode"`
}

// armGate is POST /self-check/gates: the background continuation of the
// order that key will start stops ("stop") or parks ("hold") at
// InventoryReserved.
func (s *Server) armGate(w http.ResponseWriter, r *http.Request) {
	var b gateBody
	if !s.decodeHook(w, r, &b) {
		return
	}
	mode := map[string]workflow.GateMode{"stop": workflow.GateStop, "hold": workflow.GateHold}
	m, ok := mode[b.Mode]
	var err error
	if !ok {
		err = invalidField("mode", `must be "stop" or "hold"`)
	}
	if err == nil {
		err = checkID("idempotencyKey", b.IdempotencyKey)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.cfg.SelfCheck.Fixtures.ArmGate(ctx, b.IdempotencyKey, m); err != nil {
		s.fail(w, r, fmt.Errorf("arm gate: %w", err))
		return
	}
	s.writeJSON(w, http.StatusOK, struct{}{})
}

type releaseBody struct {
	IdempotencyKey string `json:"idempotencyKey"`
	OrderID        string `json:"orderId"`
}

// releaseGate is POST /self-check/gates/release: it removes the gate and
// wakes the order's grain through its cluster identity, wherever it lives
// now.
func (s *Server) releaseGate(w http.ResponseWriter, r *http.Request) {
	var b releaseBody
	if !s.decodeHook(w, r, &b) {
		return
	}
	err := checkID("idempotencyKey", b.IdempotencyKey)
	if err == nil {
		err = checkID("orderId", b.OrderID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.cfg.SelfCheck.Fixtures.ReleaseGate(ctx, b.IdempotencyKey); err != nil {
		s.fail(w, r, fmt.Errorf("release gate: %w", err))
		return
	}
	res, err := s.cfg.Operator.ResumeOrder(ctx, &contracts.ResumeOrderReq{OrderId: b.OrderID})
	if err != nil {
		s.fail(w, r, fmt.Errorf("resume order %s: %w", b.OrderID, err))
		return
	}
	st, err := contracts.MarshalJSON(res.GetState())
	if err != nil {
		s.fail(w, r, fmt.Errorf("encode state of order %s: %w", b.OrderID, err))
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]json.RawMessage{"state": st})
}

// skipTerminalProjection is POST /self-check/skip-terminal-projection: the
// terminal event of the order that key starts is recorded without its
// projection, once.
func (s *Server) skipTerminalProjection(w http.ResponseWriter, r *http.Request) {
	var b struct {
		IdempotencyKey string `json:"idempotencyKey"`
	}
	if !s.decodeHook(w, r, &b) {
		return
	}
	if err := checkID("idempotencyKey", b.IdempotencyKey); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.cfg.SelfCheck.Fixtures.ArmSkipTerminalProjection(ctx, b.IdempotencyKey); err != nil {
		s.fail(w, r, fmt.Errorf("arm skip terminal projection: %w", err))
		return
	}
	s.writeJSON(w, http.StatusOK, struct{}{})
}

// deleteProjection is DELETE /self-check/orders/{orderId}/projection.
func (s *Server) deleteProjection(w http.ResponseWriter, r *http.Request) {
	id, err := pathOrderID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.cfg.SelfCheck.Projections.Delete(ctx, id); err != nil {
		s.fail(w, r, fmt.Errorf("delete projection of order %s: %w", id, err))
		return
	}
	s.writeJSON(w, http.StatusOK, struct{}{})
}

// EvidenceEvent is one stream entry in an Evidence reply.
type EvidenceEvent struct {
	EventID         string `json:"eventId"`
	EventType       string `json:"eventType"`
	Version         int64  `json:"version"`
	SourceCommandID string `json:"sourceCommandId"`
	CreatedAtUnixMs int64  `json:"createdAtUnixMs"`
}

// RelocationView is one relocation operation in an Evidence reply.
type RelocationView struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	Target     string `json:"target"`
	Generation int64  `json:"generation"`
	State      string `json:"state"`
}

// Evidence is the reply of GET /self-check/orders/{orderId}/evidence.
type Evidence struct {
	OrderID        string           `json:"orderId"`
	Events         []EvidenceEvent  `json:"events"`
	Generation     int64            `json:"generation"`
	OwnerNode      string           `json:"ownerNode"`
	OwnerMember    string           `json:"ownerMember"`
	Authority      string           `json:"authority"`
	ReservationID  string           `json:"reservationId"`
	PaymentID      string           `json:"paymentId"`
	ReserveCalls   int64            `json:"reserveCalls"`
	ReleaseCalls   int64            `json:"releaseCalls"`
	AuthorizeCalls int64            `json:"authorizeCalls"`
	Relocations    []RelocationView `json:"relocations"`
}

// orderEvidence is GET /self-check/orders/{orderId}/evidence: the real
// stream, the authority record and the module call counts, read from the
// stores. It prints `shoppingmall-evidence order=<OrderId> events=<N>`.
func (s *Server) orderEvidence(w http.ResponseWriter, r *http.Request) {
	id, err := pathOrderID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	ev, err := s.collectEvidence(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("evidence of order %s: %w", id, err))
		return
	}
	s.evidence.line(fmt.Sprintf("shoppingmall-evidence order=%s events=%d", id, len(ev.Events)))
	s.writeJSON(w, http.StatusOK, ev)
}

func (s *Server) collectEvidence(ctx context.Context, id string) (*Evidence, error) {
	sc := s.cfg.SelfCheck
	envs, err := sc.Events.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return nil, fmt.Errorf("%w: order %s has no event stream", ErrNotFound, id)
	}
	ev := &Evidence{OrderID: id, Events: make([]EvidenceEvent, len(envs)),
		ReservationID: order.ReservationID(id), PaymentID: order.PaymentID(id), Relocations: []RelocationView{}}
	for i, e := range envs {
		ev.Events[i] = EvidenceEvent{EventID: e.EventID, EventType: e.EventType, Version: e.Version,
			SourceCommandID: e.SourceCommandID, CreatedAtUnixMs: e.CreatedAtUnixMs}
	}
	rec, err := sc.Authority.Get(ctx, grain.KindName, id)
	if err != nil {
		return nil, err
	}
	ev.Generation, ev.OwnerMember, ev.Authority = rec.Generation, rec.Owner, string(rec.Status)
	if rec.Status == location.Missing {
		ev.Authority = "Missing"
	}
	if rec.Owner != "" {
		names, err := sc.Authority.MemberNames(ctx)
		if err != nil {
			return nil, err
		}
		ev.OwnerNode = names[rec.Owner]
	}
	if ev.ReserveCalls, err = sc.Inventory.ReserveCalls(ctx, ev.ReservationID); err != nil {
		return nil, err
	}
	if ev.ReleaseCalls, err = sc.Inventory.ReleaseCalls(ctx, ev.ReservationID); err != nil {
		return nil, err
	}
	if ev.AuthorizeCalls, err = sc.Payment.AuthorizeCalls(ctx, ev.PaymentID); err != nil {
		return nil, err
	}
	ops, err := sc.Relocations.Operations(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		ev.Relocations = append(ev.Relocations, RelocationView{ID: op.ID, Source: op.Source, Target: op.Target,
			Generation: op.Generation, State: string(op.State)})
	}
	return ev, nil
}

type effectResult struct {
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
}

// same reports whether a repeat returned the first result. The stream
// records the domain's default reason where the module gave none, so an
// empty repeated reason matches any recorded one.
func (first effectResult) same(repeat effectResult) bool {
	return first.Accepted == repeat.Accepted && (repeat.Reason == "" || repeat.Reason == first.Reason)
}

type reservationRepeat struct {
	First       effectResult     `json:"first"`
	Repeat      effectResult     `json:"repeat"`
	StockBefore map[string]int64 `json:"stockBefore"`
	StockAfter  map[string]int64 `json:"stockAfter"`
}

type paymentRepeat struct {
	First          effectResult `json:"first"`
	Repeat         effectResult `json:"repeat"`
	CapturedBefore int64        `json:"capturedBefore"`
	CapturedAfter  int64        `json:"capturedAfter"`
}

// RepeatEffects is the reply of POST /self-check/orders/{orderId}/repeat-effects.
// Payment is absent when the stream records no payment outcome (an
// inventory failure): repeating it would be a first call, not a repeat.
type RepeatEffects struct {
	Reservation  *reservationRepeat `json:"reservation"`
	Payment      *paymentRepeat     `json:"payment,omitempty"`
	SameResults  bool               `json:"sameResults"`
	NothingMoved bool               `json:"nothingMoved"`
}

// repeatEffects is POST /self-check/orders/{orderId}/repeat-effects: it
// calls the inventory and payment modules again with the order's
// deterministic ids and compares with the outcomes the stream recorded.
// The calls are counted like any other, so collect counts before.
func (s *Server) repeatEffects(w http.ResponseWriter, r *http.Request) {
	id, err := pathOrderID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.repeat(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("repeat effects of order %s: %w", id, err))
		return
	}
	s.writeJSON(w, http.StatusOK, res)
}

func (s *Server) repeat(ctx context.Context, id string) (*RepeatEffects, error) {
	sc := s.cfg.SelfCheck
	envs, err := sc.Events.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return nil, fmt.Errorf("%w: order %s has no event stream", ErrNotFound, id)
	}
	reserved, paid, err := recordedOutcomes(envs)
	if err != nil {
		return nil, err
	}
	if reserved == nil {
		return nil, fmt.Errorf("%w: order %s records no reservation outcome yet", ErrFailedPrecondition, id)
	}
	first, err := sc.Envelopes.LoadFirst(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &RepeatEffects{SameResults: true, NothingMoved: true}

	rr := &reservationRepeat{First: *reserved}
	if rr.StockBefore, err = s.stock(ctx, first.GetLines()); err != nil {
		return nil, err
	}
	inv, err := sc.Inventory.Reserve(ctx, &contracts.ReserveInventoryReq{
		OrderId: id, ReservationId: order.ReservationID(id), Lines: first.GetLines(),
	})
	if err != nil {
		return nil, err
	}
	rr.Repeat = effectResult{Accepted: inv.GetAccepted(), Reason: inv.GetReason()}
	if rr.StockAfter, err = s.stock(ctx, first.GetLines()); err != nil {
		return nil, err
	}
	out.Reservation = rr
	out.SameResults = out.SameResults && rr.First.same(rr.Repeat)
	for sku, n := range rr.StockBefore {
		out.NothingMoved = out.NothingMoved && rr.StockAfter[sku] == n
	}

	if paid != nil {
		pr := &paymentRepeat{First: *paid}
		pid := order.PaymentID(id)
		if pr.CapturedBefore, err = sc.Payment.Captured(ctx, pid); err != nil {
			return nil, err
		}
		pay, err := sc.Payment.Authorize(ctx, &contracts.AuthorizePaymentReq{
			OrderId: id, PaymentId: pid, PaymentMethodId: first.GetPaymentMethodId(),
			Amount: first.GetAmount(), Currency: first.GetCurrency(),
		})
		if err != nil {
			return nil, err
		}
		pr.Repeat = effectResult{Accepted: pay.GetAccepted(), Reason: pay.GetReason()}
		if pr.CapturedAfter, err = sc.Payment.Captured(ctx, pid); err != nil {
			return nil, err
		}
		out.Payment = pr
		out.SameResults = out.SameResults && pr.First.same(pr.Repeat)
		out.NothingMoved = out.NothingMoved && pr.CapturedBefore == pr.CapturedAfter
	}
	return out, nil
}

// recordedOutcomes returns the reservation and payment outcomes the
// stream records, nil where it records none.
func recordedOutcomes(envs []eventstore.Envelope) (reserved, paid *effectResult, err error) {
	for _, e := range envs {
		switch e.EventType {
		case order.TypeInventoryReserved:
			reserved = &effectResult{Accepted: true}
		case order.TypeInventoryReservationFailed:
			var m contracts.InventoryReservationFailedEvent
			if err := contracts.UnmarshalJSON(e.Data, &m); err != nil {
				return nil, nil, fmt.Errorf("%w: %s at version %d: %w", eventstore.ErrCorrupt, e.EventType, e.Version, err)
			}
			reserved = &effectResult{Reason: m.GetReason()}
		case order.TypePaymentAuthorized:
			paid = &effectResult{Accepted: true}
		case order.TypePaymentFailed:
			var m contracts.PaymentFailedEvent
			if err := contracts.UnmarshalJSON(e.Data, &m); err != nil {
				return nil, nil, fmt.Errorf("%w: %s at version %d: %w", eventstore.ErrCorrupt, e.EventType, e.Version, err)
			}
			paid = &effectResult{Reason: m.GetReason()}
		}
	}
	return reserved, paid, nil
}

func (s *Server) stock(ctx context.Context, lines []*contracts.OrderLine) (map[string]int64, error) {
	out := make(map[string]int64, len(lines))
	for _, l := range lines {
		n, err := s.cfg.SelfCheck.Inventory.Stock(ctx, l.GetSku())
		if err != nil {
			return nil, err
		}
		out[l.GetSku()] = n
	}
	return out, nil
}

// decodeHook reads a hook's own JSON body strictly; it answers the failure
// itself.
func (s *Server) decodeHook(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := readBody(w, r)
	if err == nil {
		err = decodeJSON(body, v, false)
	}
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	return true
}
