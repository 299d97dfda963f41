package commerce

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// One-script paths for a single Redis server. There every key is on the
// one server, so a whole multi-SKU reservation, and an authorization with
// its method's seed, can run as one script: one round trip instead of one
// per step. The outcome and the records are those of the stepped
// protocol run without interruption; a reservation the stepped protocol
// began (a call cut between its steps) is left to that protocol, which
// finishes it. A Redis Cluster always takes the stepped path.

// reserveOneScript: KEYS[1] reservation record, then hold, stock, ledger
// per line in SKU order; ARGV[1] orderId, ARGV[2] lines (JSON), ARGV[3]
// reservationId, ARGV[4] time (unix ms), then sku, quantity per line,
// and last the ledger's cap.
// Reply {'done', accepted, reason}, or {'stepped'} for a reservation the
// stepped protocol began and did not decide (nothing written then, not
// even the call count, which the stepped begin makes).
//
// All lines are checked before any is taken, so a refused reservation
// never holds a line, not even for the length of the script: its ledger
// shows the one refuse movement of the first short line, and no
// reserve/compensate pair.
var reserveOneScript = redis.NewScript("#!lua\n" + ledgerAppend + `
local rec = KEYS[1]
local v = redis.call('HMGET', rec, 'accepted', 'reason', 'lines')
if not v[1] and v[3] then
  return {'stepped', '', ''}
end
redis.call('HINCRBY', rec, 'reserveCalls', 1)
if v[1] then
  return {'done', v[1], v[2] or ''}
end
local n = (#KEYS - 1) / 3
for i = 0, n - 1 do
  local sku, qty = ARGV[5 + i*2], ARGV[6 + i*2]
  local raw = redis.call('GET', KEYS[3 + i*3])
  local have = 0
  if raw then
    have = tonumber(raw)
    if not have then
      return redis.error_reply('CORRUPT stock of ' .. sku .. ' is not a number')
    end
  end
  if have < tonumber(qty) then
    local reason = 'insufficient stock for ' .. sku .. ': requested ' .. qty .. ', available ' .. tostring(have)
    local entry = ''
    if raw then
      entry = movement(KEYS[4 + i*3], 'kind', 'refuse', 'delta', '0', 'available', raw,
        'requested', qty, 'reservationId', ARGV[3], 'orderId', ARGV[1], 'at', ARGV[4])
    end
    redis.call('HSET', KEYS[2 + i*3], 'state', 'refused', 'qty', qty, 'reason', reason, 'entry', entry)
    redis.call('HSET', rec, 'orderId', ARGV[1], 'lines', ARGV[2], 'short', reason,
      'accepted', '0', 'reason', reason, 'state', 'refused')
    return {'done', '0', reason}
  end
end
for i = 0, n - 1 do
  local qty = ARGV[6 + i*2]
  local left = redis.call('DECRBY', KEYS[3 + i*3], qty)
  local entry = movement(KEYS[4 + i*3], 'kind', 'reserve', 'delta', tostring(-tonumber(qty)),
    'available', tostring(left), 'reservationId', ARGV[3], 'orderId', ARGV[1], 'at', ARGV[4])
  redis.call('HSET', KEYS[2 + i*3], 'state', 'held', 'qty', qty, 'entry', entry)
end
redis.call('HSET', rec, 'orderId', ARGV[1], 'lines', ARGV[2], 'accepted', '1', 'reason', '', 'state', 'accepted')
return {'done', '1', ''}
`)

// reserveOne is Reserve in one script; stepped says the stepped protocol
// has to finish what it began.
func (r inventoryStore) reserveOne(ctx context.Context, id, orderID, enc string, lines []reservedLine) (res *contracts.ReserveInventoryRes, stepped bool, err error) {
	keys := make([]string, 0, 1+3*len(lines))
	keys = append(keys, r.keys.reservation(id))
	args := make([]any, 0, 5+2*len(lines))
	args = append(args, orderID, enc, id, r.nowMs())
	for _, l := range lines {
		keys = append(keys, r.keys.sku(l.SKU, id)...)
		args = append(args, l.SKU, l.Quantity)
	}
	args = append(args, r.ledgerMax)
	v, err := r.run(ctx, "reserve inventory", reserveOneScript, 3, keys, args...)
	if err != nil {
		return nil, false, err
	}
	if v[0] == "stepped" {
		return nil, true, nil
	}
	return reserveResult(v[1], v[2]), false, nil
}

// authorizeOneScript is authorizeScript deciding from the method's seed
// itself. KEYS[1] payment record, KEYS[2] payment method; ARGV orderId,
// methodId, amount, currency, and the reasons for an unknown method and a
// plain decline. Reply {accepted, reason}.
var authorizeOneScript = redis.NewScript("#!lua\n" + authorizeHeadLua + `
local m = redis.call('HMGET', KEYS[2], 'approve', 'reason')
local accepted, reason = '0', ''
if not m[1] and not m[2] then
  reason = ARGV[5]
elseif m[1] == '1' then
  accepted = '1'
elseif m[1] == '0' then
  reason = m[2] or ''
  if reason == '' then
    reason = ARGV[6]
  end
else
  return redis.error_reply('CORRUPT payment method ' .. ARGV[2] .. ' has approve ' .. tostring(m[1]))
end
redis.call('HSET', rec, 'accepted', accepted, 'reason', reason, 'orderId', ARGV[1],
  'methodId', ARGV[2], 'amount', ARGV[3], 'currency', ARGV[4])
return {accepted, reason}
`)

func (r paymentStore) authorizeOne(ctx context.Context, req *contracts.AuthorizePaymentReq) ([]string, error) {
	res, err := authorizeOneScript.Run(ctx, r.client,
		[]string{r.keys.paymentRecord(req.GetPaymentId()), r.keys.paymentMethod(req.GetPaymentMethodId())},
		req.GetOrderId(), req.GetPaymentMethodId(), req.GetAmount(), req.GetCurrency(),
		ReasonUnknownPaymentMethod, ReasonPaymentDeclined).StringSlice()
	if err != nil {
		return nil, translate("authorize payment", err)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("%w: authorize payment: unexpected reply %q", ErrCorrupt, res)
	}
	return res, nil
}
