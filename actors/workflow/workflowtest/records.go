package workflowtest

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// Reservation implements commerce.ReservationRecords.
func (v *Inventory) Reservation(_ context.Context, reservationID string) (commerce.ReservationRecord, error) {
	if reservationID == "" {
		return commerce.ReservationRecord{}, fmt.Errorf("%w: reservationId is empty", commerce.ErrInvalidArgument)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.reservations[reservationID]
	if !ok {
		return commerce.ReservationRecord{}, fmt.Errorf("reservation %q: %w", reservationID, commerce.ErrNotFound)
	}
	rec := commerce.ReservationRecord{
		ReservationID: reservationID,
		Reserve:       proto.Clone(r.res).(*contracts.ReserveInventoryRes),
		ReserveCalls:  v.reserveCalls[reservationID],
		ReleaseCalls:  v.releaseCalls[reservationID],
	}
	if r.res.GetAccepted() && r.released != nil {
		rec.Release = proto.Clone(r.released).(*contracts.ReleaseInventoryRes)
	}
	return rec, nil
}

// Authorization implements commerce.AuthorizationRecords.
func (p *Payment) Authorization(_ context.Context, paymentID string) (commerce.AuthorizationRecord, error) {
	if paymentID == "" {
		return commerce.AuthorizationRecord{}, fmt.Errorf("%w: paymentId is empty", commerce.ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	res, ok := p.results[paymentID]
	if !ok {
		return commerce.AuthorizationRecord{}, fmt.Errorf("payment %q: %w", paymentID, commerce.ErrNotFound)
	}
	return commerce.AuthorizationRecord{
		PaymentID: paymentID,
		Result:    proto.Clone(res).(*contracts.AuthorizePaymentRes),
		Captured:  p.captured[paymentID],
		Calls:     p.authorizeCalls[paymentID],
	}, nil
}
