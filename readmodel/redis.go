package readmodel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// ErrUnavailable: the store could not be reached.
var ErrUnavailable = errkind.New(errkind.StoreUnavailable, "readmodel: unavailable")

// The record's fields. They are this store's; the projected append writes
// them only through RedisCommitter, which names them to the event store.
const (
	fieldVersion = "version"
	fieldState   = "state"
)

// Config configures the Redis read model store.
type Config struct {
	// Client is required.
	Client redis.UniversalClient
	// KeyPrefix precedes every key; default DefaultKeyPrefix. It must not
	// contain '{' or '}': the order id is the key's hash tag.
	KeyPrefix string
	// Logger receives the failures of best-effort index writes; default
	// slog.Default().
	Logger *slog.Logger
	// IndexFinished keeps the FinishedIndex of terminal orders, which the
	// archiver reads (a retention above 0). Off, a terminal order is in no
	// index, and costs nothing beyond its record.
	IndexFinished bool
	// Sealed, when set, is where Get finds an archived order's final
	// state once its record left with the order's compaction: the event
	// store's sealed record (eventstore.Redis.Sealed). A Get of an order
	// without a record then costs one more read.
	Sealed SealedReader
}

// SealedReader reads a sealed order's record (eventstore.Redis.Sealed):
// eventstore.ErrNotSealed for an order that is not sealed.
type SealedReader interface {
	Sealed(ctx context.Context, orderID string) (eventstore.SealedRecord, error)
}

// Redis is the Store on Redis: one hash per order (key layout: keys) with
// the fields version (decimal) and state (OrderState in protobuf binary
// form, which keeps int64 fields exact). Beside the records it keeps the
// ActiveIndex of non-terminal orders in ActiveShards sorted sets (member:
// order id, score: UpdatedAtUnixMs).
type Redis struct {
	client   redis.UniversalClient
	keys     keys
	log      *slog.Logger
	finished bool
	sealed   SealedReader
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store on cfg.Client, or an error wrapping ErrConfig
// when cfg has no client or a prefix with braces.
func NewRedis(cfg Config) (*Redis, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Config.Client is nil", ErrConfig)
	}
	k, err := newKeys(cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	r := &Redis{client: cfg.Client, keys: k, log: cfg.Logger, finished: cfg.IndexFinished, sealed: cfg.Sealed}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r, nil
}

// putScript writes unless a newer version is stored. A stored version that
// is not a number is damage, and a rebuild must be able to repair it, so it
// does not block the write. A written terminal record is announced in the
// same step (terminal.go): the caller passes the channel only then.
//
// KEYS: record. ARGV: version, state, channel (empty: none), notice.
// Reply: 1 applied, 0 not.
var putScript = redis.NewScript(`#!lua
local cur = tonumber(redis.call('HGET', KEYS[1], 'version'))
if cur and cur > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'state', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SPUBLISH', ARGV[3], ARGV[4])
end
return 1
`)

// replaceScript writes whatever version is stored; a terminal record is
// announced in the same step, as by putScript.
//
// KEYS: record. ARGV: version, state, channel (empty: none), notice.
var replaceScript = redis.NewScript(`#!lua
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'state', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SPUBLISH', ARGV[3], ARGV[4])
end
return 1
`)

// archived is Get of an order without a record: an archived order's
// final state, kept in its sealed record, or ErrNotFound.
func (r *Redis) archived(ctx context.Context, orderID string) (*contracts.OrderState, int64, error) {
	if r.sealed == nil {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, orderID)
	}
	rec, err := r.sealed.Sealed(ctx, orderID)
	switch {
	case errors.Is(err, eventstore.ErrNotSealed):
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, orderID)
	case err != nil:
		return nil, 0, fmt.Errorf("readmodel: get %s: %w", orderID, err)
	case !rec.Compacted():
		// Sealed but still hot: its record is missing, as for any order.
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, orderID)
	}
	return KeptState(rec)
}

// Get implements Store. An archived order answers the final state its
// sealed record kept (Config.Sealed).
func (r *Redis) Get(ctx context.Context, orderID string) (*contracts.OrderState, int64, error) {
	key, err := r.keys.record(orderID)
	if err != nil {
		return nil, 0, err
	}
	vals, err := r.client.HMGet(ctx, key, fieldVersion, fieldState).Result()
	if err != nil {
		return nil, 0, translate("get "+orderID, err)
	}
	if len(vals) != 2 {
		return nil, 0, fmt.Errorf("readmodel: get %s: HMGET returned %d values", orderID, len(vals))
	}
	if vals[0] == nil && vals[1] == nil {
		return r.archived(ctx, orderID)
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s (key %s): %s", ErrCorrupt, orderID, key, fmt.Sprintf(format, args...))
	}
	vs, ok := vals[0].(string)
	if !ok {
		return nil, 0, corrupt("field version missing")
	}
	version, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, 0, corrupt("field version %q is not an integer", vs)
	}
	raw, ok := vals[1].(string)
	if !ok {
		return nil, 0, corrupt("field state missing")
	}
	state := &contracts.OrderState{}
	if err := proto.Unmarshal([]byte(raw), state); err != nil {
		return nil, 0, corrupt("field state: %v", err)
	}
	return state, version, nil
}

// Put implements Store. An applied write also updates the ActiveIndex,
// best-effort, in a command of its own: the index shard is another hash
// slot than the record.
func (r *Redis) Put(ctx context.Context, orderID string, version int64, state *contracts.OrderState) (bool, error) {
	key, raw, err := r.encode(orderID, state)
	if err != nil {
		return false, err
	}
	applied, err := putScript.Run(ctx, r.client, []string{key}, version, raw, r.noticeChannel(orderID, state), r.notice(orderID, state, raw)).Int64()
	if err != nil {
		return false, translate("put "+orderID, err)
	}
	if applied == 1 {
		r.indexBestEffort(ctx, orderID, state)
	}
	return applied == 1, nil
}

// Replace implements Store. Like Put it updates the ActiveIndex after the
// write, best-effort.
func (r *Redis) Replace(ctx context.Context, orderID string, version int64, state *contracts.OrderState) error {
	key, raw, err := r.encode(orderID, state)
	if err != nil {
		return err
	}
	if err := replaceScript.Run(ctx, r.client, []string{key}, version, raw, r.noticeChannel(orderID, state), r.notice(orderID, state, raw)).Err(); err != nil {
		return translate("replace "+orderID, err)
	}
	r.indexBestEffort(ctx, orderID, state)
	return nil
}

// noticeChannel is the channel a write of state announces itself on: the
// order's channel for a terminal record, none ("") otherwise.
func (r *Redis) noticeChannel(orderID string, state *contracts.OrderState) string {
	if !Terminal(state.GetStatus()) {
		return ""
	}
	return OrderChannel(r.keys.prefix, orderID)
}

// notice is the message a write of state announces itself with: the
// order and its encoded record for a terminal state, "" otherwise (no
// notice is sent then).
func (r *Redis) notice(orderID string, state *contracts.OrderState, encoded []byte) string {
	if !Terminal(state.GetStatus()) {
		return ""
	}
	return noticeMessage(orderID, encoded)
}

// encode returns the order's record key and the state as stored.
func (r *Redis) encode(orderID string, state *contracts.OrderState) (key string, encoded []byte, err error) {
	if key, err = r.keys.record(orderID); err != nil {
		return "", nil, err
	}
	if state == nil {
		return "", nil, fmt.Errorf("readmodel: record %s: nil state", orderID)
	}
	if encoded, err = proto.Marshal(state); err != nil {
		return "", nil, fmt.Errorf("readmodel: record %s: encode state: %w", orderID, err)
	}
	return key, encoded, nil
}

// Delete implements Store. The order leaves the ActiveIndex too (a
// rebuild of the projection puts it back).
func (r *Redis) Delete(ctx context.Context, orderID string) error {
	key, err := r.keys.record(orderID)
	if err != nil {
		return err
	}
	if err := r.client.Del(ctx, key).Err(); err != nil {
		return translate("delete "+orderID, err)
	}
	if err := r.client.ZRem(ctx, r.keys.active(shardOf(orderID)), orderID).Err(); err != nil {
		r.log.Warn("active-order index entry not dropped with its projection", slog.String("order", orderID), slog.Any("error", err))
	}
	return nil
}

// translate maps a go-redis error to this package's vocabulary: a value of
// the wrong type at the record's key is corruption; anything but a server
// error reply means the store could not be reached.
func translate(op string, err error) error {
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, op, err)
	}
	if redis.HasErrorPrefix(err, "OOM") {
		// Refused whole under noeviction: nothing of the write applied.
		return fmt.Errorf("%w: %w: %s: %w", ErrUnavailable, errkind.StoreFull, op, err)
	}
	if isUnavailable(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("readmodel: %s: %w", op, err)
}

func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		// The caller gave up; the store may be fine.
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		// Network, pool, timeout or closed-client errors.
		return true
	}
	// Server replies that mean "not serving now" rather than "bad request".
	// MOVED and ASK reach here only once the client's redirects ran out,
	// while a failover or a resharding moves the slot: the command did
	// not run.
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
