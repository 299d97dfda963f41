package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	restate "github.com/restatedev/sdk-go"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
)

// ObjectName and PlaceHandler address the workflow at Restate's ingress:
// POST /Order/{orderId}/Place.
const (
	ObjectName   = "Order"
	PlaceHandler = "Place"
	// stateKey holds the order's fold (order.State) in the object's state.
	stateKey = "state"
)

// PlaceReq is the body of Place: StartOrderReq (docs/contract.md,
// "StartOrder") without the order id, which is the object's key.
type PlaceReq struct {
	CartID            string `json:"cartId"`
	ShippingAddressID string `json:"shippingAddressId"`
	PaymentMethodID   string `json:"paymentMethodId"`
	IdempotencyKey    string `json:"idempotencyKey"`
}

// Outcome is what Place answers once the order is terminal.
type Outcome struct {
	OrderID string `json:"orderId"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Version int64  `json:"version"`
}

// effect is a module's answer as journaled by restate.Run, with the time
// it was made: the time is journaled too so that a replay folds the same
// timestamps.
type effect struct {
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
	AtUnixMs int64  `json:"at"`
}

// cartSnap is the cart as journaled at the start.
type cartSnap struct {
	Lines    []order.Line `json:"lines"`
	Amount   int64        `json:"amount"`
	Currency string       `json:"currency"`
	AtUnixMs int64        `json:"at"`
}

// workflow runs the order workflow of actors/workflow as one Restate
// virtual-object handler: the same domain (order.Start, order.Decide,
// the step results, order.Apply) and the same modules under the same
// deterministic ids (order.ReservationID, order.PaymentID). What differs
// is where durability comes from: each module call is a restate.Run
// (its result journaled in Restate's log before the handler goes on) and
// the fold is the object's state, set after every step, instead of an
// event stream and a projection in Redis.
type workflow struct {
	carts     commerce.Carts
	inventory commerce.Inventory
	payment   commerce.Payment
}

func (w *workflow) definition() restate.ServiceDefinition {
	return restate.NewObject(ObjectName).
		Handler(PlaceHandler, restate.NewObjectHandler(w.place))
}

// place starts the order (Created), then performs the steps order.Decide
// picks until the order is terminal: reserve inventory, authorize payment,
// confirm; or fail, releasing the reservation first after a declined
// payment. A retried invocation replays its journal, so a module is
// called again only for a step whose result was never journaled, and
// then under the same id, which answers the first result.
func (w *workflow) place(ctx restate.ObjectContext, req PlaceReq) (Outcome, error) {
	id := restate.Key(ctx)
	prev, gerr := restate.Get[*order.State](ctx, stateKey)
	if gerr != nil {
		return Outcome{}, gerr
	}
	var st order.State
	var err error
	sourceCommandID := order.StartSourceCommandID(req.IdempotencyKey)
	switch {
	case prev != nil && prev.Started:
		// The same start after Restate's idempotency retention: carry on
		// from the fold. Another start for the same order is refused.
		if prev.StartSourceCommandID != sourceCommandID {
			return Outcome{}, restate.ToTerminalError(fmt.Errorf("order %s was started by another command", id),
				restate.WithErrorCode(409))
		}
		st = *prev
	default:
		cart, rerr := restate.Run(ctx, func(rc restate.RunContext) (cartSnap, error) {
			return w.loadCart(rc, req.CartID)
		}, restate.WithName("load-cart"))
		if rerr != nil {
			return Outcome{}, rerr
		}
		ev, err := order.Start(st, order.StartOrder{
			OrderID: id, CartID: req.CartID, ShippingAddressID: req.ShippingAddressID,
			SourceCommandID: sourceCommandID, Lines: cart.Lines, Amount: cart.Amount, Currency: cart.Currency,
		})
		if err != nil {
			return Outcome{}, restate.ToTerminalError(err, restate.WithErrorCode(400))
		}
		if st, err = w.record(ctx, st, ev, cart.AtUnixMs); err != nil {
			return Outcome{}, err
		}
	}
	for !st.Status.Terminal() {
		if st, err = w.step(ctx, st, req.PaymentMethodID); err != nil {
			return Outcome{}, err
		}
	}
	return Outcome{OrderID: id, Status: string(st.Status), Reason: st.Reason, Version: st.Version}, nil
}

// step performs the one step order.Decide picks and records its event.
func (w *workflow) step(ctx restate.ObjectContext, st order.State, methodID string) (order.State, error) {
	var ev order.Event
	var err error
	at := st.UpdatedAtUnixMs
	switch step := order.Decide(st); step {
	case order.StepReserveInventory:
		eff, rerr := restate.Run(ctx, func(rc restate.RunContext) (effect, error) {
			res, err := w.inventory.Reserve(rc, &contracts.ReserveInventoryReq{
				OrderId: st.OrderID, ReservationId: order.ReservationID(st.OrderID), Lines: contractLines(st.Lines),
			})
			if err != nil {
				return effect{}, moduleError(err)
			}
			return effect{Accepted: res.GetAccepted(), Reason: res.GetReason(), AtUnixMs: time.Now().UnixMilli()}, nil
		}, restate.WithName("reserve-inventory"))
		if rerr != nil {
			return st, rerr
		}
		at = eff.AtUnixMs
		ev, err = order.ReservationResult(st, eff.Accepted, eff.Reason)
	case order.StepAuthorizePayment:
		eff, rerr := restate.Run(ctx, func(rc restate.RunContext) (effect, error) {
			res, err := w.payment.Authorize(rc, &contracts.AuthorizePaymentReq{
				OrderId: st.OrderID, PaymentId: order.PaymentID(st.OrderID), PaymentMethodId: methodID,
				Amount: st.Amount, Currency: st.Currency,
			})
			if err != nil {
				return effect{}, moduleError(err)
			}
			return effect{Accepted: res.GetAccepted(), Reason: res.GetReason(), AtUnixMs: time.Now().UnixMilli()}, nil
		}, restate.WithName("authorize-payment"))
		if rerr != nil {
			return st, rerr
		}
		at = eff.AtUnixMs
		ev, err = order.PaymentResult(st, eff.Accepted, eff.Reason)
	case order.StepReleaseInventory:
		eff, rerr := restate.Run(ctx, func(rc restate.RunContext) (effect, error) {
			res, err := w.inventory.Release(rc, &contracts.ReleaseInventoryReq{
				OrderId: st.OrderID, ReservationId: st.ReservationID, Reason: st.Reason,
			})
			if err != nil {
				return effect{}, moduleError(err)
			}
			return effect{Accepted: res.GetReleased(), Reason: res.GetReason(), AtUnixMs: time.Now().UnixMilli()}, nil
		}, restate.WithName("release-inventory"))
		if rerr != nil {
			return st, rerr
		}
		if !eff.Accepted {
			// As actors/workflow's ErrReleaseRefused: the order must not
			// fail while stock is held, so the invocation stops here.
			return st, restate.TerminalErrorf("order %s: release of %s refused: %s", st.OrderID, st.ReservationID, eff.Reason)
		}
		at = eff.AtUnixMs
		ev, err = order.Released(st, st.Reason)
	case order.StepConfirm:
		// No module call, so no fresh clock reading: the time of the
		// step before keeps the handler deterministic on replay without
		// another journal entry.
		ev, err = order.Confirm(st, at)
	case order.StepFail:
		ev, err = order.Fail(st, at)
	default:
		return st, restate.TerminalErrorf("order %s at %s: no step to take", st.OrderID, st.Status)
	}
	if err != nil {
		return st, restate.ToTerminalError(err)
	}
	return w.record(ctx, st, ev, at)
}

// record folds ev into st and stores the fold as the object's state.
func (w *workflow) record(ctx restate.ObjectContext, st order.State, ev order.Event, at int64) (order.State, error) {
	next, err := order.Apply(st, ev, at)
	if err != nil {
		return st, restate.ToTerminalError(err)
	}
	restate.Set(ctx, stateKey, next)
	return next, nil
}

func (w *workflow) loadCart(ctx context.Context, cartID string) (cartSnap, error) {
	c, err := w.carts.GetCart(ctx, cartID)
	if err != nil {
		return cartSnap{}, moduleError(err)
	}
	lines := make([]order.Line, 0, len(c.Lines))
	for _, l := range c.Lines {
		lines = append(lines, order.Line{SKU: l.GetSku(), Quantity: l.GetQuantity()})
	}
	return cartSnap{Lines: lines, Amount: c.Amount, Currency: c.Currency, AtUnixMs: time.Now().UnixMilli()}, nil
}

// moduleError makes a refusal final (a retry would be refused again) and
// leaves everything else, an unavailable Redis above all, to Restate's
// retries: every module call is keyed by a deterministic id.
func moduleError(err error) error {
	if errors.Is(err, commerce.ErrNotFound) || errors.Is(err, commerce.ErrInvalidArgument) || errors.Is(err, commerce.ErrCorrupt) {
		return restate.ToTerminalError(err, restate.WithErrorCode(400))
	}
	return err
}

func contractLines(ls []order.Line) []*contracts.OrderLine {
	out := make([]*contracts.OrderLine, 0, len(ls))
	for _, l := range ls {
		out = append(out, &contracts.OrderLine{Sku: l.SKU, Quantity: l.Quantity})
	}
	return out
}
