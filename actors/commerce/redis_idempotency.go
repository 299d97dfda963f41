package commerce

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The Idempotency store on Redis: one hash per key.

// reserveMappingScript creates the mapping only if the key has none and
// returns the mapping in force, so concurrent reservers agree on one
// winner in one round trip.
var reserveMappingScript = redis.NewScript(`#!lua
if redis.call('HSETNX', KEYS[1], 'orderId', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'status', ARGV[2], 'fingerprint', ARGV[3])
  return {1, ARGV[1], ARGV[2], ARGV[3]}
end
local v = redis.call('HMGET', KEYS[1], 'orderId', 'status', 'fingerprint')
return {0, v[1] or '', v[2] or '', v[3] or ''}
`)

// markStartedScript flips the status only for the order the key maps to,
// so a stale caller can never start someone else's mapping.
var markStartedScript = redis.NewScript(`#!lua
local cur = redis.call('HGET', KEYS[1], 'orderId')
if (not cur) or cur ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
return 1
`)

// forgetScript deletes the mapping only while it is the caller's pending
// one.
var forgetScript = redis.NewScript(`#!lua
local v = redis.call('HMGET', KEYS[1], 'orderId', 'status', 'fingerprint')
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] or v[3] ~= ARGV[3] then return 0 end
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
	res, err := reserveMappingScript.Run(ctx, r.client, []string{r.keys.idem(key)},
		candidate.OrderID, string(MappingPending), candidate.Fingerprint).Slice()
	if err != nil {
		return Mapping{}, false, translate("reserve idempotency key", err)
	}
	if len(res) != 4 {
		return Mapping{}, false, fmt.Errorf("%w: reserve idempotency key: unexpected reply %v", ErrCorrupt, res)
	}
	created, _ := res[0].(int64)
	m := Mapping{
		OrderID:     asString(res[1]),
		Status:      MappingStatus(asString(res[2])),
		Fingerprint: asString(res[3]),
	}
	if err := checkMapping(key, m); err != nil {
		return Mapping{}, false, err
	}
	return m, created == 1, nil
}

// Get implements Idempotency.
func (r idempotencyStore) Get(ctx context.Context, key string) (Mapping, error) {
	if key == "" {
		return Mapping{}, invalid("idempotency key is empty")
	}
	v, err := r.client.HGetAll(ctx, r.keys.idem(key)).Result()
	if err != nil {
		return Mapping{}, translate("get idempotency key", err)
	}
	if len(v) == 0 {
		return Mapping{}, fmt.Errorf("%w: idempotency key %q", ErrNotFound, key)
	}
	m := Mapping{OrderID: v["orderId"], Status: MappingStatus(v["status"]), Fingerprint: v["fingerprint"]}
	if err := checkMapping(key, m); err != nil {
		return Mapping{}, err
	}
	return m, nil
}

// ConditionalHashWrite is one write of this store's that another store's
// script may run for it on the same server: set Field to Value in the
// hash at Key if, and only if, its IfField holds IfValue.
type ConditionalHashWrite struct {
	Key, IfField, IfValue, Field, Value string
}

// StartedMark is MarkStarted as a ConditionalHashWrite, for a step that
// marks the mapping in the same script as the start it records (the
// caller checks the client is a single server). Not applied means what
// MarkStarted's ErrNotFound means.
func (r *Redis) StartedMark(key, orderID string) (ConditionalHashWrite, error) {
	if key == "" || orderID == "" {
		return ConditionalHashWrite{}, invalid("idempotency key and orderId are required")
	}
	return ConditionalHashWrite{Key: r.keys.idem(key), IfField: "orderId", IfValue: orderID, Field: "status", Value: string(MappingStarted)}, nil
}

// SingleServer reports whether the store's client talks to one server,
// where another store's script may write this store's keys.
func (r *Redis) SingleServer() bool { return r.oneSlot }

// MarkStarted implements Idempotency.
func (r idempotencyStore) MarkStarted(ctx context.Context, key, orderID string) error {
	if key == "" || orderID == "" {
		return invalid("idempotency key and orderId are required")
	}
	n, err := markStartedScript.Run(ctx, r.client, []string{r.keys.idem(key)},
		orderID, string(MappingStarted)).Int64()
	if err != nil {
		return translate("mark idempotency key started", err)
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
	n, err := forgetScript.Run(ctx, r.client, []string{r.keys.idem(key)},
		m.OrderID, string(MappingPending), m.Fingerprint).Int64()
	if err != nil {
		return false, translate("forget idempotency key", err)
	}
	return n == 1, nil
}

func checkMapping(key string, m Mapping) error {
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
