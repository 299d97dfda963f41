package commerce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// A start's cart read and its idempotency reservation as one script on a
// single Redis server: both are this store's keys, but of different hash
// slots, so a Redis Cluster keeps them two round trips.

// reserveForCartScript reserves the key only when the cart exists, so a
// request naming no cart leaves no mapping behind.
//
// KEYS: cart, idempotency mapping. ARGV: candidate orderId, status,
// fingerprint. Reply {0} without a cart, else {1, cart, created, orderId,
// status, fingerprint}.
var reserveForCartScript = redis.NewScript(`
local cart = redis.call('GET', KEYS[1])
if not cart then return {0} end
if redis.call('HSETNX', KEYS[2], 'orderId', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[2], 'status', ARGV[2], 'fingerprint', ARGV[3])
  return {1, cart, 1, ARGV[1], ARGV[2], ARGV[3]}
end
local v = redis.call('HMGET', KEYS[2], 'orderId', 'status', 'fingerprint')
return {1, cart, 0, v[1] or '', v[2] or '', v[3] or ''}
`)

// unreserveScript drops a mapping this call created, while it is still
// pending with that orderId and the cart is byte for byte the one its
// request was refused for. A concurrent duplicate of that request read
// the same cart in the same step as the mapping, so it was refused too
// and started nothing; had the cart changed, the mapping stays.
//
// KEYS: cart, idempotency mapping. ARGV: orderId, cart bytes.
var unreserveScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
local v = redis.call('HMGET', KEYS[2], 'orderId', 'status')
if v[1] ~= ARGV[1] or v[2] ~= 'pending' then return 0 end
redis.call('DEL', KEYS[2])
return 1
`)

// CartReservation is ReserveForCart's result.
type CartReservation struct {
	Cart Cart
	// Mapping is the mapping in force; Created whether this call made it.
	Mapping Mapping
	Created bool
	// raw is the cart as stored, for Unreserve.
	raw string
}

// ReserveForCart is Carts.GetCart followed by Idempotency.Reserve in one
// round trip, with their contracts, on a single Redis server (ErrConfig
// on a cluster client: the two keys are in different slots). A cart that
// does not exist fails with ErrNotFound and reserves nothing; a stored
// cart that does not decode is ErrCorrupt, its reservation made.
func (r *Redis) ReserveForCart(ctx context.Context, cartID, key string, candidate Mapping) (CartReservation, error) {
	switch {
	case !r.oneSlot:
		return CartReservation{}, fmt.Errorf("%w: a cart read with its reservation needs a single-server client", ErrConfig)
	case cartID == "":
		return CartReservation{}, invalid("cartId is empty")
	case key == "":
		return CartReservation{}, invalid("idempotency key is empty")
	case candidate.OrderID == "":
		return CartReservation{}, invalid("candidate orderId is empty")
	}
	res, err := reserveForCartScript.Run(ctx, r.client, []string{r.keys.cart(cartID), r.keys.idem(key)},
		candidate.OrderID, string(MappingPending), candidate.Fingerprint).Slice()
	if err != nil {
		return CartReservation{}, translate("reserve idempotency key with its cart", err)
	}
	if n, _ := res[0].(int64); n == 0 {
		return CartReservation{}, fmt.Errorf("%w: cart %q", ErrNotFound, cartID)
	}
	if len(res) != 6 {
		return CartReservation{}, fmt.Errorf("%w: reserve with cart: unexpected reply %v", ErrCorrupt, res)
	}
	out := CartReservation{raw: asString(res[1])}
	created, _ := res[2].(int64)
	out.Created = created == 1
	out.Mapping = Mapping{OrderID: asString(res[3]), Status: MappingStatus(asString(res[4])), Fingerprint: asString(res[5])}
	if err := checkMapping(key, out.Mapping); err != nil {
		return CartReservation{}, err
	}
	if err := json.Unmarshal([]byte(out.raw), &out.Cart); err != nil {
		return out, fmt.Errorf("%w: cart %q: %v", ErrCorrupt, cartID, err)
	}
	if out.Cart.CartID != cartID {
		return out, fmt.Errorf("%w: cart key %q holds cart %q", ErrCorrupt, cartID, out.Cart.CartID)
	}
	return out, nil
}

// Unreserve takes back the mapping of a reservation whose request was
// refused for its cart after ReserveForCart made it: only a mapping that
// call created, still pending with its orderId, while the cart is
// unchanged (see unreserveScript). kept reports a mapping left in place;
// it is then what any pending mapping is, a key whose start has not run.
func (r *Redis) Unreserve(ctx context.Context, cartID, key string, res CartReservation) (kept bool, err error) {
	if !res.Created || res.raw == "" {
		return true, errors.New("commerce: unreserve: not a reservation this call created")
	}
	n, err := unreserveScript.Run(ctx, r.client, []string{r.keys.cart(cartID), r.keys.idem(key)},
		res.Mapping.OrderID, res.raw).Int64()
	if err != nil {
		return true, translate("unreserve idempotency key", err)
	}
	return n != 1, nil
}
