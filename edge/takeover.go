package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/takeover"
)

// Takeover takes over the orders of a lost owner (cluster/takeover's
// Service): fence raised, operation recorded, Location record reset, in
// that order. Errors wrap takeover.ErrOwnerLive, ErrNoOwner, ErrNotFound,
// ErrUnknownMember, ErrConflict or ErrInvalidArgument, or a store's
// unavailability.
type Takeover interface {
	// Order takes one order over; a repeat with the same operation id
	// finishes a half-done one.
	Order(ctx context.Context, req takeover.Request) (takeover.Result, error)
	// Member takes over every order of a member id, or of every dead
	// incarnation of a node name. An order that failed is in errs; the
	// others still ran.
	Member(ctx context.Context, req takeover.Request) (results []takeover.Result, errs map[string]error, err error)
}

// TakeoverReply is the reply of the takeover routes: what was taken over
// (or, on a dry run, would be) and what failed.
type TakeoverReply struct {
	DryRun bool `json:"dryRun"`
	Force  bool `json:"force"`
	// Member is the member id or node name a member takeover was asked for.
	Member string           `json:"member,omitempty"`
	Orders []TakenOverOrder `json:"orders"`
	// Failed lists the orders of a member takeover whose takeover failed;
	// repeating the call (with the same operationId) retries them.
	Failed []TakeoverFailure `json:"failed,omitempty"`
}

// TakenOverOrder is one order's takeover.
type TakenOverOrder struct {
	OrderID     string `json:"orderId"`
	OperationID string `json:"operationId"`
	// Member is the old owner's member id, Node its node name.
	Member string `json:"member"`
	Node   string `json:"node,omitempty"`
	// OldGeneration was retired; the fence and the Location record stand
	// at NewGeneration, and the next command activates above it.
	OldGeneration int64 `json:"oldGeneration"`
	NewGeneration int64 `json:"newGeneration"`
	// Outcome is taken-over, would-take-over (dry run),
	// already-taken-over (a repeat) or superseded.
	Outcome string `json:"outcome"`
	// OwnerLive: the owner was live and force evicted it.
	OwnerLive bool `json:"ownerLive,omitempty"`
}

// TakeoverFailure is one order a member takeover could not take over.
type TakeoverFailure struct {
	OrderID string   `json:"orderId"`
	Error   apiError `json:"error"`
}

// takeoverBody is the optional JSON body of the takeover routes; the
// query parameters dryRun, force, scan, operationId and caller say the
// same.
type takeoverBody struct {
	OperationID string `json:"operationId,omitempty"`
	Caller      string `json:"caller,omitempty"`
	Force       bool   `json:"force,omitempty"`
	DryRun      bool   `json:"dryRun,omitempty"`
	Scan        bool   `json:"scan,omitempty"`
}

// registerTakeover adds the takeover routes to the admin router r; without
// a Config.Takeover there are none.
func (s *Server) registerTakeover(r gin.IRoutes) {
	if s.cfg.Takeover == nil {
		return
	}
	r.POST("/admin/orders/:orderId/takeover", handle(s.adminTakeoverOrder))
	r.POST("/admin/members/:member/takeover", handle(s.adminTakeoverMember))
}

// adminTakeoverOrder is POST /admin/orders/{orderId}/takeover[?dryRun=
// true][&force=true][&operationId=ID]: it retires a lost owner's
// authority over the order. Allowed when the owner is gone (recorded gone
// or out of the topology); force also evicts a live one. An owner that is
// live without force, an order with no owner and an operation id in use
// elsewhere are 409; an order never activated is 404.
func (s *Server) adminTakeoverOrder(w http.ResponseWriter, r *http.Request) {
	id, err := pathOrderID(r)
	var req takeover.Request
	if err == nil {
		req, err = s.takeoverRequest(w, r)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req.OrderID = id
	ctx, cancel := s.writeContext(r)
	defer cancel()
	if err := s.refuseArchived(ctx, id); err != nil {
		s.fail(w, r, fmt.Errorf("take over order %s: %w", id, err))
		return
	}
	res, err := s.cfg.Takeover.Order(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("take over order %s: %w", id, err))
		return
	}
	s.log.InfoContext(r.Context(), "takeover", slog.String("order", id), slog.String("operation", res.OperationID),
		slog.String("outcome", string(res.Outcome)), slog.String("caller", req.Caller), slog.Bool("force", req.Force))
	s.writeJSON(w, http.StatusOK, TakeoverReply{DryRun: req.DryRun, Force: req.Force, Orders: []TakenOverOrder{takenOver(res)}})
}

// adminTakeoverMember is POST /admin/members/{member}/takeover[?dryRun=
// true][&force=true][&scan=true][&operationId=ID]: it takes over every
// order of a member id, or of every dead incarnation of a node name
// (every incarnation, with force). scan also reads every Location record,
// for records older than the per-member index. Each order gets operation
// id <operationId>.<orderId> when one is given. A live member id without
// force is 409, an unknown name 404; orders that failed are listed in the
// reply and the others are taken over.
func (s *Server) adminTakeoverMember(w http.ResponseWriter, r *http.Request) {
	member := r.PathValue("member")
	err := checkID("member", member)
	var req takeover.Request
	if err == nil {
		req, err = s.takeoverRequest(w, r)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req.Member = member
	// A member may own many orders: the request's own deadline (the
	// client's) bounds it, not the per-command one.
	results, errs, err := s.cfg.Takeover.Member(r.Context(), req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("take over member %s: %w", member, err))
		return
	}
	rep := TakeoverReply{DryRun: req.DryRun, Force: req.Force, Member: member, Orders: make([]TakenOverOrder, 0, len(results))}
	for _, res := range results {
		rep.Orders = append(rep.Orders, takenOver(res))
	}
	for orderID, e := range errs {
		_, body := httpError(e)
		rep.Failed = append(rep.Failed, TakeoverFailure{OrderID: orderID, Error: body})
		s.log.WarnContext(r.Context(), "takeover of an order failed", slog.String("member", member), slog.String("order", orderID), slog.Any("error", e))
	}
	s.log.InfoContext(r.Context(), "member takeover", slog.String("member", member), slog.Int("orders", len(rep.Orders)),
		slog.Int("failed", len(rep.Failed)), slog.Bool("dryRun", req.DryRun), slog.Bool("force", req.Force),
		slog.String("caller", req.Caller))
	s.writeJSON(w, http.StatusOK, rep)
}

// takeoverRequest reads the options from the query and the optional body.
func (s *Server) takeoverRequest(w http.ResponseWriter, r *http.Request) (takeover.Request, error) {
	body, err := readBody(w, r)
	if err != nil {
		return takeover.Request{}, err
	}
	var b takeoverBody
	if err := decodeJSON(body, &b, bodyOptional); err != nil {
		return takeover.Request{}, err
	}
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		v    *bool
	}{{"dryRun", &b.DryRun}, {"force", &b.Force}, {"scan", &b.Scan}} {
		if raw := q.Get(f.name); raw != "" {
			v, err := strconv.ParseBool(raw)
			if err != nil {
				return takeover.Request{}, invalidField(f.name, "must be true or false")
			}
			*f.v = *f.v || v
		}
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"operationId", &b.OperationID}, {"caller", &b.Caller}} {
		raw := q.Get(f.name)
		switch {
		case raw == "":
		case *f.v != "" && *f.v != raw:
			return takeover.Request{}, invalidField(f.name, "differs between the query and the body")
		default:
			*f.v = raw
		}
		if err := checkOptionalID(f.name, *f.v); err != nil {
			return takeover.Request{}, err
		}
	}
	if b.Caller == "" {
		b.Caller = "admin-http " + s.cfg.NodeID + " from " + r.RemoteAddr
	}
	return takeover.Request{OperationID: b.OperationID, Caller: b.Caller, Force: b.Force, DryRun: b.DryRun, Scan: b.Scan}, nil
}

func takenOver(r takeover.Result) TakenOverOrder {
	return TakenOverOrder{
		OrderID: r.OrderID, OperationID: r.OperationID, Member: r.Member, Node: r.Node,
		OldGeneration: r.OldGeneration, NewGeneration: r.NewGeneration,
		Outcome: string(r.Outcome), OwnerLive: r.OwnerLive,
	}
}

// TakeoverPolicy is told of every order command that ended Unavailable
// because the order's owner is gone (cluster/takeover's Policy).
type TakeoverPolicy interface {
	// OwnerGone must return at once; the policy works in the background.
	OwnerGone(orderID string)
}

// OrdersWithTakeoverPolicy returns orders that tell p of every command
// that ends in placement.ErrUnavailable (OWNER_GONE). The command's answer
// is unchanged: it still ends Unavailable, as the spec says; the policy
// may take the order over so that a new attempt succeeds.
func OrdersWithTakeoverPolicy(o Orders, p TakeoverPolicy) Orders {
	return policyOrders{next: o, policy: p}
}

type policyOrders struct {
	next   Orders
	policy TakeoverPolicy
}

func (p policyOrders) observe(orderID string, err error) {
	if errors.Is(err, placement.ErrUnavailable) {
		p.policy.OwnerGone(orderID)
	}
}

func (p policyOrders) StartOrderWorkflow(ctx context.Context, req *contracts.StartOrderWorkflowReq) (*contracts.StartOrderWorkflowRes, bool, error) {
	res, recorded, err := p.next.StartOrderWorkflow(ctx, req)
	p.observe(req.GetOrderId(), err)
	return res, recorded, err
}

func (p policyOrders) ContinueOrderWorkflow(ctx context.Context, req *contracts.ContinueOrderWorkflowReq) (*contracts.ContinueOrderWorkflowRes, error) {
	res, err := p.next.ContinueOrderWorkflow(ctx, req)
	p.observe(req.GetOrderId(), err)
	return res, err
}

func (p policyOrders) RebuildOrderProjection(ctx context.Context, req *contracts.RebuildOrderProjectionReq) (*contracts.RebuildOrderProjectionRes, error) {
	res, err := p.next.RebuildOrderProjection(ctx, req)
	p.observe(req.GetOrderId(), err)
	return res, err
}
