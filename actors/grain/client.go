package grain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
)

// Client is the typed caller of order grains. It addresses an order only
// by its OrderId (the global Spot ID); the Location Store finds the owner.
// Errors wrap workflow.ErrNotFound, ErrInvalidArgument, ErrConflict,
// placement.ErrUnavailable (the owner is gone), location.ErrTimeout,
// ErrStoreUnavailable or location.ErrStoreUnavailable (retry soon),
// placement.ErrNoMember, ErrFailedPrecondition or ErrInternal. Safe for
// concurrent use.
type Client struct {
	ctx         *placement.Context
	lookup      *placement.Lookup
	relocations relocation.Store
	now         func() int64
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithRelocations lets the client complete an interrupted relocation
// (RelocateOrder repeated with its operation id) and keep its record.
func WithRelocations(s relocation.Store) ClientOption {
	return func(c *Client) { c.relocations = s }
}

// NewClient returns a client that calls through the lookup's context.
func NewClient(l *placement.Lookup, opts ...ClientOption) *Client {
	c := &Client{ctx: placement.NewContext(l), lookup: l, now: func() int64 { return time.Now().UnixMilli() }}
	for _, o := range opts {
		o(c)
	}
	return c
}

func call[T any](ctx context.Context, c *Client, orderID string, msg any) (T, error) {
	var zero T
	res, err := c.ctx.RequestContext(ctx, orderID, KindName, msg)
	if err != nil {
		return zero, err
	}
	switch r := res.(type) {
	case *contracts.WorkflowError:
		return zero, fromWire(r)
	case T:
		return r, nil
	default:
		return zero, fmt.Errorf("%w: unexpected reply %T", ErrInternal, res)
	}
}

// StartOrderWorkflow records the start (or finds it recorded) and reports
// whether this call recorded OrderStartedEvent.
func (c *Client) StartOrderWorkflow(ctx context.Context, req *contracts.StartOrderWorkflowReq) (*contracts.StartOrderWorkflowRes, bool, error) {
	r, err := call[*contracts.StartOrderWorkflowReply](ctx, c, req.GetOrderId(), req)
	if err != nil {
		return nil, false, err
	}
	return r.GetRes(), r.GetRecorded(), nil
}

// ContinueOrderWorkflow performs the next possible step.
func (c *Client) ContinueOrderWorkflow(ctx context.Context, req *contracts.ContinueOrderWorkflowReq) (*contracts.ContinueOrderWorkflowRes, error) {
	return call[*contracts.ContinueOrderWorkflowRes](ctx, c, req.GetOrderId(), req)
}

// RebuildOrderProjection rewrites the read model from the stream alone.
func (c *Client) RebuildOrderProjection(ctx context.Context, req *contracts.RebuildOrderProjectionReq) (*contracts.RebuildOrderProjectionRes, error) {
	return call[*contracts.RebuildOrderProjectionRes](ctx, c, req.GetOrderId(), req)
}

// CloseOrder releases the order's authority; the next command activates
// generation + 1.
func (c *Client) CloseOrder(ctx context.Context, req *contracts.CloseOrderReq) (*contracts.CloseOrderRes, error) {
	return call[*contracts.CloseOrderRes](ctx, c, req.GetOrderId(), req)
}

// RelocateOrder moves the order to another workflow member, same
// generation. Repeating an interrupted relocation (same operation id, the
// order still Moving) completes it from here, or rolls it back when its
// target cannot be activated; it is never left half-owned.
func (c *Client) RelocateOrder(ctx context.Context, req *contracts.RelocateOrderReq) (*contracts.RelocateOrderRes, error) {
	if req.GetOperationId() != "" && c.relocations != nil {
		rec, err := c.lookup.Store().Get(ctx, KindName, req.GetOrderId())
		if err != nil {
			return nil, err
		}
		if rec.Status == location.Moving && rec.MoveOp == req.GetOperationId() {
			return c.completeRelocation(ctx, req)
		}
	}
	return call[*contracts.RelocateOrderRes](ctx, c, req.GetOrderId(), req)
}

func (c *Client) completeRelocation(ctx context.Context, req *contracts.RelocateOrderReq) (*contracts.RelocateOrderRes, error) {
	op, err := c.relocations.GetOperation(ctx, req.GetOperationId())
	if err != nil && !errors.Is(err, relocation.ErrNotFound) {
		return nil, err
	}
	target := req.GetTargetNode()
	if target == "" {
		target = op.Target
	}
	names, err := c.lookup.NodeNames(ctx)
	if err != nil {
		return nil, err
	}
	op.ID, op.OrderID = req.GetOperationId(), req.GetOrderId()
	if op.StartedAtUnixMs == 0 {
		op.StartedAtUnixMs = c.now()
	}
	rec, err := c.lookup.CompleteMove(ctx, placement.MovePlan{
		Kind: KindName, Identity: req.GetOrderId(), TargetNode: target, OperationID: req.GetOperationId(),
		Progress: func(stage placement.MoveStage, member string, gen int64) {
			if member != "" && names[member] == "" {
				names, _ = c.lookup.NodeNames(ctx)
			}
			op.State, op.Generation, op.UpdatedAtUnixMs = relocation.OpState(stage), gen, c.now()
			if member != "" {
				op.Target = names[member]
			}
			_ = c.relocations.PutOperation(context.WithoutCancel(ctx), op)
		},
	})
	if err != nil {
		if errors.Is(err, placement.ErrMoveRolledBack) || errors.Is(err, location.ErrNotOwner) {
			return nil, fmt.Errorf("%w: %w", ErrFailedPrecondition, err)
		}
		return nil, err
	}
	return &contracts.RelocateOrderRes{
		OrderId: req.GetOrderId(), OperationId: req.GetOperationId(), SourceNode: op.Source,
		TargetNode: names[rec.Owner], Generation: rec.Generation,
	}, nil
}

// ResumeOrder wakes a continuation parked at an interrupt gate.
func (c *Client) ResumeOrder(ctx context.Context, req *contracts.ResumeOrderReq) (*contracts.ResumeOrderRes, error) {
	return call[*contracts.ResumeOrderRes](ctx, c, req.GetOrderId(), req)
}
