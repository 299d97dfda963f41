package commerce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The Inventory module on Redis: stock, ledger and hold records per SKU
// under the SKU's tag, one progress record per reservation under its own
// tag. A multi-SKU reservation is the protocol the package doc argues
// for, one script per step; no script spans two tags.

// Reservation states, in the record's state field. The record's accepted
// field, once set, is the decision; state says how far the steps got.
const (
	stateHolding      = "holding"
	stateCompensating = "compensating"
	stateReleasing    = "releasing"
)

// Hold states, in a hold record's state field. The first hold step of a
// line writes held or refused; compensation writes returned, release
// released.
const (
	holdHeld     = "held"
	holdRefused  = "refused"
	holdReturned = "returned"
	holdReleased = "released"
)

// beginReserveScript: KEYS[1] reservation record; ARGV[1] orderId,
// ARGV[2] lines (JSON). It counts the call, answers a decided reservation
// with its result ({'done', accepted, reason}), and otherwise records the
// first call's lines and order once and answers where the protocol
// stands ({state, lines, shortReason}): a repeat works on the first
// call's lines whatever it carries.
var beginReserveScript = redis.NewScript(`#!lua
local rec = KEYS[1]
redis.call('HINCRBY', rec, 'reserveCalls', 1)
local v = redis.call('HMGET', rec, 'accepted', 'reason', 'lines', 'state', 'short')
if v[1] then
  return {'done', v[1], v[2] or ''}
end
if not v[3] then
  redis.call('HSET', rec, 'orderId', ARGV[1], 'lines', ARGV[2], 'state', 'holding')
  return {'holding', ARGV[2], ''}
end
return {v[4] or 'holding', v[3], v[5] or ''}
`)

// ledgerAppend is the head of every script that appends stock movements:
// movement(ledger, fields...) XADDs one, trimming the ledger to about the
// script's last argument (0: no trimming; see Config.LedgerMaxLen).
const ledgerAppend = `
local ledgerMax = tonumber(ARGV[#ARGV])
local function movement(ledger, ...)
  if ledgerMax > 0 then
    return redis.call('XADD', ledger, 'MAXLEN', '~', ledgerMax, '*', ...)
  end
  return redis.call('XADD', ledger, '*', ...)
end
`

// holdLineScript: KEYS hold record, stock, ledger of one SKU; ARGV[1]
// reservationId, ARGV[2] orderId, ARGV[3] quantity, ARGV[4] time (unix
// ms), ARGV[5] sku, ARGV[6] the ledger's cap. The first step for the line
// decides it: it takes the quantity (held) or finds too little (refused,
// with the reason); every later step answers what the record says
// ({state, reason}). A refusal of a stocked SKU is written to the ledger
// with delta 0.
var holdLineScript = redis.NewScript("#!lua\n" + ledgerAppend + `
local st = redis.call('HMGET', KEYS[1], 'state', 'reason')
if st[1] then
  return {st[1], st[2] or ''}
end
local raw = redis.call('GET', KEYS[2])
local have = 0
if raw then
  have = tonumber(raw)
  if not have then
    return redis.error_reply('CORRUPT stock of ' .. ARGV[5] .. ' is not a number')
  end
end
local want = tonumber(ARGV[3])
if have < want then
  local reason = 'insufficient stock for ' .. ARGV[5] .. ': requested ' .. ARGV[3] .. ', available ' .. tostring(have)
  local entry = ''
  if raw then
    entry = movement(KEYS[3], 'kind', 'refuse', 'delta', '0', 'available', raw,
      'requested', ARGV[3], 'reservationId', ARGV[1], 'orderId', ARGV[2], 'at', ARGV[4])
  end
  redis.call('HSET', KEYS[1], 'state', 'refused', 'qty', ARGV[3], 'reason', reason, 'entry', entry)
  return {'refused', reason}
end
local left = redis.call('DECRBY', KEYS[2], want)
local entry = movement(KEYS[3], 'kind', 'reserve', 'delta', tostring(-want), 'available', tostring(left),
  'reservationId', ARGV[1], 'orderId', ARGV[2], 'at', ARGV[4])
redis.call('HSET', KEYS[1], 'state', 'held', 'qty', ARGV[3], 'entry', entry)
return {'held', ''}
`)

// compensateScript: KEYS[1] reservation record; ARGV[1] the reason of
// the short line. It commits the reservation to refusal before any line
// goes back, first reason wins, and answers {'compensating', reason,
// empty} or a decided reservation's {'done', accepted, reason}.
var compensateScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'accepted', 'reason', 'state', 'short')
if v[1] then
  return {'done', v[1], v[2] or ''}
end
if v[3] == 'compensating' then
  return {'compensating', v[4] or '', ''}
end
redis.call('HSET', KEYS[1], 'state', 'compensating', 'short', ARGV[1])
return {'compensating', ARGV[1], ''}
`)

// returnLineScript: KEYS hold record, stock, ledger of one SKU; ARGV[1]
// reservationId, ARGV[2] orderId, ARGV[3] time, ARGV[4] kind
// ('compensate' or 'release'), ARGV[5] the state a returned line gets,
// ARGV[6] the ledger's cap. It gives a held line's quantity back with its
// ledger entry once and answers the line's state, 'none' for a line never
// held (lines after the short one of a refused reservation).
var returnLineScript = redis.NewScript("#!lua\n" + ledgerAppend + `
local v = redis.call('HMGET', KEYS[1], 'state', 'qty')
if not v[1] then
  return 'none'
end
if v[1] ~= 'held' then
  return v[1]
end
local left = redis.call('INCRBY', KEYS[2], v[2])
movement(KEYS[3], 'kind', ARGV[4], 'delta', v[2], 'available', tostring(left),
  'reservationId', ARGV[1], 'orderId', ARGV[2], 'at', ARGV[3])
redis.call('HSET', KEYS[1], 'state', ARGV[5])
return ARGV[5]
`)

// finishReserveScript: KEYS[1] reservation record; ARGV[1] the outcome
// ('1' accepted, '0' refused), ARGV[2] a refusal's reason. It records the
// decision once; a reservation committed to refusal cannot be accepted.
var finishReserveScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'accepted', 'reason', 'state', 'short')
if v[1] then
  return {v[1], v[2] or ''}
end
if ARGV[1] == '1' then
  if v[3] == 'compensating' then
    return redis.error_reply('CORRUPT reservation is compensating, it cannot be accepted')
  end
  redis.call('HSET', KEYS[1], 'accepted', '1', 'reason', '', 'state', 'accepted')
  return {'1', ''}
end
local reason = v[4] or ARGV[2]
redis.call('HSET', KEYS[1], 'accepted', '0', 'reason', reason, 'state', 'refused')
return {'0', reason}
`)

// beginReleaseScript: KEYS[1] reservation record; ARGV[1] the release
// request's reason, ARGV[2] the unknown-reservation reason, ARGV[3] the
// not-accepted reason, ARGV[4] the archived reason. It counts the call
// and answers a decided release ({'done', released, reason}), and one of
// an archived reservation never released as not released: an unknown (undecided) reservation is
// answered and nothing but the counter is recorded; a refused one records
// its answer. An accepted one is committed to release and its lines are
// answered with its order ({'releasing', lines, orderId}).
var beginReleaseScript = redis.NewScript(`#!lua
local rec = KEYS[1]
redis.call('HINCRBY', rec, 'releaseCalls', 1)
local v = redis.call('HMGET', rec, 'accepted', 'lines', 'released', 'releaseReason', 'state', 'orderId', 'archived')
if v[3] then
  return {'done', v[3], v[4] or ''}
end
if v[7] then
  return {'done', '0', ARGV[4]}
end
if not v[1] then
  return {'done', '0', ARGV[2]}
end
if v[1] == '0' then
  redis.call('HSET', rec, 'released', '0', 'releaseReason', ARGV[3], 'releaseRequestReason', ARGV[1])
  return {'done', '0', ARGV[3]}
end
if v[5] ~= 'releasing' then
  redis.call('HSET', rec, 'state', 'releasing', 'releaseRequestReason', ARGV[1])
end
return {'releasing', v[2] or '', v[6] or ''}
`)

// finishReleaseScript: KEYS[1] reservation record. Every line is back;
// the release result is recorded once.
var finishReleaseScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'released', 'releaseReason')
if v[1] then
  return {v[1], v[2] or ''}
end
redis.call('HSET', KEYS[1], 'released', '1', 'releaseReason', '', 'state', 'released')
return {'1', ''}
`)

// reservedLine is one SKU of a reservation as stored in its record.
type reservedLine struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// mergeLines sums quantities per SKU and sorts by SKU, so a request naming
// a SKU twice checks the total and every caller walks the lines in one
// order.
func mergeLines(lines []*contracts.OrderLine) ([]reservedLine, error) {
	if len(lines) == 0 {
		return nil, errors.New("no lines")
	}
	sum := make(map[string]int64, len(lines))
	for i, l := range lines {
		if l == nil {
			return nil, fmt.Errorf("line %d is null", i)
		}
		if l.GetSku() == "" {
			return nil, fmt.Errorf("line %d has an empty sku", i)
		}
		if l.GetQuantity() <= 0 {
			return nil, fmt.Errorf("line %d (sku %q) has quantity %d, want > 0", i, l.GetSku(), l.GetQuantity())
		}
		sum[l.GetSku()] += int64(l.GetQuantity())
	}
	out := make([]reservedLine, 0, len(sum))
	for sku, q := range sum {
		out = append(out, reservedLine{SKU: sku, Quantity: q})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SKU < out[j].SKU })
	return out, nil
}

func decodeLines(id, raw string) ([]reservedLine, error) {
	var lines []reservedLine
	if err := json.Unmarshal([]byte(raw), &lines); err != nil || len(lines) == 0 {
		return nil, fmt.Errorf("%w: reservation %q lines %q", ErrCorrupt, id, raw)
	}
	return lines, nil
}

// after runs the test hook (Redis.step) after a protocol step.
func (r inventoryStore) after(step string) error {
	if r.step == nil {
		return nil
	}
	return r.step(step)
}

func (r inventoryStore) nowMs() int64 { return r.now().UnixMilli() }

// run runs a script that answers a list of strings of a known length.
func (r inventoryStore) run(ctx context.Context, op string, s *redis.Script, n int, keys []string, args ...any) ([]string, error) {
	res, err := s.Run(ctx, r.client, keys, args...).StringSlice()
	if err != nil {
		return nil, translate(op, err)
	}
	if len(res) != n {
		return nil, fmt.Errorf("%w: %s: unexpected reply %q", ErrCorrupt, op, res)
	}
	return res, nil
}

func reserveResult(accepted, reason string) *contracts.ReserveInventoryRes {
	out := &contracts.ReserveInventoryRes{Accepted: accepted == "1"}
	if !out.Accepted {
		out.Reason = &reason
	}
	return out
}

// Reserve implements Inventory with the protocol of the package doc. A
// repeat with the same ReservationId returns the first result whatever
// lines it carries; a call that failed halfway is finished by the next.
func (r inventoryStore) Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error) {
	if req == nil || req.GetReservationId() == "" {
		return nil, invalid("reservationId is empty")
	}
	id, orderID := req.GetReservationId(), req.GetOrderId()
	merged, err := mergeLines(req.GetLines())
	if err != nil {
		return nil, invalid("reservation %q: %v", id, err)
	}
	enc, err := json.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("commerce: encode reservation lines: %w", err)
	}
	if r.oneSlot && r.step == nil {
		res, stepped, err := r.reserveOne(ctx, id, orderID, string(enc), merged)
		if err != nil || !stepped {
			return res, err
		}
	}
	rec := []string{r.keys.reservation(id)}
	v, err := r.run(ctx, "reserve inventory", beginReserveScript, 3, rec, orderID, string(enc))
	if err != nil {
		return nil, err
	}
	if v[0] == "done" {
		return reserveResult(v[1], v[2]), nil
	}
	if err := r.after("begin"); err != nil {
		return nil, err
	}
	state, short := v[0], v[2]
	lines, err := decodeLines(id, v[1])
	if err != nil {
		return nil, err
	}
	if state == stateHolding {
		all := true
		for _, l := range lines {
			h, err := r.run(ctx, "hold stock", holdLineScript, 2, r.keys.sku(l.SKU, id),
				id, orderID, l.Quantity, r.nowMs(), l.SKU, r.ledgerMax)
			if err != nil {
				return nil, err
			}
			if err := r.after("hold " + l.SKU); err != nil {
				return nil, err
			}
			if h[0] == holdHeld {
				continue
			}
			// refused: this line decides the refusal; returned: another
			// call already committed the reservation to it.
			all, short = false, h[1]
			break
		}
		if all {
			return r.finish(ctx, id, "1", "")
		}
		c, err := r.run(ctx, "reserve inventory", compensateScript, 3, rec, short)
		if err != nil {
			return nil, err
		}
		if c[0] == "done" {
			// Decided by another call while this one walked the lines: a
			// line this call saw released belongs to an accepted one.
			return reserveResult(c[1], c[2]), nil
		}
		short = c[1]
		if err := r.after("compensating"); err != nil {
			return nil, err
		}
	}
	for _, l := range lines {
		if _, err := r.returnLine(ctx, id, orderID, l.SKU, MovementCompensate, holdReturned); err != nil {
			return nil, err
		}
		if err := r.after("compensate " + l.SKU); err != nil {
			return nil, err
		}
	}
	return r.finish(ctx, id, "0", short)
}

func (r inventoryStore) finish(ctx context.Context, id, accepted, reason string) (*contracts.ReserveInventoryRes, error) {
	v, err := r.run(ctx, "reserve inventory", finishReserveScript, 2, []string{r.keys.reservation(id)}, accepted, reason)
	if err != nil {
		return nil, err
	}
	return reserveResult(v[0], v[1]), nil
}

func (r inventoryStore) returnLine(ctx context.Context, id, orderID, sku, kind, state string) (string, error) {
	res, err := returnLineScript.Run(ctx, r.client, r.keys.sku(sku, id),
		id, orderID, r.nowMs(), kind, state, r.ledgerMax).Text()
	if err != nil {
		return "", translate("return stock", err)
	}
	return res, nil
}

// Release implements Inventory. An unknown reservation (none decided yet)
// is answered but not recorded, so a release that races ahead of its
// reservation cannot block the later one from being released.
func (r inventoryStore) Release(ctx context.Context, req *contracts.ReleaseInventoryReq) (*contracts.ReleaseInventoryRes, error) {
	if req == nil || req.GetReservationId() == "" {
		return nil, invalid("reservationId is empty")
	}
	id := req.GetReservationId()
	rec := []string{r.keys.reservation(id)}
	v, err := r.run(ctx, "release inventory", beginReleaseScript, 3, rec,
		req.GetReason(), ReasonUnknownReservation, ReasonReservationNotAccepted, ReasonReservationArchived)
	if err != nil {
		return nil, err
	}
	if v[0] != "done" {
		if err := r.after("begin release"); err != nil {
			return nil, err
		}
		lines, err := decodeLines(id, v[1])
		if err != nil {
			return nil, err
		}
		orderID := v[2]
		for _, l := range lines {
			st, err := r.returnLine(ctx, id, orderID, l.SKU, MovementRelease, holdReleased)
			if err != nil {
				return nil, err
			}
			if st != holdReleased {
				return nil, fmt.Errorf("%w: accepted reservation %q holds %s as %q", ErrCorrupt, id, l.SKU, st)
			}
			if err := r.after("release " + l.SKU); err != nil {
				return nil, err
			}
		}
		if v, err = r.run(ctx, "release inventory", finishReleaseScript, 2, rec); err != nil {
			return nil, err
		}
		v = append([]string{"done"}, v...)
	}
	out := &contracts.ReleaseInventoryRes{Released: v[1] == "1"}
	if !out.Released {
		out.Reason = &v[2]
	}
	return out, nil
}

// setStockScript: KEYS stock, ledger; ARGV[1] quantity, ARGV[2] time,
// ARGV[3] the ledger's cap. It
// sets the stock and records the change as a seed movement (the first
// one of a SKU even when it is 0, none for a change of 0 later).
var setStockScript = redis.NewScript("#!lua\n" + ledgerAppend + `
local raw = redis.call('GET', KEYS[1])
local old = 0
if raw then
  old = tonumber(raw)
  if not old then
    return redis.error_reply('CORRUPT stock is not a number')
  end
end
local want = tonumber(ARGV[1])
redis.call('SET', KEYS[1], ARGV[1])
if (not raw) or want ~= old then
  movement(KEYS[2], 'kind', 'seed', 'delta', tostring(want - old), 'available', ARGV[1], 'at', ARGV[2])
end
return 1
`)

// SetStock implements Inventory.
func (r inventoryStore) SetStock(ctx context.Context, sku string, quantity int64) error {
	if sku == "" {
		return invalid("sku is empty")
	}
	if quantity < 0 {
		return invalid("stock of %q is %d, want >= 0", sku, quantity)
	}
	return translate("set stock", setStockScript.Run(ctx, r.client,
		[]string{r.keys.stock(sku), r.keys.ledger(sku)}, quantity, r.nowMs(), r.ledgerMax).Err())
}

// Stock implements Inventory.
func (r inventoryStore) Stock(ctx context.Context, sku string) (int64, error) {
	if sku == "" {
		return 0, invalid("sku is empty")
	}
	raw, err := r.client.Get(ctx, r.keys.stock(sku)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, translate("get stock", err)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: stock of %q is %q", ErrCorrupt, sku, raw)
	}
	return n, nil
}

// ReserveCalls implements Inventory.
func (r inventoryStore) ReserveCalls(ctx context.Context, reservationID string) (int64, error) {
	return r.counter(ctx, r.keys.reservation(reservationID), "reserveCalls")
}

// ReleaseCalls implements Inventory.
func (r inventoryStore) ReleaseCalls(ctx context.Context, reservationID string) (int64, error) {
	return r.counter(ctx, r.keys.reservation(reservationID), "releaseCalls")
}
