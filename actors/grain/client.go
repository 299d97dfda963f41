package grain

import (
	"context"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// Client is the typed caller of order grains. It addresses an order only
// by its OrderId (the global Spot ID); the Location Store finds the owner.
// Errors wrap workflow.ErrNotFound, ErrInvalidArgument, ErrConflict,
// location.ErrUnavailable, location.ErrTimeout, ErrFailedPrecondition or
// ErrInternal. Safe for concurrent use.
type Client struct {
	ctx *location.Context
}

// NewClient returns a client that calls through the lookup's context.
func NewClient(l *location.Lookup) *Client {
	return &Client{ctx: location.NewContext(l)}
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
// generation.
func (c *Client) RelocateOrder(ctx context.Context, req *contracts.RelocateOrderReq) (*contracts.RelocateOrderRes, error) {
	return call[*contracts.RelocateOrderRes](ctx, c, req.GetOrderId(), req)
}

// ResumeOrder wakes a continuation parked at an interrupt gate.
func (c *Client) ResumeOrder(ctx context.Context, req *contracts.ResumeOrderReq) (*contracts.ResumeOrderRes, error) {
	return call[*contracts.ResumeOrderRes](ctx, c, req.GetOrderId(), req)
}
