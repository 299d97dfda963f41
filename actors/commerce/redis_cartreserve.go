package commerce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A start's cart read and its idempotency reservation as one script on a
// single Redis server: both are this store's keys, but of different hash
// slots, so a Redis Cluster keeps them two round trips.

// reserveForCartScript reserves the key only when the cart exists, so a
// request naming no cart leaves no mapping behind. A mapping of the old
// layout (KEYS 3, read when ARGV 5 is "1") is the one in force when the
// new one is missing, as in reserveMappingScript. With a CreationLock
// (KEYS 4 and 5) a reservation that creates the mapping also takes that
// lock, while the lock's record does not exist.
//
// KEYS: cart, idempotency mapping, old mapping[, lock, lock's record].
// ARGV: key, candidate orderId, status, fingerprint, read old ("1" or
// "0")[, token, ttl ms, record field, value]. Reply {0} without a cart,
// else {1, cart, created, orderId, status, fingerprint, locked, key}.
var reserveForCartScript = redis.NewScript(`#!lua
local cart = redis.call('GET', KEYS[1])
if not cart then return {0} end
local v = redis.call('HMGET', KEYS[2], 'orderId', 'status', 'fingerprint', 'key')
if v[1] then return {1, cart, 0, v[1], v[2] or '', v[3] or '', 0, v[4] or ''} end
if ARGV[5] == '1' then
  local o = redis.call('HMGET', KEYS[3], 'orderId', 'status', 'fingerprint')
  if o[1] then return {1, cart, 0, o[1], o[2] or '', o[3] or '', 0, ARGV[1]} end
end
redis.call('HSET', KEYS[2], 'orderId', ARGV[2], 'status', ARGV[3], 'fingerprint', ARGV[4], 'key', ARGV[1])
local locked = 0
if #KEYS >= 5 and redis.call('EXISTS', KEYS[5]) == 0 and not (KEYS[6] and redis.call('HEXISTS', KEYS[6], ARGV[10]) == 1)
   and redis.call('SET', KEYS[4], ARGV[6], 'NX', 'PX', ARGV[7]) then
  redis.call('HSET', KEYS[5], ARGV[8], ARGV[9])
  locked = 1
end
return {1, cart, 1, ARGV[2], ARGV[3], ARGV[4], locked, ARGV[1]}
`)

// unreserveScript drops a mapping this call created, while it is still
// pending with that orderId and the cart is byte for byte the one its
// request was refused for. A concurrent duplicate of that request read
// the same cart in the same step as the mapping, so it was refused too
// and started nothing; had the cart changed, the mapping stays.
//
// KEYS: cart, idempotency mapping. ARGV: orderId, cart bytes, key.
var unreserveScript = redis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
local v = redis.call('HMGET', KEYS[2], 'orderId', 'status', 'key')
if v[1] ~= ARGV[1] or v[2] ~= 'pending' or v[3] ~= ARGV[3] then return 0 end
redis.call('DEL', KEYS[2])
return 1
`)

// CartReservation is ReserveForCart's result.
type CartReservation struct {
	Cart Cart
	// Mapping is the mapping in force; Created whether this call made it.
	Mapping Mapping
	Created bool
	// LockToken is the CreationLock's token when this call took that
	// lock (ReserveForCartLocking), else empty.
	LockToken string
	// raw is the cart as stored, for Unreserve.
	raw string
}

// CreationLock is another store's lock that ReserveForCartLocking takes
// for the order it mints, on the same Redis server: while Record does not
// exist, Lock is set to Token for TTL if absent, and Record's Field to
// Value. The commerce store does not read either key; the store that owns
// them says what they are (location.Redis.CreationFor).
type CreationLock struct {
	Lock, Record, Field, Value, Token string
	TTL                               time.Duration
	// Unless and UnlessField, optional, are a hash and field of the
	// lock's store on the same server: while the field exists the lock
	// is not taken (location.Creation.Sealed, an archived order).
	Unless, UnlessField string
}

// ReserveForCart is Carts.GetCart followed by Idempotency.Reserve in one
// round trip, with their contracts, on a single Redis server (ErrConfig
// on a cluster client: the two keys are in different slots). A cart that
// does not exist fails with ErrNotFound and reserves nothing; a stored
// cart that does not decode is ErrCorrupt, its reservation made.
func (r *Redis) ReserveForCart(ctx context.Context, cartID, key string, candidate Mapping) (CartReservation, error) {
	return r.reserveForCart(ctx, cartID, key, candidate, nil)
}

// ReserveForCartLocking is ReserveForCart whose reservation, when it
// creates the mapping, also takes lock in the same script, so the order
// it mints is locked for creation from the instant its id exists. The
// result's LockToken says whether it did (not when the mapping existed
// already, nor when lock's record exists). The caller checks that the
// lock's store shares this single server.
func (r *Redis) ReserveForCartLocking(ctx context.Context, cartID, key string, candidate Mapping, lock CreationLock) (CartReservation, error) {
	if lock.Lock == "" || lock.Record == "" || lock.Field == "" || lock.Token == "" || lock.TTL <= 0 {
		return CartReservation{}, invalid("creation lock needs its keys, a field, a token and a TTL")
	}
	return r.reserveForCart(ctx, cartID, key, candidate, &lock)
}

func (r *Redis) reserveForCart(ctx context.Context, cartID, key string, candidate Mapping, lock *CreationLock) (CartReservation, error) {
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
	readOld := "0"
	if r.legacy {
		readOld = "1"
	}
	keys := []string{r.keys.cart(cartID), r.keys.idem(candidate.OrderID), r.keys.legacyIdem(key)}
	args := []any{key, candidate.OrderID, string(MappingPending), candidate.Fingerprint, readOld}
	if lock != nil {
		keys = append(keys, lock.Lock, lock.Record)
		args = append(args, lock.Token, lock.TTL.Milliseconds(), lock.Field, lock.Value)
		if lock.Unless != "" && lock.UnlessField != "" {
			keys = append(keys, lock.Unless)
			args = append(args, lock.UnlessField)
		}
	}
	res, err := reserveForCartScript.Run(ctx, r.client, keys, args...).Slice()
	if err != nil {
		return CartReservation{}, translate("reserve idempotency key with its cart", err)
	}
	if n, _ := res[0].(int64); n == 0 {
		return CartReservation{}, fmt.Errorf("%w: cart %q", ErrNotFound, cartID)
	}
	if len(res) != 8 {
		return CartReservation{}, fmt.Errorf("%w: reserve with cart: unexpected reply %v", ErrCorrupt, res)
	}
	out := CartReservation{raw: asString(res[1])}
	created, _ := res[2].(int64)
	out.Created = created == 1
	if locked, _ := res[6].(int64); locked == 1 && lock != nil {
		out.LockToken = lock.Token
	}
	out.Mapping = Mapping{OrderID: asString(res[3]), Status: MappingStatus(asString(res[4])), Fingerprint: asString(res[5])}
	if err := checkMapping(key, out.Mapping, asString(res[7])); err != nil {
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
	n, err := unreserveScript.Run(ctx, r.client, []string{r.keys.cart(cartID), r.keys.idem(res.Mapping.OrderID)},
		res.Mapping.OrderID, res.raw, key).Int64()
	if err != nil {
		return true, translate("unreserve idempotency key", err)
	}
	return n != 1, nil
}
