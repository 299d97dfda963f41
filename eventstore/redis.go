package eventstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Stream entry field names.
const (
	fieldEventID         = "eventId"
	fieldOrderID         = "orderId"
	fieldEventType       = "eventType"
	fieldVersion         = "version"
	fieldSourceCommandID = "sourceCommandId"
	fieldCreatedAt       = "createdAtUnixMs"
	fieldData            = "data"
	fieldSchema          = "schema"
	// The writer's fence: an addition to the spec's envelope. Entries
	// written before it was recorded lack both fields.
	fieldFenceGen   = "fenceGen"
	fieldFenceEpoch = "fenceEpoch"
)

// Status codes returned by the Lua scripts as the first reply element.
const (
	statusOK        = 0
	statusFenced    = 1
	statusConflict  = 2
	statusDuplicate = 3
	// statusPrecondition: a Require companion failed (projected appends
	// only).
	statusPrecondition = 4
	// statusSealed: the order is sealed for the archive (Seal).
	statusSealed = 5
)

// Config configures the Redis Streams store.
type Config struct {
	// Client is required.
	Client redis.UniversalClient
	// KeyPrefix precedes every key; default DefaultKeyPrefix. It must not
	// contain '{' or '}': the order id is the keys' hash tag.
	KeyPrefix string
}

// Redis is the Store on Redis Streams, one stream per order (key layout:
// keys). A stream is append-only: its length is its version. Each entry
// carries, besides the envelope fields, fenceGen and fenceEpoch: the fence
// its append was checked against.
type Redis struct {
	client redis.UniversalClient
	keys   keys
}

var (
	_ Store         = (*Redis)(nil)
	_ StreamChecker = (*Redis)(nil)
)

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
	return &Redis{client: cfg.Client, keys: k}, nil
}

// openScript raises the fence of an existing stream and returns it with all
// entries, so that no append can slip between the fence and the replay. A
// fence without a stream (raised by a takeover before the first event) is
// honoured the same way.
//
// KEYS: stream, fence. ARGV: generation.
// Reply: {0, gen, epoch, entries} | {1, storedGen, storedEpoch} |
// {5, gen, epoch} for a sealed order.
var openScript = redis.NewScript(`#!lua
local gen = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[2], 'gen', 'epoch', 'sealed')
if f[3] then
  return {5, tonumber(f[1]) or 0, tonumber(f[2]) or 0}
end
if not f[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, gen, 1, {}}
end
local epoch = 1
if f[1] then
  local sgen = tonumber(f[1])
  local sepoch = tonumber(f[2]) or 0
  if gen < sgen then
    return {1, sgen, sepoch}
  end
  if gen == sgen then
    epoch = sepoch + 1
  end
end
redis.call('HSET', KEYS[2], 'gen', ARGV[1], 'epoch', epoch)
return {0, gen, epoch, redis.call('XRANGE', KEYS[1], '-', '+')}
`)

// appendLua checks fence, expected version and source commands, in that
// order, then adds the events, each stamped with the fence it passed, and
// raises the fence hash's schema field (absent: the base schema 1) to the
// batch's highest schema, writing it only when it rises; nothing is
// written unless every check passes. A fence at epoch 0
// (raised by a takeover) admits nobody. It ends with the new version in
// the local version and no reply, so that each script that includes it
// says what else it writes and replies itself; the including script sets
// base, the number of its ARGV before the events.
//
// KEYS: stream, fence, cmds.
// ARGV: expectedVersion, gen, epoch, orderId, [the includer's], then per
// event: eventId, eventType, sourceCommandId, createdAtUnixMs, data, schema.
// Reply on a failed check: {1, storedGen, storedEpoch} | {2, actualVersion}
// | {3, sourceCommandId, recordedVersion} | {5, gen, epoch} for a sealed
// order (checked first: a sealed order takes no writer at all); on an
// empty batch {0, version}.
//
// A lone event's source command is checked and recorded by one HSETNX
// (and read back only when it was there), a command less per append: no
// check after it can fail, so it never stays behind a refused append. A
// batch checks every one first, so that a repeat in it writes nothing.
const appendLua = `
local expected = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[2], 'gen', 'epoch', 'sealed', 'schema')
if f[3] then
  return {5, tonumber(f[1]) or 0, tonumber(f[2]) or 0}
end
if f[1] then
  if tonumber(f[1]) ~= tonumber(ARGV[2]) or tonumber(f[2]) ~= tonumber(ARGV[3]) or tonumber(f[2]) == 0 then
    return {1, tonumber(f[1]) or -1, tonumber(f[2]) or -1}
  end
end
local version = redis.call('XLEN', KEYS[1])
if version ~= expected then
  return {2, version}
end
local n = (#ARGV - base) / 6
if n == 1 then
  local cmd = ARGV[base + 3]
  if cmd ~= '' and redis.call('HSETNX', KEYS[3], cmd, version + 1) == 0 then
    return {3, cmd, tonumber(redis.call('HGET', KEYS[3], cmd))}
  end
else
  for i = 0, n - 1 do
    local cmd = ARGV[base + 1 + i*6 + 2]
    if cmd ~= '' then
      local seen = redis.call('HGET', KEYS[3], cmd)
      if seen then
        return {3, cmd, tonumber(seen)}
      end
    end
  end
end
if n == 0 then
  return {0, version}
end
if not f[1] then
  redis.call('HSET', KEYS[2], 'gen', ARGV[2], 'epoch', ARGV[3])
end
local highest = tonumber(f[4]) or 1
local top = highest
for i = 0, n - 1 do
  local b = base + 1 + i*6
  version = version + 1
  local sc = tonumber(ARGV[b+5])
  if sc > top then top = sc end
  redis.call('XADD', KEYS[1], '*',
    'eventId', ARGV[b],
    'orderId', ARGV[4],
    'eventType', ARGV[b+1],
    'version', version,
    'sourceCommandId', ARGV[b+2],
    'createdAtUnixMs', ARGV[b+3],
    'data', ARGV[b+4],
    'schema', ARGV[b+5],
    'fenceGen', ARGV[2],
    'fenceEpoch', ARGV[3])
  if n > 1 and ARGV[b+2] ~= '' then
    redis.call('HSETNX', KEYS[3], ARGV[b+2], version)
  end
end
if top > highest then
  redis.call('HSET', KEYS[2], 'schema', top)
end
`

// appendArgs is how many ARGV precede the events in appendScript.
const appendArgs = 4

// appendScript is Append: appendLua and nothing else, so a plain append
// writes only this store's keys.
//
// Reply: {0, newVersion} or appendLua's.
var appendScript = redis.NewScript(`#!lua
local base = ` + strconv.Itoa(appendArgs) + appendLua + `
return {0, version}
`)

// Open implements Store.
func (r *Redis) Open(ctx context.Context, orderID string, generation int64) (Fence, []Envelope, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return Fence{}, nil, err
	}
	reply, err := openScript.Run(ctx, r.client, []string{k.stream, k.fence}, generation).Slice()
	if err != nil {
		return Fence{}, nil, translate("open "+orderID, err)
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return Fence{}, nil, fmt.Errorf("eventstore: open %s: %w", orderID, err)
	}
	gen, err1 := replyInt(reply, 1)
	epoch, err2 := replyInt(reply, 2)
	if err := errors.Join(err1, err2); err != nil {
		return Fence{}, nil, fmt.Errorf("eventstore: open %s: %w", orderID, err)
	}
	switch status {
	case statusOK:
	case statusSealed:
		return Fence{}, nil, fmt.Errorf("%w: open %s", ErrSealed, orderID)
	case statusFenced:
		return Fence{}, nil, &FencedOpenError{OrderID: orderID, Generation: generation, Stored: Fence{Generation: gen, Epoch: epoch}}
	default:
		return Fence{}, nil, fmt.Errorf("eventstore: open %s: unexpected script status %d", orderID, status)
	}
	if len(reply) < 4 {
		return Fence{}, nil, fmt.Errorf("eventstore: open %s: script reply has no entries", orderID)
	}
	raw, ok := reply[3].([]any)
	if !ok {
		return Fence{}, nil, fmt.Errorf("eventstore: open %s: entries reply is %T", orderID, reply[3])
	}
	events := make([]Envelope, 0, len(raw))
	for i, item := range raw {
		id, values, err := rawEntry(item)
		if err != nil {
			return Fence{}, nil, fmt.Errorf("%w: order %s entry #%d: %v", ErrCorrupt, orderID, i+1, err)
		}
		env, err := decodeEntry(orderID, id, int64(i+1), values)
		if err != nil {
			return Fence{}, nil, err
		}
		events = append(events, env)
	}
	return Fence{Generation: gen, Epoch: epoch}, events, nil
}

// Append implements Store. The checks apply in the order fence, version,
// source command.
func (r *Redis) Append(ctx context.Context, orderID string, expectedVersion int64, fence Fence, events []Envelope) (int64, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, appendArgs+5*len(events))
	args = append(args, expectedVersion, fence.Generation, fence.Epoch, orderID)
	if args, err = appendEvents(args, orderID, events); err != nil {
		return 0, err
	}
	return r.runAppend(ctx, appendScript, []string{k.stream, k.fence, k.cmds}, args, orderID, expectedVersion, fence)
}

// appendEvents adds each event's script arguments to args.
func appendEvents(args []any, orderID string, events []Envelope) ([]any, error) {
	for i, e := range events {
		if e.OrderID != "" && e.OrderID != orderID {
			return nil, fmt.Errorf("%w: event #%d has orderId %q, appending to %q", ErrInvalidOrderID, i+1, e.OrderID, orderID)
		}
		schema := e.Schema
		if schema == 0 {
			schema = 1
		}
		if schema < 0 {
			return nil, fmt.Errorf("eventstore: event #%d of %s: schema %d", i+1, orderID, e.Schema)
		}
		args = append(args, e.EventID, e.EventType, e.SourceCommandID, e.CreatedAtUnixMs, e.Data, schema)
	}
	return args, nil
}

// runAppend runs an append script and turns its reply into the new
// version or the sentinel of the failed check.
func (r *Redis) runAppend(ctx context.Context, script *redis.Script, keys []string, args []any, orderID string, expectedVersion int64, fence Fence) (int64, error) {
	reply, err := r.runAppendReply(ctx, script, keys, args, orderID, expectedVersion, fence)
	if err != nil {
		return 0, err
	}
	v, err := replyInt(reply, 1)
	if err != nil {
		return 0, fmt.Errorf("eventstore: append %s: %w", orderID, err)
	}
	return v, nil
}

// runAppendReply runs an append script and returns its reply when every
// check passed ({0, newVersion, ...}), or the failed check as this
// package's error.
func (r *Redis) runAppendReply(ctx context.Context, script *redis.Script, keys []string, args []any, orderID string, expectedVersion int64, fence Fence) ([]any, error) {
	reply, err := script.Run(ctx, r.client, keys, args...).Slice()
	if err != nil {
		return nil, translate("append "+orderID, err)
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return nil, fmt.Errorf("eventstore: append %s: %w", orderID, err)
	}
	switch status {
	case statusOK:
		return reply, nil
	case statusFenced:
		gen, _ := replyInt(reply, 1)
		epoch, _ := replyInt(reply, 2)
		return nil, fmt.Errorf("%w: append to %s with fence (%d, %d): stored fence is (%d, %d)",
			ErrFenced, orderID, fence.Generation, fence.Epoch, gen, epoch)
	case statusSealed:
		return nil, fmt.Errorf("%w: append to %s", ErrSealed, orderID)
	case statusConflict:
		actual, _ := replyInt(reply, 1)
		return nil, fmt.Errorf("%w: append to %s: expected version %d, actual %d",
			ErrVersionConflict, orderID, expectedVersion, actual)
	case statusDuplicate:
		cmd, _ := reply[1].(string)
		v, _ := replyInt(reply, 2)
		return nil, fmt.Errorf("%w: append to %s: sourceCommandId %q recorded at version %d",
			ErrDuplicateCommand, orderID, cmd, v)
	case statusPrecondition:
		key, _ := reply[1].(string)
		return nil, fmt.Errorf("%w: append to %s: %s does not hold the required value", ErrPrecondition, orderID, key)
	default:
		return nil, fmt.Errorf("eventstore: append %s: unexpected script status %d", orderID, status)
	}
}

// Load implements Store.
func (r *Redis) Load(ctx context.Context, orderID string) ([]Envelope, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return nil, err
	}
	msgs, err := r.client.XRange(ctx, k.stream, "-", "+").Result()
	if err != nil {
		return nil, translate("load "+orderID, err)
	}
	events := make([]Envelope, 0, len(msgs))
	for i, m := range msgs {
		env, err := decodeEntry(orderID, m.ID, int64(i+1), m.Values)
		if err != nil {
			return nil, err
		}
		events = append(events, env)
	}
	return events, nil
}

// StreamExists implements StreamChecker: an EXISTS on the stream's key,
// which holds an entry from the first append on (a stream is never
// trimmed, and an empty batch writes nothing).
func (r *Redis) StreamExists(ctx context.Context, orderID string) (bool, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return false, err
	}
	n, err := r.client.Exists(ctx, k.stream).Result()
	if err != nil {
		return false, translate("check stream of "+orderID, err)
	}
	return n > 0, nil
}

// HighestSchema implements SchemaReader: the fence hash's schema field.
func (r *Redis) HighestSchema(ctx context.Context, orderID string) (int, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return 0, err
	}
	raw, err := r.client.HGet(ctx, k.fence, fieldSchema).Result()
	if errors.Is(err, redis.Nil) {
		return 1, nil
	}
	if err != nil {
		return 0, translate("read the schema of "+orderID, err)
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w: order %s: fence schema %q", ErrCorrupt, orderID, raw)
	}
	return v, nil
}

// barrierTTL keeps a barrier key no longer than any retry that could
// need it; the key holds nothing anyone reads.
const barrierTTL = time.Minute

// Barrier implements Barrier: one SET of the order's barrier key, in the
// order's slot. On its own it proves nothing; on a client that waits for
// replicas (cluster/redisurl.WaitForReplicas) the SET is followed by WAIT
// on its connection, and since a primary replicates in order, the
// replicas that hold this write hold every earlier write of that primary,
// the order's stream included.
func (r *Redis) Barrier(ctx context.Context, orderID string) error {
	k, err := r.keys.order(orderID)
	if err != nil {
		return err
	}
	if err := r.client.Set(ctx, k.barrier, "1", barrierTTL).Err(); err != nil {
		return translate("replication barrier of "+orderID, err)
	}
	return nil
}

// decodeEntry turns one stream entry at 1-based position pos into an
// Envelope. Its version must equal its position: that is what makes
// versions gapless.
func decodeEntry(orderID, id string, pos int64, values map[string]any) (Envelope, error) {
	corrupt := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: order %s entry %s field %s: %s", ErrCorrupt, orderID, id, field, fmt.Sprintf(format, args...))
	}
	str := func(field string) (string, error) {
		v, ok := values[field]
		if !ok {
			return "", corrupt(field, "missing")
		}
		s, ok := v.(string)
		if !ok {
			return "", corrupt(field, "is %T, not a string", v)
		}
		return s, nil
	}
	integer := func(field string) (int64, error) {
		s, err := str(field)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, corrupt(field, "%q is not an integer", s)
		}
		return n, nil
	}

	var env Envelope
	var errs [7]error
	env.EventID, errs[0] = str(fieldEventID)
	env.OrderID, errs[1] = str(fieldOrderID)
	env.EventType, errs[2] = str(fieldEventType)
	env.Version, errs[3] = integer(fieldVersion)
	env.SourceCommandID, errs[4] = str(fieldSourceCommandID)
	env.CreatedAtUnixMs, errs[5] = integer(fieldCreatedAt)
	var data string
	data, errs[6] = str(fieldData)
	for _, err := range errs {
		if err != nil {
			return Envelope{}, err
		}
	}
	if env.OrderID != orderID {
		return Envelope{}, corrupt(fieldOrderID, "%q in the stream of %q", env.OrderID, orderID)
	}
	if env.Version != pos {
		return Envelope{}, corrupt(fieldVersion, "%d at position %d", env.Version, pos)
	}
	env.Data = []byte(data)
	// Older entries lack the schema and fence fields; present ones must
	// be integers.
	var err error
	env.Schema = 1
	if _, ok := values[fieldSchema]; ok {
		var v int64
		if v, err = integer(fieldSchema); err != nil {
			return Envelope{}, err
		}
		if v < 1 || v > math.MaxInt32 {
			return Envelope{}, corrupt(fieldSchema, "%d is not a schema version", v)
		}
		env.Schema = int(v)
	}
	if _, ok := values[fieldFenceGen]; ok {
		if env.FenceGeneration, err = integer(fieldFenceGen); err != nil {
			return Envelope{}, err
		}
	}
	if _, ok := values[fieldFenceEpoch]; ok {
		if env.FenceEpoch, err = integer(fieldFenceEpoch); err != nil {
			return Envelope{}, err
		}
	}
	return env, nil
}

// rawEntry unpacks an XRANGE entry as a script returns it: {id, {f, v, ...}}.
func rawEntry(item any) (string, map[string]any, error) {
	pair, ok := item.([]any)
	if !ok || len(pair) != 2 {
		return "", nil, fmt.Errorf("entry is %T, not [id fields]", item)
	}
	id, ok := pair[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("entry id is %T", pair[0])
	}
	flat, ok := pair[1].([]any)
	if !ok || len(flat)%2 != 0 {
		return "", nil, fmt.Errorf("entry %s fields are %T of odd length", id, pair[1])
	}
	values := make(map[string]any, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		name, ok := flat[i].(string)
		if !ok {
			return "", nil, fmt.Errorf("entry %s field name is %T", id, flat[i])
		}
		values[name] = flat[i+1]
	}
	return id, values, nil
}

func replyInt(reply []any, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("script reply has %d elements, want > %d", len(reply), i)
	}
	n, ok := reply[i].(int64)
	if !ok {
		return 0, fmt.Errorf("script reply element %d is %T, not an integer", i, reply[i])
	}
	return n, nil
}

// translate maps a go-redis error to this package's vocabulary: a value of
// the wrong type at one of the order's keys is corruption; anything but a
// server error reply means the store could not be reached.
func translate(op string, err error) error {
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		// Something other than this store's structure sits at its key.
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, op, err)
	}
	if redis.HasErrorPrefix(err, "OOM") {
		// Refused whole under noeviction: nothing of the write applied.
		return fmt.Errorf("%w: %w: %s: %w", ErrUnavailable, errkind.StoreFull, op, err)
	}
	if isUnavailable(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("eventstore: %s: %w", op, err)
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

// raiseFenceScript retires every writer below a generation, stream or no
// stream. Epoch 0 is held by nobody: the next Open takes epoch 1. A
// sealed fence stays as it is: nobody writes to it any more, and it keeps
// the last generation and fence.
//
// KEYS: fence. ARGV: minGeneration.
// Reply: {gen, epoch} in force.
var raiseFenceScript = redis.NewScript(`#!lua
local min = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'gen', 'epoch', 'sealed')
local g = tonumber(f[1])
if f[3] or (g and g >= min) then
  return {g, tonumber(f[2]) or 0}
end
redis.call('HSET', KEYS[1], 'gen', min, 'epoch', 0)
return {min, 0}
`)

// RaiseFence implements Store.
func (r *Redis) RaiseFence(ctx context.Context, orderID string, minGeneration int64) (Fence, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return Fence{}, err
	}
	if minGeneration < 1 {
		return Fence{}, fmt.Errorf("eventstore: raise fence of %s to generation %d: generations start at 1", orderID, minGeneration)
	}
	reply, err := raiseFenceScript.Run(ctx, r.client, []string{k.fence}, minGeneration).Slice()
	if err != nil {
		return Fence{}, translate("raise fence "+orderID, err)
	}
	gen, err1 := replyInt(reply, 0)
	epoch, err2 := replyInt(reply, 1)
	if err := errors.Join(err1, err2); err != nil {
		return Fence{}, fmt.Errorf("eventstore: raise fence %s: %w", orderID, err)
	}
	return Fence{Generation: gen, Epoch: epoch}, nil
}
