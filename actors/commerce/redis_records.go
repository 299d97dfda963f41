package commerce

import (
	"context"
	"fmt"
	"strconv"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The records of the inventory and payment modules read back by id. One
// HGETALL each: the record is one hash, so the read sees one consistent
// version of it.

// Reservation implements ReservationRecords.
func (r inventoryStore) Reservation(ctx context.Context, reservationID string) (ReservationRecord, error) {
	if reservationID == "" {
		return ReservationRecord{}, invalid("reservationId is empty")
	}
	key := r.keys.reservation(reservationID)
	v, err := r.client.HGetAll(ctx, key).Result()
	if err != nil {
		return ReservationRecord{}, translate("read reservation", err)
	}
	accepted, ok := v["accepted"]
	if !ok {
		return ReservationRecord{}, fmt.Errorf("%w: reservation %q", ErrNotFound, reservationID)
	}
	if accepted != "0" && accepted != "1" {
		return ReservationRecord{}, fmt.Errorf("%w: reservation %q has accepted %q", ErrCorrupt, reservationID, accepted)
	}
	rec := ReservationRecord{ReservationID: reservationID, Reserve: &contracts.ReserveInventoryRes{Accepted: accepted == "1"}}
	if !rec.Reserve.Accepted {
		// Reserve answers a rejection with its reason, so the record does too.
		reason := v["reason"]
		rec.Reserve.Reason = &reason
	}
	if rec.Reserve.Accepted && v["released"] == "1" {
		rec.Release = &contracts.ReleaseInventoryRes{Released: true}
	}
	if rec.ReserveCalls, err = counterField(v, key, "reserveCalls"); err != nil {
		return ReservationRecord{}, err
	}
	if rec.ReleaseCalls, err = counterField(v, key, "releaseCalls"); err != nil {
		return ReservationRecord{}, err
	}
	return rec, nil
}

// Authorization implements AuthorizationRecords.
func (r paymentStore) Authorization(ctx context.Context, paymentID string) (AuthorizationRecord, error) {
	if paymentID == "" {
		return AuthorizationRecord{}, invalid("paymentId is empty")
	}
	key := r.keys.paymentRecord(paymentID)
	v, err := r.client.HGetAll(ctx, key).Result()
	if err != nil {
		return AuthorizationRecord{}, translate("read payment", err)
	}
	accepted, ok := v["accepted"]
	if !ok {
		return AuthorizationRecord{}, fmt.Errorf("%w: payment %q", ErrNotFound, paymentID)
	}
	if accepted != "0" && accepted != "1" {
		return AuthorizationRecord{}, fmt.Errorf("%w: payment %q has accepted %q", ErrCorrupt, paymentID, accepted)
	}
	rec := AuthorizationRecord{PaymentID: paymentID, Result: &contracts.AuthorizePaymentRes{Accepted: accepted == "1"}}
	if rec.Result.Accepted {
		if rec.Captured, err = strconv.ParseInt(v["amount"], 10, 64); err != nil {
			return AuthorizationRecord{}, fmt.Errorf("%w: payment %q amount is %q", ErrCorrupt, paymentID, v["amount"])
		}
	} else {
		reason := v["reason"]
		rec.Result.Reason = &reason
	}
	if rec.Calls, err = counterField(v, key, "calls"); err != nil {
		return AuthorizationRecord{}, err
	}
	return rec, nil
}

// counterField parses a call counter of a record read whole; an absent
// counter is 0.
func counterField(v map[string]string, key, field string) (int64, error) {
	raw, ok := v[field]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s of %q is %q", ErrCorrupt, field, key, raw)
	}
	return n, nil
}
