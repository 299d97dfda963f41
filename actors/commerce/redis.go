package commerce

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// DefaultKeyPrefix is the key prefix used when RedisConfig.KeyPrefix is
// empty.
const DefaultKeyPrefix = "sm:cs:"

// Reasons the modules answer with. They are part of the evidence a run
// prints, so they are fixed strings.
const (
	ReasonUnknownPaymentMethod = "unknown payment method"
	// ReasonPaymentDeclined is used when a declining method was seeded
	// without a reason of its own.
	ReasonPaymentDeclined        = "payment declined"
	ReasonUnknownReservation     = "unknown reservation"
	ReasonReservationNotAccepted = "reservation was not accepted"
)

// RedisConfig configures the Redis-backed CommerceStateStore.
type RedisConfig struct {
	// Client is required. A cluster client works: every multi-key script
	// touches keys of a single hash slot (see the key layout on Redis).
	Client redis.UniversalClient
	// KeyPrefix namespaces every key; default DefaultKeyPrefix. It must not
	// contain '{' or '}', since the first braces of a key choose its
	// Redis Cluster slot and the layout relies on choosing them itself.
	KeyPrefix string
}

// Redis is the CommerceStateStore on Redis and is safe for concurrent
// use. Idempotency and Inventory both declare a Reserve method, so no one
// Go type can implement both; Redis hands out one view per interface
// instead (Idempotency, Carts, Inventory, Payment), all over the same
// client and key prefix.
//
// Key layout (P = KeyPrefix):
//
//	P idem:{<key>}                  hash orderId, status, fingerprint
//	P cart:{<cartId>}               string, JSON of the snapshot
//	P stock:{inventory}:<sku>       string, available quantity
//	P reservation:{inventory}:<id>  hash, first reserve and release results and call counters
//	P paymethod:{payment}:<id>      hash approve, reason
//	P payment:{payment}:<id>        hash, first authorization result and call counter
//
// A multi-SKU reservation is all or nothing, so it is one Lua script over
// every SKU's stock key and the reservation record; Redis Cluster only
// runs a script whose keys share a slot, hence the one shared tag
// {inventory}. Authorize reads the method's seed and records the result in
// one script for the same reason, hence the shared tag {payment}. Both pin
// their module to one slot, which suits a sample's load; a sharded
// inventory would need a reservation protocol across slots instead.
type Redis struct {
	client redis.UniversalClient
	prefix string
}

// The views embed *Redis for its client and key helpers.
type (
	idempotencyStore struct{ *Redis }
	cartStore        struct{ *Redis }
	inventoryStore   struct{ *Redis }
	paymentStore     struct{ *Redis }
)

var (
	_ Idempotency = idempotencyStore{}
	_ Carts       = cartStore{}
	_ Inventory   = inventoryStore{}
	_ Payment     = paymentStore{}
)

// Idempotency returns the IdempotencyKey → OrderId mapping.
func (r *Redis) Idempotency() Idempotency { return idempotencyStore{r} }

// Carts returns the cart snapshots.
func (r *Redis) Carts() Carts { return cartStore{r} }

// Inventory returns the seeded inventory module.
func (r *Redis) Inventory() Inventory { return inventoryStore{r} }

// Payment returns the seeded payment module.
func (r *Redis) Payment() Payment { return paymentStore{r} }

// NewRedis returns the store. It panics on a nil client or a prefix with
// braces: both are wiring mistakes no caller could recover from.
func NewRedis(cfg RedisConfig) *Redis {
	if cfg.Client == nil {
		panic("commerce: RedisConfig.Client is nil")
	}
	prefix := cfg.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("commerce: RedisConfig.KeyPrefix %q must not contain braces", prefix))
	}
	return &Redis{client: cfg.Client, prefix: prefix}
}

func (r *Redis) idemKey(key string) string    { return r.prefix + "idem:{" + key + "}" }
func (r *Redis) cartKey(cartID string) string { return r.prefix + "cart:{" + cartID + "}" }
func (r *Redis) stockKey(sku string) string   { return r.prefix + "stock:{inventory}:" + sku }
func (r *Redis) reservationKey(id string) string {
	return r.prefix + "reservation:{inventory}:" + id
}
func (r *Redis) methodKey(id string) string  { return r.prefix + "paymethod:{payment}:" + id }
func (r *Redis) paymentKey(id string) string { return r.prefix + "payment:{payment}:" + id }

// translate turns a go-redis error into this package's sentinels, so no
// caller ever needs to know the backing store.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("commerce: %s: %w", op, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "WRONGTYPE"), strings.HasPrefix(msg, "CORRUPT"):
			return fmt.Errorf("%w: %s: %s", ErrCorrupt, op, msg)
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "READONLY"),
			strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "CLUSTERDOWN"),
			strings.HasPrefix(msg, "TRYAGAIN"), strings.HasPrefix(msg, "OOM"),
			strings.HasPrefix(msg, "BUSY"):
			return fmt.Errorf("%w: %s: %s", ErrUnavailable, op, msg)
		default:
			return fmt.Errorf("commerce: %s: redis replied: %s", op, msg)
		}
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, op, err)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// ---- Idempotency ----

// Fingerprint identifies a StartOrderReq by its cart, shipping address and
// payment method. Each field is length-prefixed before hashing so that
// ("ab","c") and ("a","bc") cannot produce the same digest.
func Fingerprint(cartID, shippingAddressID, paymentMethodID string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range []string{cartID, shippingAddressID, paymentMethodID} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// reserveMappingScript creates the mapping only if the key has none and
// returns the mapping in force, so concurrent reservers agree on one
// winner in one round trip.
var reserveMappingScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], 'orderId', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'status', ARGV[2], 'fingerprint', ARGV[3])
  return {1, ARGV[1], ARGV[2], ARGV[3]}
end
local v = redis.call('HMGET', KEYS[1], 'orderId', 'status', 'fingerprint')
return {0, v[1] or '', v[2] or '', v[3] or ''}
`)

// markStartedScript flips the status only for the order the key maps to,
// so a stale caller can never start someone else's mapping.
var markStartedScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'orderId')
if (not cur) or cur ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
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
	res, err := reserveMappingScript.Run(ctx, r.client, []string{r.idemKey(key)},
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
	v, err := r.client.HGetAll(ctx, r.idemKey(key)).Result()
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

// MarkStarted implements Idempotency.
func (r idempotencyStore) MarkStarted(ctx context.Context, key, orderID string) error {
	if key == "" || orderID == "" {
		return invalid("idempotency key and orderId are required")
	}
	n, err := markStartedScript.Run(ctx, r.client, []string{r.idemKey(key)},
		orderID, string(MappingStarted)).Int64()
	if err != nil {
		return translate("mark idempotency key started", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: idempotency key %q is not mapped to order %q", ErrNotFound, key, orderID)
	}
	return nil
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

// ---- Carts ----

// GetCart implements Carts.
func (r cartStore) GetCart(ctx context.Context, cartID string) (Cart, error) {
	if cartID == "" {
		return Cart{}, invalid("cartId is empty")
	}
	b, err := r.client.Get(ctx, r.cartKey(cartID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Cart{}, fmt.Errorf("%w: cart %q", ErrNotFound, cartID)
	}
	if err != nil {
		return Cart{}, translate("get cart", err)
	}
	var c Cart
	if err := json.Unmarshal(b, &c); err != nil {
		return Cart{}, fmt.Errorf("%w: cart %q: %v", ErrCorrupt, cartID, err)
	}
	if c.CartID != cartID {
		return Cart{}, fmt.Errorf("%w: cart key %q holds cart %q", ErrCorrupt, cartID, c.CartID)
	}
	return c, nil
}

// PutCart implements Carts. The snapshot is validated as a seed cart is.
func (r cartStore) PutCart(ctx context.Context, cart Cart) error {
	if err := validateCart(cart); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	b, err := json.Marshal(cart)
	if err != nil {
		return fmt.Errorf("%w: cart %q: %v", ErrInvalidArgument, cart.CartID, err)
	}
	return translate("put cart", r.client.Set(ctx, r.cartKey(cart.CartID), b, 0).Err())
}

// ---- Inventory ----

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
	keys = append(keys, r.reservationKey(req.GetReservationId()))
	args := make([]any, 0, 2+2*len(lines))
	args = append(args, req.GetOrderId(), string(enc))
	for _, l := range lines {
		keys = append(keys, r.stockKey(l.SKU))
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
	rec := r.reservationKey(req.GetReservationId())
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
			keys = append(keys, r.stockKey(l.SKU))
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
	return translate("set stock", r.client.Set(ctx, r.stockKey(sku), quantity, 0).Err())
}

// Stock implements Inventory.
func (r inventoryStore) Stock(ctx context.Context, sku string) (int64, error) {
	if sku == "" {
		return 0, invalid("sku is empty")
	}
	raw, err := r.client.Get(ctx, r.stockKey(sku)).Result()
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
	return r.counter(ctx, r.reservationKey(reservationID), "reserveCalls")
}

// ReleaseCalls implements Inventory.
func (r inventoryStore) ReleaseCalls(ctx context.Context, reservationID string) (int64, error) {
	return r.counter(ctx, r.reservationKey(reservationID), "releaseCalls")
}

func (r *Redis) counter(ctx context.Context, key, field string) (int64, error) {
	raw, err := r.client.HGet(ctx, key, field).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, translate("get call counter", err)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s of %q is %q", ErrCorrupt, field, key, raw)
	}
	return n, nil
}

// ---- Payment ----

// authorizeScript: KEYS[1] payment record, KEYS[2] method seed; ARGV
// orderId, methodId, amount, currency, unknown-method reason, default
// decline reason. The method is read inside the script, so the decision
// and its record are one step and a later change of the seed cannot
// change a recorded result.
var authorizeScript = redis.NewScript(`
local rec = KEYS[1]
redis.call('HINCRBY', rec, 'calls', 1)
local prev = redis.call('HMGET', rec, 'accepted', 'reason')
if prev[1] then
  return {prev[1], prev[2] or ''}
end
local m = redis.call('HMGET', KEYS[2], 'approve', 'reason')
local accepted, reason = '0', ''
if not m[1] then
  reason = ARGV[5]
elseif m[1] == '1' then
  accepted = '1'
else
  reason = m[2] or ''
  if reason == '' then reason = ARGV[6] end
end
redis.call('HSET', rec, 'accepted', accepted, 'reason', reason, 'orderId', ARGV[1],
  'methodId', ARGV[2], 'amount', ARGV[3], 'currency', ARGV[4])
return {accepted, reason}
`)

// Authorize implements Payment.
func (r paymentStore) Authorize(ctx context.Context, req *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error) {
	switch {
	case req == nil || req.GetPaymentId() == "":
		return nil, invalid("paymentId is empty")
	case req.GetPaymentMethodId() == "":
		return nil, invalid("payment %q: paymentMethodId is empty", req.GetPaymentId())
	case req.GetAmount() < 0:
		return nil, invalid("payment %q: amount %d is negative", req.GetPaymentId(), req.GetAmount())
	}
	res, err := authorizeScript.Run(ctx, r.client,
		[]string{r.paymentKey(req.GetPaymentId()), r.methodKey(req.GetPaymentMethodId())},
		req.GetOrderId(), req.GetPaymentMethodId(), req.GetAmount(), req.GetCurrency(),
		ReasonUnknownPaymentMethod, ReasonPaymentDeclined).StringSlice()
	if err != nil {
		return nil, translate("authorize payment", err)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("%w: authorize payment: unexpected reply %q", ErrCorrupt, res)
	}
	out := &contracts.AuthorizePaymentRes{Accepted: res[0] == "1"}
	if !out.Accepted {
		out.Reason = &res[1]
	}
	return out, nil
}

// PutMethod implements Payment.
func (r paymentStore) PutMethod(ctx context.Context, m PaymentMethod) error {
	if err := validateMethod(m); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return translate("put payment method", r.client.HSet(ctx, r.methodKey(m.MethodID),
		"approve", boolField(m.Approve), "reason", m.Reason).Err())
}

// GetMethod implements Payment.
func (r paymentStore) GetMethod(ctx context.Context, methodID string) (PaymentMethod, error) {
	if methodID == "" {
		return PaymentMethod{}, invalid("methodId is empty")
	}
	v, err := r.client.HGetAll(ctx, r.methodKey(methodID)).Result()
	if err != nil {
		return PaymentMethod{}, translate("get payment method", err)
	}
	if len(v) == 0 {
		return PaymentMethod{}, fmt.Errorf("%w: payment method %q", ErrNotFound, methodID)
	}
	approve, ok := v["approve"]
	if !ok || (approve != "0" && approve != "1") {
		return PaymentMethod{}, fmt.Errorf("%w: payment method %q has approve %q", ErrCorrupt, methodID, approve)
	}
	return PaymentMethod{MethodID: methodID, Approve: approve == "1", Reason: v["reason"]}, nil
}

// AuthorizeCalls implements Payment.
func (r paymentStore) AuthorizeCalls(ctx context.Context, paymentID string) (int64, error) {
	return r.counter(ctx, r.paymentKey(paymentID), "calls")
}

// Captured implements Payment. Only the first, recorded result counts, so
// the answer is the amount once however often Authorize ran.
func (r paymentStore) Captured(ctx context.Context, paymentID string) (int64, error) {
	v, err := r.client.HMGet(ctx, r.paymentKey(paymentID), "accepted", "amount").Result()
	if err != nil {
		return 0, translate("get captured amount", err)
	}
	if s, _ := v[0].(string); s != "1" {
		return 0, nil
	}
	raw, _ := v[1].(string)
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: payment %q amount is %q", ErrCorrupt, paymentID, raw)
	}
	return n, nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
