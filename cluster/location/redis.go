package location

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Config configures the Redis Location Store.
type Config struct {
	// Client is required.
	Client redis.UniversalClient
	// KeyPrefix separates the Location Store's keyspace; "" means
	// DefaultKeyPrefix. It must differ from the Relocation Store's and
	// must not contain '{' or '}': the identity is the keys' hash tag.
	KeyPrefix string
	// Sealed, optional, names where the store that owns an identity's
	// state marks it sealed for good (eventstore.Redis.SealMark, for an
	// order archived or being archived): a hash key in the identity's
	// hash slot and a field. While that field exists no activation
	// begins: BeginCreate fails with ErrSealed, and a creation lock
	// another store's script takes (CreationFor) is not taken. ok false
	// marks nothing for that identity.
	Sealed func(kind, id string) (key, field string, ok bool)
}

// Redis is the Store on Redis (key layout: keys). Every mutation of a
// record is one Lua script on keys sharing the identity's hash tag, so it
// is atomic and valid on Redis Cluster.
type Redis struct {
	rdb    redis.UniversalClient
	keys   keys
	sealed func(kind, id string) (key, field string, ok bool)
}

var (
	_ Store         = (*Redis)(nil)
	_ OwnerReleaser = (*Redis)(nil)
)

// NewRedis returns a Location Store on cfg.Client, or an error wrapping
// ErrConfig when cfg has no client or a prefix with braces.
func NewRedis(cfg Config) (*Redis, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Config.Client is nil", ErrConfig)
	}
	k, err := newKeys(cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	return &Redis{rdb: cfg.Client, keys: k, sealed: cfg.Sealed}, nil
}

// sealMark returns the identity's seal mark (Config.Sealed), or false.
// A mark outside the identity's hash slot is refused: the scripts that
// read it run on that slot alone.
func (s *Redis) sealMark(kind, id string) (key, field string, ok bool, err error) {
	if s.sealed == nil {
		return "", "", false, nil
	}
	key, field, ok = s.sealed(kind, id)
	if !ok {
		return "", "", false, nil
	}
	if field == "" || !strings.Contains(key, "{"+id+"}") {
		return "", "", false, fmt.Errorf("%w: seal mark %q of %s is not in its hash slot", ErrConfig, key, id)
	}
	return key, field, true, nil
}

func checkIdentity(id string) error {
	if id == "" || strings.ContainsAny(id, "{}") {
		return fmt.Errorf("%w: identity %q", ErrInvalidIdentity, id)
	}
	return nil
}

// translate turns a vendor error into ours, once, at the edge.
func translate(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	if redis.HasErrorPrefix(err, "OOM") {
		// Refused whole under noeviction: nothing of the write applied.
		return fmt.Errorf("%w: %w: location store: %v", ErrStoreUnavailable, errkind.StoreFull, err)
	}
	return fmt.Errorf("%w: location store: %v", ErrStoreUnavailable, err)
}

// Get returns the identity's record; a never-seen identity is Missing with
// generation 0.
func (s *Redis) Get(ctx context.Context, kind, id string) (Record, error) {
	if err := checkIdentity(id); err != nil {
		return Record{}, err
	}
	m, err := s.rdb.HGetAll(ctx, s.keys.record(kind, id)).Result()
	if err != nil {
		return Record{}, translate(err)
	}
	return recordFrom(m), nil
}

func recordFrom(m map[string]string) Record {
	g, _ := strconv.ParseInt(m["generation"], 10, 64)
	return Record{
		Status:     Status(m["status"]),
		Owner:      m["owner"],
		PIDAddress: m["pidAddress"],
		PIDID:      m["pidId"],
		Generation: g,
		MoveOp:     m["moveOp"],
		TakenOver:  m[takenOverField] == "1",
	}
}

// takenOverField is the record's hash field of the TakenOver mark: set
// by resetTakenOver, deleted by commitReady.
const takenOverField = "takeover"

// beginCreate answers a Ready or Moving record as it stands, or takes the
// creation lock of a Missing identity (or of one whose creator died holding
// an expired lock) and answers the next generation: one round trip either
// way, so a cold call costs no separate read. An acquired lock answers
// the TakenOver mark too, so the creator knows its activation's cause.
//
// The record is read with one HMGET: every activation of every order runs
// this script, and each command inside it is Redis work.
var beginCreate = redis.NewScript(`#!lua
local r = redis.call('HMGET', KEYS[1], 'status', 'owner', 'pidAddress', 'pidId', 'generation', 'moveOp', 'takeover')
local st = r[1]
if st == 'Ready' or st == 'Moving' then
  return {st, r[2] or '', r[3] or '', r[4] or '', r[5] or '0', r[6] or ''}
end
if KEYS[3] and redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then return {'Sealed'} end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'Creating'} end
redis.call('HSET', KEYS[1], 'status', 'Creating')
local g = tonumber(r[5] or '0')
return {'acquired', tostring(g + 1), r[7] or ''}
`)

// BeginCreate tries to become the creator of a Missing identity. acquired
// reports success; next is then the generation to activate. Otherwise rec
// is the identity's record (Ready or Moving with its owner), or Creating
// while another caller holds the lock.
func (s *Redis) BeginCreate(ctx context.Context, kind, id, token string, ttl time.Duration) (acquired bool, next int64, rec Record, err error) {
	if err := checkIdentity(id); err != nil {
		return false, 0, Record{}, err
	}
	keys := []string{s.keys.record(kind, id), s.keys.lock(kind, id)}
	args := []any{token, ttl.Milliseconds()}
	mark, field, ok, err := s.sealMark(kind, id)
	if err != nil {
		return false, 0, Record{}, err
	}
	if ok {
		keys, args = append(keys, mark), append(args, field)
	}
	res, err := beginCreate.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err != nil {
		return false, 0, Record{}, translate(err)
	}
	switch res[0] {
	case "Sealed":
		return false, 0, Record{}, fmt.Errorf("%w: %s/%s", ErrSealed, kind, id)
	case "acquired":
		n, _ := strconv.ParseInt(res[1], 10, 64)
		return true, n, Record{Status: Creating, TakenOver: len(res) > 2 && res[2] == "1"}, nil
	case "Creating":
		return false, 0, Record{Status: Creating}, nil
	}
	if len(res) < 6 {
		return false, 0, Record{}, fmt.Errorf("%w: location record of %s: short reply", ErrStoreUnavailable, id)
	}
	g, _ := strconv.ParseInt(res[4], 10, 64)
	return false, 0, Record{Status: Status(res[0]), Owner: res[1], PIDAddress: res[2], PIDID: res[3], Generation: g, MoveOp: res[5]}, nil
}

// KEYS: record, lock, history. ARGV: token, owner, pidAddress, pidId,
// generation, nowUnixMs.
var commitReady = redis.NewScript("#!lua\n" + historyLua + `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'Ready', 'owner', ARGV[2], 'pidAddress', ARGV[3], 'pidId', ARGV[4], 'generation', ARGV[5])
redis.call('HDEL', KEYS[1], 'takeover')
redis.call('DEL', KEYS[2])
history(KEYS[3], 'activation', ARGV[2], ARGV[5], ARGV[6])
return 1
`)

// CommitReady records the activation as Ready, TakenOver mark cleared,
// if token still holds the creation lock. It fails with ErrLockLost
// otherwise. The owner's index
// entry (see Owned) goes out in the same round trip, just before.
func (s *Redis) CommitReady(ctx context.Context, kind, id, token string, rec Record) error {
	n, err := s.indexedEval(ctx, rec.Owner, kind, id, commitReady,
		[]string{s.keys.record(kind, id), s.keys.lock(kind, id), s.keys.history(kind, id)},
		token, rec.Owner, rec.PIDAddress, rec.PIDID, rec.Generation, nowUnixMs()).Int()
	if err != nil {
		return translate(err)
	}
	if n != 1 {
		return ErrLockLost
	}
	return nil
}

// KEYS: record, lock. ARGV: token, generation. Reply: 1 held, 0 lost.
var raiseCreating = redis.NewScript(`#!lua
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local g = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0')
if tonumber(ARGV[2]) > g then redis.call('HSET', KEYS[1], 'generation', ARGV[2]) end
return 1
`)

// RaiseCreating raises a Creating record's generation under its lock.
func (s *Redis) RaiseCreating(ctx context.Context, kind, id, token string, generation int64) error {
	if err := checkIdentity(id); err != nil {
		return err
	}
	n, err := raiseCreating.Run(ctx, s.rdb, []string{s.keys.record(kind, id), s.keys.lock(kind, id)}, token, generation).Int()
	if err != nil {
		return translate(err)
	}
	if n != 1 {
		return ErrLockLost
	}
	return nil
}

var abortCreate = redis.NewScript(`#!lua
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[1], 'status') == 'Creating' then redis.call('HDEL', KEYS[1], 'status') end
return 1
`)

// AbortCreate gives the creation lock back without using up a generation.
func (s *Redis) AbortCreate(ctx context.Context, kind, id, token string) error {
	return translate(abortCreate.Run(ctx, s.rdb, []string{s.keys.record(kind, id), s.keys.lock(kind, id)}, token).Err())
}

// release empties the authority fields; with discard it gives the
// generation back, and a record back at generation 0 is deleted, so an
// activation that found nothing to own (a probe for an unknown id) leaves
// no key behind: its history goes with it. It answers the owner it
// released, for the index, and 1 after it when it removed that owner's
// index entry itself: given KEYS[3], the index of the owner the caller
// expects (ARGV[5]), on one server, where the index key may share the
// script.
//
// KEYS: record, history[, owned index]. ARGV: pidId, discard ('1'),
// history kind, nowUnixMs[, expected owner, index entry].
var release = redis.NewScript("#!lua\n" + historyLua + `
local r = redis.call('HMGET', KEYS[1], 'status', 'pidId', 'owner', 'generation')
if r[1] ~= 'Ready' or r[2] ~= ARGV[1] then return {0} end
local owner = r[3] or ''
local g = tonumber(r[4] or '0')
redis.call('HDEL', KEYS[1], 'status', 'owner', 'pidAddress', 'pidId')
local unindexed = 0
if KEYS[3] and owner == ARGV[5] then
  redis.call('SREM', KEYS[3], ARGV[6])
  unindexed = 1
end
if ARGV[2] == '1' then
  if g > 1 then redis.call('HSET', KEYS[1], 'generation', g - 1) else redis.call('HDEL', KEYS[1], 'generation') end
  if g <= 1 then
    redis.call('DEL', KEYS[2])
    return {1, owner, unindexed}
  end
end
history(KEYS[2], ARGV[3], owner, g, ARGV[4])
return {1, owner, unindexed}
`)

// Release makes a Ready identity Missing if pidID is still its owner pid.
// The generation counter is kept, so the next activation is generation+1;
// with GiveBackGeneration (an activation that found nothing to own) the
// generation it took is given back, so an empty activation uses up no
// generation.
func (s *Redis) Release(ctx context.Context, kind, id, pidID string, gen Generation) (bool, error) {
	return s.ReleaseAt(ctx, kind, id, "", pidID, gen)
}

// ReleaseAt is Release by the member the caller expects to own the record
// (its own id, for a grain that passivates). On one server, where the
// owner's takeover index shares the script, the index entry goes in the
// same round trip when the record names that owner; otherwise, and on a
// Redis Cluster, it is removed after the script, as Release does.
func (s *Redis) ReleaseAt(ctx context.Context, kind, id, owner, pidID string, gen Generation) (bool, error) {
	d := "0"
	kindOf := releaseReason(ctx)
	if gen == GiveBackGeneration {
		d = "1"
		kindOf = OwnershipDiscarded
	}
	keys := []string{s.keys.record(kind, id), s.keys.history(kind, id)}
	args := []any{pidID, d, string(kindOf), nowUnixMs()}
	if owner != "" && s.SingleServer() {
		keys = append(keys, s.keys.owned(owner))
		args = append(args, owner, ownedEntry(kind, id))
	}
	res, err := release.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return false, translate(err)
	}
	if n, _ := res[0].(int64); n != 1 {
		return false, nil
	}
	if len(res) > 1 {
		released, _ := res[1].(string)
		var unindexed int64
		if len(res) > 2 {
			unindexed, _ = res[2].(int64)
		}
		if unindexed != 1 {
			s.unindex(ctx, released, kind, id)
		}
	}
	return true, nil
}

var extendCreate = redis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// ExtendCreate keeps the creation lock held by token for ttl from now. It
// fails with ErrLockLost when the lock expired or another caller holds it.
func (s *Redis) ExtendCreate(ctx context.Context, kind, id, token string, ttl time.Duration) error {
	n, err := extendCreate.Run(ctx, s.rdb, []string{s.keys.lock(kind, id)}, token, ttl.Milliseconds()).Int()
	if err != nil {
		return translate(err)
	}
	if n != 1 {
		return ErrLockLost
	}
	return nil
}

// KEYS: record, history. ARGV: owner, pidId, nowUnixMs.
var releaseDead = redis.NewScript("#!lua\n" + historyLua + `
if redis.call('HGET', KEYS[1], 'status') ~= 'Ready' or redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1]
   or redis.call('HGET', KEYS[1], 'pidId') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'status', 'owner', 'pidAddress', 'pidId')
history(KEYS[2], 'repair', ARGV[1], redis.call('HGET', KEYS[1], 'generation') or '0', ARGV[3])
return 1
`)

// ReleaseDead makes a Ready identity Missing if it still names pidID at
// owner (a member id). It is the repair of a record whose grain provably
// does not exist; the generation is kept, so the next activation fences
// whatever the dead one might have left.
func (s *Redis) ReleaseDead(ctx context.Context, kind, id, owner, pidID string) (bool, error) {
	if err := checkIdentity(id); err != nil {
		return false, err
	}
	n, err := releaseDead.Run(ctx, s.rdb, []string{s.keys.record(kind, id), s.keys.history(kind, id)},
		owner, pidID, nowUnixMs()).Int()
	if err != nil {
		return false, translate(err)
	}
	if n == 1 {
		s.unindex(ctx, owner, kind, id)
	}
	return n == 1, nil
}

var beginMove = redis.NewScript(`#!lua
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'Moving' and redis.call('HGET', KEYS[1], 'moveOp') == ARGV[2] then
  return tonumber(redis.call('HGET', KEYS[1], 'generation'))
end
if st ~= 'Ready' or redis.call('HGET', KEYS[1], 'pidId') ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[1], 'status', 'Moving', 'moveOp', ARGV[2])
return tonumber(redis.call('HGET', KEYS[1], 'generation'))
`)

// BeginMove marks a Ready identity owned by pidID as Moving under opID and
// returns its generation. Repeating it with the same opID is a no-op.
func (s *Redis) BeginMove(ctx context.Context, kind, id, pidID, opID string) (int64, error) {
	g, err := beginMove.Run(ctx, s.rdb, []string{s.keys.record(kind, id)}, pidID, opID).Int64()
	if err != nil {
		return 0, translate(err)
	}
	if g < 0 {
		return 0, fmt.Errorf("%w: %s is not Ready at this owner", ErrNotOwner, id)
	}
	return g, nil
}

// commitMove answers the source owner it replaced, for the index (an empty
// string on a repeat). A repeat records no second history entry.
//
// KEYS: record, history. ARGV: opId, owner, pidAddress, pidId, nowUnixMs.
var commitMove = redis.NewScript("#!lua\n" + historyLua + `
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'Ready' and redis.call('HGET', KEYS[1], 'pidId') == ARGV[4] then return {1, ''} end
if st ~= 'Moving' or redis.call('HGET', KEYS[1], 'moveOp') ~= ARGV[1] then return {0} end
local source = redis.call('HGET', KEYS[1], 'owner') or ''
redis.call('HSET', KEYS[1], 'status', 'Ready', 'owner', ARGV[2], 'pidAddress', ARGV[3], 'pidId', ARGV[4])
redis.call('HDEL', KEYS[1], 'moveOp')
history(KEYS[2], 'relocation', ARGV[2], redis.call('HGET', KEYS[1], 'generation') or '0', ARGV[5])
return {1, source}
`)

// CommitMove makes the target the Ready owner, generation unchanged.
// Repeating it after success is a no-op. The target's index entry goes
// out in the same round trip; the source's is dropped after.
func (s *Redis) CommitMove(ctx context.Context, kind, id, opID string, target Record) error {
	res, err := s.indexedEval(ctx, target.Owner, kind, id, commitMove, []string{s.keys.record(kind, id), s.keys.history(kind, id)},
		opID, target.Owner, target.PIDAddress, target.PIDID, nowUnixMs()).Slice()
	if err != nil {
		return translate(err)
	}
	if n, _ := res[0].(int64); n != 1 {
		return fmt.Errorf("%w: move %s of %s is not in progress", ErrNotOwner, opID, id)
	}
	if source, _ := res[1].(string); source != "" && source != target.Owner {
		s.unindex(ctx, source, kind, id)
	}
	return nil
}

var abortMove = redis.NewScript(`#!lua
if redis.call('HGET', KEYS[1], 'status') ~= 'Moving' or redis.call('HGET', KEYS[1], 'moveOp') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', 'Ready')
redis.call('HDEL', KEYS[1], 'moveOp')
return 1
`)

// AbortMove returns a Moving identity to Ready at its source owner. Only
// valid before the target activated: after that the source is fenced and the
// move must be completed instead.
func (s *Redis) AbortMove(ctx context.Context, kind, id, opID string) error {
	return translate(abortMove.Run(ctx, s.rdb, []string{s.keys.record(kind, id)}, opID).Err())
}

// MemberNames returns the whole member id → node name mapping.
func (s *Redis) MemberNames(ctx context.Context) (map[string]string, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.members()).Result()
	return m, translate(err)
}
