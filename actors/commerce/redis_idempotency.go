package commerce

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The Idempotency store on Redis: one hash per key, under the tag of the
// OrderId the key derives (keys.idem), holding the key itself beside the
// mapping so that a mapping is never taken for another key's. Until
// Config.SkipLegacyIdempotency, a key without such a hash is looked up in
// the layout before (keys.legacyIdem) and, when found there, served from
// there: never copied, so that the old record stays the one truth for
// the orders it started.

// reserveMappingScript creates the mapping only if the key has none and
// returns the mapping in force, so concurrent reservers agree on one
// winner in one round trip. With KEYS[2] (the old layout's key, on a
// single server) a mapping found there is the one in force.
//
// KEYS: mapping[, old mapping]. ARGV: key, orderId, status, fingerprint.
// Reply {created, orderId, status, fingerprint, key}.
var reserveMappingScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'orderId', 'status', 'fingerprint', 'key')
if v[1] then return {0, v[1], v[2] or '', v[3] or '', v[4] or ''} end
if #KEYS == 2 then
  local o = redis.call('HMGET', KEYS[2], 'orderId', 'status', 'fingerprint')
  if o[1] then return {0, o[1], o[2] or '', o[3] or '', ARGV[1]} end
end
redis.call('HSET', KEYS[1], 'orderId', ARGV[2], 'status', ARGV[3], 'fingerprint', ARGV[4], 'key', ARGV[1])
return {1, ARGV[2], ARGV[3], ARGV[4], ARGV[1]}
`)

// markStartedScript flips the status only for the order the key maps to,
// so a stale caller can never start someone else's mapping. It serves
// both layouts: an old mapping has no key field (ARGV[3] empty).
//
// KEYS: mapping. ARGV: orderId, status[, key].
var markStartedScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'orderId', 'key')
if (not v[1]) or v[1] ~= ARGV[1] or (ARGV[3] and v[2] ~= ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
return 1
`)

// forgetScript deletes the mapping only while it is the caller's pending
// one.
//
// KEYS: mapping. ARGV: orderId, status, fingerprint, key.
var forgetScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'orderId', 'status', 'fingerprint', 'key')
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] or v[3] ~= ARGV[3] or v[4] ~= ARGV[4] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// Reserve implements Idempotency. The candidate's status is ignored: a
// new mapping always starts pending.
func (r idempotencyStore) Reserve(ctx context.Context, key string, candidate Mapping) (Mapping, bool, error) {
	if key == "" {
		return Mapping{}, false, invalid("idempotency key is empty")
	}
	if candidate.OrderID == "" {
		return Mapping{}, false, invalid("candidate orderId is empty")
	}
	keys := []string{r.keys.idem(candidate.OrderID)}
	switch {
	case r.legacy && r.oneSlot:
		keys = append(keys, r.keys.legacyIdem(key))
	case r.legacy:
		// On a cluster the old key is in another slot: read it first. A
		// mapping an older process writes there meanwhile names the same
		// derived OrderId, so the start still reaches one order.
		m, err := r.legacyGet(ctx, key)
		switch {
		case err == nil:
			return m, false, nil
		case !errors.Is(err, ErrNotFound):
			return Mapping{}, false, err
		}
	}
	res, err := reserveMappingScript.Run(ctx, r.client, keys,
		key, candidate.OrderID, string(MappingPending), candidate.Fingerprint).Slice()
	if err != nil {
		return Mapping{}, false, translate("reserve idempotency key", err)
	}
	if len(res) != 5 {
		return Mapping{}, false, fmt.Errorf("%w: reserve idempotency key: unexpected reply %v", ErrCorrupt, res)
	}
	created, _ := res[0].(int64)
	m := Mapping{
		OrderID:     asString(res[1]),
		Status:      MappingStatus(asString(res[2])),
		Fingerprint: asString(res[3]),
	}
	if err := checkMapping(key, m, asString(res[4])); err != nil {
		return Mapping{}, false, err
	}
	return m, created == 1, nil
}

// Get implements Idempotency.
func (r idempotencyStore) Get(ctx context.Context, key, orderID string) (Mapping, error) {
	if key == "" || orderID == "" {
		return Mapping{}, invalid("idempotency key and orderId are required")
	}
	v, err := r.client.HGetAll(ctx, r.keys.idem(orderID)).Result()
	if err != nil {
		return Mapping{}, translate("get idempotency key", err)
	}
	if len(v) == 0 {
		if r.legacy {
			return r.legacyGet(ctx, key)
		}
		return Mapping{}, fmt.Errorf("%w: idempotency key %q", ErrNotFound, key)
	}
	m := Mapping{OrderID: v["orderId"], Status: MappingStatus(v["status"]), Fingerprint: v["fingerprint"]}
	if err := checkMapping(key, m, v["key"]); err != nil {
		return Mapping{}, err
	}
	return m, nil
}

// legacyGet reads key's mapping in the layout before the order's tag.
func (r *Redis) legacyGet(ctx context.Context, key string) (Mapping, error) {
	v, err := r.client.HGetAll(ctx, r.keys.legacyIdem(key)).Result()
	if err != nil {
		return Mapping{}, translate("get idempotency key (old layout)", err)
	}
	if len(v) == 0 {
		return Mapping{}, fmt.Errorf("%w: idempotency key %q", ErrNotFound, key)
	}
	m := Mapping{OrderID: v["orderId"], Status: MappingStatus(v["status"]), Fingerprint: v["fingerprint"]}
	if err := checkMapping(key, m, key); err != nil {
		return Mapping{}, err
	}
	return m, nil
}

// Unit is the part of an order's unit of work (eventstore.Unit) that the
// mapping's started mark rides in.
type Unit interface {
	// OrderID is the order the unit writes.
	OrderID() string
	// HashSetIf adds a write of field = value in the hash at key if, and
	// only if, its ifField holds ifValue, and returns its position in the
	// unit, by which the committed unit tells whether it wrote.
	HashSetIf(key, ifField, ifValue, field string, value []byte) int
}

// AddStartedMark adds MarkStarted's write for key's mapping of u's order
// to u, in the order's hash slot, and returns its position in u: not
// written means what MarkStarted's ErrNotFound means (no mapping of the
// new layout names this order; MarkStarted itself then also tries the
// old layout, which lives in another slot).
func (r *Redis) AddStartedMark(u Unit, key string) (int, error) {
	orderID := u.OrderID()
	if key == "" || orderID == "" {
		return 0, invalid("idempotency key and orderId are required")
	}
	return u.HashSetIf(r.keys.idem(orderID), "orderId", orderID, "status", []byte(MappingStarted)), nil
}

// SingleServer reports whether the store's client talks to one server,
// where another store's script may write this store's keys.
func (r *Redis) SingleServer() bool { return r.oneSlot }

// MarkStarted implements Idempotency. A key without a mapping under
// orderID has its old layout's marked, if there is one.
func (r idempotencyStore) MarkStarted(ctx context.Context, key, orderID string) error {
	if key == "" || orderID == "" {
		return invalid("idempotency key and orderId are required")
	}
	n, err := markStartedScript.Run(ctx, r.client, []string{r.keys.idem(orderID)},
		orderID, string(MappingStarted), key).Int64()
	if err != nil {
		return translate("mark idempotency key started", err)
	}
	if n != 1 && r.legacy {
		if n, err = markStartedScript.Run(ctx, r.client, []string{r.keys.legacyIdem(key)},
			orderID, string(MappingStarted)).Int64(); err != nil {
			return translate("mark idempotency key started (old layout)", err)
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: idempotency key %q is not mapped to order %q", ErrNotFound, key, orderID)
	}
	return nil
}

// Forget implements Idempotency.
func (r idempotencyStore) Forget(ctx context.Context, key string, m Mapping) (bool, error) {
	if key == "" || m.OrderID == "" {
		return false, invalid("idempotency key and orderId are required")
	}
	n, err := forgetScript.Run(ctx, r.client, []string{r.keys.idem(m.OrderID)},
		m.OrderID, string(MappingPending), m.Fingerprint, key).Int64()
	if err != nil {
		return false, translate("forget idempotency key", err)
	}
	return n == 1, nil
}

// checkMapping refuses a mapping without an order or a known status, or
// filed for another key than key (stored).
func checkMapping(key string, m Mapping, stored string) error {
	if stored != key {
		return fmt.Errorf("%w: the mapping of idempotency key %q, under order %q, is key %q's", ErrCorrupt, key, m.OrderID, stored)
	}
	if m.OrderID == "" {
		return fmt.Errorf("%w: idempotency key %q has no orderId", ErrCorrupt, key)
	}
	if m.Status != MappingPending && m.Status != MappingStarted {
		return fmt.Errorf("%w: idempotency key %q has status %q", ErrCorrupt, key, m.Status)
	}
	return nil
}

func asString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case int64:
		return strconv.FormatInt(s, 10)
	default:
		return ""
	}
}
