package relocation

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Config configures the Redis Relocation Store.
type Config struct {
	// Client is required.
	Client redis.UniversalClient
	// KeyPrefix defaults to DefaultKeyPrefix. It must not lie inside the
	// Location Store's default keyspace ("sm:loc:") and must not contain
	// '{' or '}': the ids are the keys' hash tags.
	KeyPrefix string
}

// Redis is the Store on Redis (key layout: keys). It is safe for
// concurrent use.
type Redis struct {
	rdb  redis.UniversalClient
	keys keys
}

var _ Store = (*Redis)(nil)

// NewRedis returns a Relocation Store over cfg.Client, or an error
// wrapping ErrConfig on a nil client or a prefix inside the Location
// Store's keyspace or with a brace: wiring mistakes that must stop the
// process at start-up, since sharing keys would corrupt ownership.
func NewRedis(cfg Config) (*Redis, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Config.Client is nil", ErrConfig)
	}
	k, err := newKeys(cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	return &Redis{rdb: cfg.Client, keys: k}, nil
}

func checkID(what, id string) error {
	if id == "" || strings.ContainsAny(id, "{}") {
		return fmt.Errorf("%w: %s %q", ErrInvalidID, what, id)
	}
	return nil
}

// translate turns a go-redis error into ours, once, at the edge. The
// original stays in the chain so context errors remain recognisable.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	if redis.HasErrorPrefix(err, "OOM") {
		// Refused whole under noeviction: nothing of the write applied.
		return fmt.Errorf("%w: %w: %w", ErrUnavailable, errkind.StoreFull, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// SaveFirst records envelope as the order's first activation envelope unless
// one is already stored. A later save keeps the first and is not an error:
// every activation may offer its envelope, and the first one wins.
func (s *Redis) SaveFirst(ctx context.Context, orderID string, envelope []byte) error {
	if err := checkID("order", orderID); err != nil {
		return err
	}
	if len(envelope) == 0 {
		return fmt.Errorf("%w: empty envelope for order %q", ErrInvalidArgument, orderID)
	}
	if err := s.rdb.SetNX(ctx, s.keys.envelope(orderID), envelope, 0).Err(); err != nil {
		return translate(err)
	}
	return nil
}

// Unit is the part of an order's unit of work (eventstore.Unit, which
// this store does not import) that SaveFirst's write rides in.
type Unit interface {
	// OrderID is the order the unit writes.
	OrderID() string
	// SetIfAbsent adds a write of value at key unless the key exists,
	// and returns its position in the unit.
	SetIfAbsent(key string, value []byte) int
}

// AddFirstEnvelope adds SaveFirst's write of envelope, as the first
// activation envelope of u's order, to u: the same SET NX on the same
// key, in the order's hash slot, committed with the rest of u.
func (s *Redis) AddFirstEnvelope(u Unit, envelope []byte) error {
	orderID := u.OrderID()
	if err := checkID("order", orderID); err != nil {
		return err
	}
	if len(envelope) == 0 {
		return fmt.Errorf("%w: empty envelope for order %q", ErrInvalidArgument, orderID)
	}
	u.SetIfAbsent(s.keys.envelope(orderID), envelope)
	return nil
}

// LoadFirst returns the order's first activation envelope, or ErrNotFound.
func (s *Redis) LoadFirst(ctx context.Context, orderID string) ([]byte, error) {
	if err := checkID("order", orderID); err != nil {
		return nil, err
	}
	b, err := s.rdb.Get(ctx, s.keys.envelope(orderID)).Bytes()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("%w: envelope of order %q", ErrNotFound, orderID)
		}
		return nil, translate(err)
	}
	return b, nil
}

// claimOpID binds an operation id to its order, first binding wins. It is
// outside putOp because the index key lives in the operation id's slot.
var claimOpID = redis.NewScript(`#!lua
local cur = redis.call('GET', KEYS[1])
if cur then
  if cur == ARGV[1] then return 1 end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

// putOp writes one operation record and its place in the order's list.
// KEYS: op hash, ops zset. ARGV: id, orderId, source, target, generation,
// state, error, startedAt, updatedAt, kind, newGeneration, member, caller.
// A final record is frozen: repeating the same final state with the same
// source, target and generation is accepted unchanged (a retried commit);
// anything else is refused. An operation never changes its kind.
// startedAt and the list position come from the first write only.
var putOp = redis.NewScript(`#!lua
local cur = redis.call('HMGET', KEYS[1], 'state', 'orderId', 'source', 'target', 'generation', 'startedAt', 'kind')
local started = ARGV[8]
if cur[1] then
  if cur[2] ~= ARGV[2] then return 'order' end
  if (cur[7] or '') ~= ARGV[10] then return 'kind' end
  if cur[1] == 'committed' or cur[1] == 'aborted' then
    if cur[1] == ARGV[6] and cur[3] == ARGV[3] and cur[4] == ARGV[4] and cur[5] == ARGV[5] then
      return 'unchanged'
    end
    return 'final'
  end
  started = cur[6]
end
redis.call('HSET', KEYS[1],
  'id', ARGV[1], 'orderId', ARGV[2], 'source', ARGV[3], 'target', ARGV[4],
  'generation', ARGV[5], 'state', ARGV[6], 'error', ARGV[7],
  'startedAt', started, 'updatedAt', ARGV[9])
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'kind', ARGV[10], 'newGeneration', ARGV[11], 'member', ARGV[12], 'caller', ARGV[13])
end
redis.call('ZADD', KEYS[2], 'NX', started, ARGV[1])
return 'ok'
`)

// PutOperation creates op or updates the stored record with its fields.
// StartedAtUnixMs is taken from the first write. It fails with ErrConflict
// when the operation id already belongs to another order, or when the
// stored record is final and op would change its state (or its source,
// target or generation); repeating a final write unchanged succeeds, so a
// retried commit is harmless.
func (s *Redis) PutOperation(ctx context.Context, op Operation) error {
	if err := checkID("order", op.OrderID); err != nil {
		return err
	}
	if err := checkID("operation", op.ID); err != nil {
		return err
	}
	if !op.State.valid() {
		return fmt.Errorf("%w: operation %q state %q", ErrInvalidArgument, op.ID, op.State)
	}
	if !op.Kind.valid() {
		return fmt.Errorf("%w: operation %q kind %q", ErrInvalidArgument, op.ID, op.Kind)
	}
	if op.Generation < 0 || op.NewGeneration < 0 {
		return fmt.Errorf("%w: operation %q generation %d, new generation %d", ErrInvalidArgument, op.ID, op.Generation, op.NewGeneration)
	}
	ok, err := claimOpID.Run(ctx, s.rdb, []string{s.keys.opIndex(op.ID)}, op.OrderID).Int()
	if err != nil {
		return translate(err)
	}
	if ok != 1 {
		return fmt.Errorf("%w: operation %q belongs to another order than %q", ErrConflict, op.ID, op.OrderID)
	}
	res, err := putOp.Run(ctx, s.rdb, []string{s.keys.op(op.OrderID, op.ID), s.keys.ops(op.OrderID)},
		op.ID, op.OrderID, op.Source, op.Target, op.Generation, string(op.State), op.Error,
		op.StartedAtUnixMs, op.UpdatedAtUnixMs, string(op.Kind), op.NewGeneration, op.Member, op.Caller).Text()
	if err != nil {
		return translate(err)
	}
	switch res {
	case "ok", "unchanged":
		return nil
	case "final":
		return fmt.Errorf("%w: operation %q of order %q is final", ErrConflict, op.ID, op.OrderID)
	case "kind":
		return fmt.Errorf("%w: operation %q of order %q is of another kind than %q", ErrConflict, op.ID, op.OrderID, op.Kind)
	default:
		return fmt.Errorf("%w: operation %q is recorded for another order than %q", ErrConflict, op.ID, op.OrderID)
	}
}

// GetOperation returns the operation with that id, or ErrNotFound.
func (s *Redis) GetOperation(ctx context.Context, id string) (Operation, error) {
	if err := checkID("operation", id); err != nil {
		return Operation{}, err
	}
	orderID, err := s.rdb.Get(ctx, s.keys.opIndex(id)).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return Operation{}, fmt.Errorf("%w: operation %q", ErrNotFound, id)
		}
		return Operation{}, translate(err)
	}
	m, err := s.rdb.HGetAll(ctx, s.keys.op(orderID, id)).Result()
	if err != nil {
		return Operation{}, translate(err)
	}
	if len(m) == 0 {
		// The id was claimed but the record write never landed.
		return Operation{}, fmt.Errorf("%w: operation %q", ErrNotFound, id)
	}
	return operationFrom(m), nil
}

// Operations returns every operation of the order, oldest first (by
// StartedAtUnixMs, ties by id). An order without operations gives none.
func (s *Redis) Operations(ctx context.Context, orderID string) ([]Operation, error) {
	if err := checkID("order", orderID); err != nil {
		return nil, err
	}
	ids, err := s.rdb.ZRange(ctx, s.keys.ops(orderID), 0, -1).Result()
	if err != nil {
		return nil, translate(err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.keys.op(orderID, id))
		}
		return nil
	})
	if err != nil {
		return nil, translate(err)
	}
	ops := make([]Operation, 0, len(ids))
	for _, c := range cmds {
		// The script writes hash and list together, so an entry without a
		// hash cannot occur; skipping keeps a hand-edited store readable.
		if m := c.Val(); len(m) > 0 {
			ops = append(ops, operationFrom(m))
		}
	}
	return ops, nil
}

// OpenOperation returns the order's latest operation that is not final, of
// any kind, so an interrupted relocation or takeover can be found and
// repeated to completion. ok is
// false when every operation has ended or there is none.
func (s *Redis) OpenOperation(ctx context.Context, orderID string) (Operation, bool, error) {
	ops, err := s.Operations(ctx, orderID)
	if err != nil {
		return Operation{}, false, err
	}
	for i := len(ops) - 1; i >= 0; i-- {
		if !ops[i].State.Final() {
			return ops[i], true, nil
		}
	}
	return Operation{}, false, nil
}

func operationFrom(m map[string]string) Operation {
	gen, _ := strconv.ParseInt(m["generation"], 10, 64)
	newGen, _ := strconv.ParseInt(m["newGeneration"], 10, 64)
	started, _ := strconv.ParseInt(m["startedAt"], 10, 64)
	updated, _ := strconv.ParseInt(m["updatedAt"], 10, 64)
	return Operation{
		ID:              m["id"],
		OrderID:         m["orderId"],
		Kind:            OpKind(m["kind"]),
		Source:          m["source"],
		Target:          m["target"],
		Generation:      gen,
		NewGeneration:   newGen,
		Member:          m["member"],
		Caller:          m["caller"],
		State:           OpState(m["state"]),
		Error:           m["error"],
		StartedAtUnixMs: started,
		UpdatedAtUnixMs: updated,
	}
}

// Forgetting is the part of an order's compaction (eventstore.Compaction,
// which this store does not import) that a finished order's keys leave
// in.
type Forgetting interface {
	// OrderID is the order the compaction removes.
	OrderID() string
	// Delete adds the removal of key.
	Delete(key string)
}

// AddForget adds the removal of the compaction's order's keys in its slot
// to c: its first envelope, its operations and their list. It returns the
// operations' ids, whose index entries (each in its id's slot) go with
// ForgetOperations once c is committed.
func (s *Redis) AddForget(ctx context.Context, c Forgetting) ([]string, error) {
	orderID := c.OrderID()
	if err := checkID("order", orderID); err != nil {
		return nil, err
	}
	ids, err := s.rdb.ZRange(ctx, s.keys.ops(orderID), 0, -1).Result()
	if err != nil {
		return nil, translate(err)
	}
	c.Delete(s.keys.envelope(orderID))
	c.Delete(s.keys.ops(orderID))
	for _, id := range ids {
		c.Delete(s.keys.op(orderID, id))
	}
	return ids, nil
}

// ForgetOperations drops the index entries of operation ids, whose order
// was forgotten (AddForget).
func (s *Redis) ForgetOperations(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.keys.opIndex(id)
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, k)
		}
		return nil
	})
	return translate(err)
}
