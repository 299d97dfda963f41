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

// The Inventory module on Redis: stock per SKU and one record per
// reservation, all under the {inventory} hash tag.

// reserveInventoryScript: KEYS[1] reservation record, KEYS[2..] stock keys;
// ARGV[1] orderId, ARGV[2] reserved lines (JSON), ARGV[3..] one quantity
// per stock key, then one SKU per stock key. The counter moves first so
// repeats are counted; a stored result is returned untouched.
var reserveInventoryScript = redis.NewScript(`
local rec = KEYS[1]
redis.call('HINCRBY', rec, 'reserveCalls', 1)
local prev = redis.call('HMGET', rec, 'accepted', 'reason')
if prev[1] then
  return {prev[1], prev[2] or ''}
end
local n = #KEYS - 1
for i = 1, n do
  local raw = redis.call('GET', KEYS[i + 1])
  local have = 0
  if raw then
    have = tonumber(raw)
    if not have then
      return redis.error_reply('CORRUPT stock of ' .. ARGV[2 + n + i] .. ' is not a number')
    end
  end
  local want = tonumber(ARGV[2 + i])
  if have < want then
    local reason = 'insufficient stock for ' .. ARGV[2 + n + i] .. ': requested ' .. ARGV[2 + i] .. ', available ' .. tostring(have)
    redis.call('HSET', rec, 'accepted', '0', 'reason', reason, 'orderId', ARGV[1])
    return {'0', reason}
  end
end
for i = 1, n do
  redis.call('DECRBY', KEYS[i + 1], ARGV[2 + i])
end
redis.call('HSET', rec, 'accepted', '1', 'reason', '', 'orderId', ARGV[1], 'lines', ARGV[2])
return {'1', ''}
`)

// releaseInventoryScript: KEYS[1] reservation record, KEYS[2..] stock keys
// of the lines the caller read from the record; ARGV[1] those lines as
// read, ARGV[2] the release reason, ARGV[3..] quantities. Stock keys must
// be declared to the script, so the caller reads the lines first; the
// lines are written once and never change, and if the caller's read
// predates them the script answers 'retry' without counting the call.
var releaseInventoryScript = redis.NewScript(`
local rec = KEYS[1]
local v = redis.call('HMGET', rec, 'accepted', 'lines', 'released', 'releaseReason')
local accepted, lines, released, releaseReason = v[1], v[2] or '', v[3], v[4] or ''
if released then
  redis.call('HINCRBY', rec, 'releaseCalls', 1)
  return {released, releaseReason}
end
if not accepted then
  redis.call('HINCRBY', rec, 'releaseCalls', 1)
  return {'0', ARGV[3 + #KEYS - 1]}
end
if lines ~= ARGV[1] then
  return {'retry', ''}
end
redis.call('HINCRBY', rec, 'releaseCalls', 1)
if accepted == '1' then
  for i = 2, #KEYS do
    redis.call('INCRBY', KEYS[i], ARGV[1 + i])
  end
  redis.call('HSET', rec, 'released', '1', 'releaseReason', '', 'releaseRequestReason', ARGV[2])
  return {'1', ''}
end
redis.call('HSET', rec, 'released', '0', 'releaseReason', ARGV[4 + #KEYS - 1], 'releaseRequestReason', ARGV[2])
return {'0', ARGV[4 + #KEYS - 1]}
`)

// reservedLine is one SKU of a reservation as stored in its record.
type reservedLine struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// mergeLines sums quantities per SKU and sorts by SKU, so a request naming
// a SKU twice checks the total and the script sees a deterministic order.
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

// Reserve implements Inventory. A repeat with the same ReservationId
// returns the first result whatever lines it carries.
func (r inventoryStore) Reserve(ctx context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error) {
	if req == nil || req.GetReservationId() == "" {
		return nil, invalid("reservationId is empty")
	}
	lines, err := mergeLines(req.GetLines())
	if err != nil {
		return nil, invalid("reservation %q: %v", req.GetReservationId(), err)
	}
	enc, err := json.Marshal(lines)
	if err != nil {
		return nil, fmt.Errorf("commerce: encode reservation lines: %w", err)
	}
	keys := make([]string, 0, len(lines)+1)
	keys = append(keys, r.keys.reservation(req.GetReservationId()))
	args := make([]any, 0, 2+2*len(lines))
	args = append(args, req.GetOrderId(), string(enc))
	for _, l := range lines {
		keys = append(keys, r.keys.stock(l.SKU))
		args = append(args, l.Quantity)
	}
	for _, l := range lines {
		args = append(args, l.SKU)
	}
	res, err := reserveInventoryScript.Run(ctx, r.client, keys, args...).StringSlice()
	if err != nil {
		return nil, translate("reserve inventory", err)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("%w: reserve inventory: unexpected reply %q", ErrCorrupt, res)
	}
	out := &contracts.ReserveInventoryRes{Accepted: res[0] == "1"}
	if !out.Accepted {
		out.Reason = &res[1]
	}
	return out, nil
}

// releaseAttempts bounds the read-then-script loop of Release. The lines
// it reads are written once, so one retry always suffices.
const releaseAttempts = 3

// Release implements Inventory. An unknown reservation is answered but
// not recorded, so a release that races ahead of its reservation cannot
// block the later one from being released.
func (r inventoryStore) Release(ctx context.Context, req *contracts.ReleaseInventoryReq) (*contracts.ReleaseInventoryRes, error) {
	if req == nil || req.GetReservationId() == "" {
		return nil, invalid("reservationId is empty")
	}
	rec := r.keys.reservation(req.GetReservationId())
	for range releaseAttempts {
		raw, err := r.client.HGet(ctx, rec, "lines").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, translate("release inventory", err)
		}
		var lines []reservedLine
		if raw != "" {
			if err := json.Unmarshal([]byte(raw), &lines); err != nil {
				return nil, fmt.Errorf("%w: reservation %q lines: %v", ErrCorrupt, req.GetReservationId(), err)
			}
		}
		keys := make([]string, 0, len(lines)+1)
		keys = append(keys, rec)
		args := make([]any, 0, 4+len(lines))
		args = append(args, raw, req.GetReason())
		for _, l := range lines {
			keys = append(keys, r.keys.stock(l.SKU))
			args = append(args, l.Quantity)
		}
		args = append(args, ReasonUnknownReservation, ReasonReservationNotAccepted)
		res, err := releaseInventoryScript.Run(ctx, r.client, keys, args...).StringSlice()
		if err != nil {
			return nil, translate("release inventory", err)
		}
		if len(res) != 2 {
			return nil, fmt.Errorf("%w: release inventory: unexpected reply %q", ErrCorrupt, res)
		}
		if res[0] == "retry" {
			continue
		}
		out := &contracts.ReleaseInventoryRes{Released: res[0] == "1"}
		if !out.Released {
			out.Reason = &res[1]
		}
		return out, nil
	}
	return nil, fmt.Errorf("commerce: release inventory %q: reservation kept changing", req.GetReservationId())
}

// SetStock implements Inventory.
func (r inventoryStore) SetStock(ctx context.Context, sku string, quantity int64) error {
	if sku == "" {
		return invalid("sku is empty")
	}
	if quantity < 0 {
		return invalid("stock of %q is %d, want >= 0", sku, quantity)
	}
	return translate("set stock", r.client.Set(ctx, r.keys.stock(sku), quantity, 0).Err())
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
