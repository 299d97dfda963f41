package commerce

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Compaction of a finished order's module records, for the archiver. The
// records stay, smaller, so that a late or zombie call with the order's
// ids still gets its first result and never runs again; what goes is
// what only an unfinished call needs: the reservation's lines and its
// holds per SKU (each under the SKU's tag), the call counters, the
// payment's request fields. Each is a per-id script of this store, as
// every module write is, in an order a crash between them leaves
// answerable:
//
//  1. the reservation record is marked archived, keeping its lines: from
//     then on a late Release of an accepted reservation never released
//     answers "not released" (ReasonReservationArchived) instead of
//     giving stock back;
//  2. each line's hold goes;
//  3. the lines and counters go.
//
// Every step answers every call from the record alone, so a crash
// anywhere leaves the record answerable and a rerun finishes the rest.

// ErrNotDecided: a compaction of a reservation that is not decided, or is
// halfway through a release: the order is not finished with it.
var ErrNotDecided = errors.New("commerce: the reservation is not decided")

// ReasonReservationArchived is the answer of a Release of an accepted
// reservation, never released, whose order was archived.
const ReasonReservationArchived = "order archived"

// archiveReservationScript: KEYS[1] reservation record. Reply {'ok', lines} | {'undecided', ”} |
// {'none', ”} for a reservation never made (nothing written).
var archiveReservationScript = redis.NewScript(`#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return {'none', ''} end
local v = redis.call('HMGET', KEYS[1], 'accepted', 'state', 'lines', 'archived')
if v[4] then return {'ok', v[3] or ''} end
if not v[1] or v[2] == 'releasing' then return {'undecided', ''} end
redis.call('HSET', KEYS[1], 'archived', '1')
return {'ok', v[3] or ''}
`)

// CompactReservation compacts reservation id's records (the steps above).
// A reservation that was never made is nothing to compact; one that is
// not decided fails with ErrNotDecided and is left as it is.
func (r *Redis) CompactReservation(ctx context.Context, id string) error {
	if id == "" {
		return invalid("reservationId is empty")
	}
	inv := inventoryStore{r}
	rec := r.keys.reservation(id)
	v, err := inv.run(ctx, "archive reservation", archiveReservationScript, 2, []string{rec})
	if err != nil {
		return err
	}
	switch v[0] {
	case "none":
		return nil
	case "undecided":
		return fmt.Errorf("%w: %s", ErrNotDecided, id)
	}
	if v[1] != "" {
		lines, err := decodeLines(id, v[1])
		if err != nil {
			return err
		}
		if _, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, l := range lines {
				p.Del(ctx, r.keys.hold(l.SKU, id))
			}
			return nil
		}); err != nil {
			return translate("drop holds of "+id, err)
		}
	}
	if err := trimReservationScript.Run(ctx, r.client, []string{rec}).Err(); err != nil {
		return translate("compact reservation "+id, err)
	}
	return nil
}

// trimReservationScript drops what only an unfinished call reads, and an
// empty reason (every script reads a missing one as empty). KEYS[1]
// reservation record.
var trimReservationScript = redis.NewScript(`#!lua
redis.call('HDEL', KEYS[1], 'lines', 'short', 'state', 'orderId', 'reserveCalls', 'releaseCalls', 'releaseRequestReason')
for _, f in ipairs({'reason', 'releaseReason'}) do
  if redis.call('HGET', KEYS[1], f) == '' then redis.call('HDEL', KEYS[1], f) end
end
return 1
`)

// compactPaymentScript: KEYS[1] payment record. Reply 1 compacted (or
// nothing recorded), 0 undecided. An accepted payment keeps the amount
// it captured: it is part of its first result (Payment.Captured, what an
// archived order's timeline shows), a few bytes.
var compactPaymentScript = redis.NewScript(`#!lua
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
if not redis.call('HGET', KEYS[1], 'accepted') then return 0 end
redis.call('HDEL', KEYS[1], 'orderId', 'methodId', 'currency', 'calls')
if redis.call('HGET', KEYS[1], 'reason') == '' then redis.call('HDEL', KEYS[1], 'reason') end
return 1
`)

// CompactPayment keeps payment id's first result alone (with the
// captured amount of an accepted one), readable as before
// (AuthorizationRecords, with no calls counted). A payment that
// was never made is nothing to compact.
func (r *Redis) CompactPayment(ctx context.Context, id string) error {
	if id == "" {
		return invalid("paymentId is empty")
	}
	n, err := compactPaymentScript.Run(ctx, r.client, []string{r.keys.paymentRecord(id)}).Int()
	if err != nil {
		return translate("compact payment "+id, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: payment %s", ErrNotDecided, id)
	}
	return nil
}

// MappingOf returns the idempotency mapping filed under orderID, whatever
// its key, or ErrNotFound: the archiver's check that the order's start
// was marked (a mapping of the layout before the order's tag is not read).
func (r *Redis) MappingOf(ctx context.Context, orderID string) (Mapping, error) {
	if orderID == "" {
		return Mapping{}, invalid("orderId is empty")
	}
	v, err := r.client.HMGet(ctx, r.keys.idem(orderID), "orderId", "status", "fingerprint").Result()
	if err != nil {
		return Mapping{}, translate("get mapping of "+orderID, err)
	}
	id, _ := v[0].(string)
	if id == "" {
		return Mapping{}, fmt.Errorf("%w: mapping of order %q", ErrNotFound, orderID)
	}
	status, _ := v[1].(string)
	fp, _ := v[2].(string)
	return Mapping{OrderID: id, Status: MappingStatus(status), Fingerprint: fp}, nil
}
