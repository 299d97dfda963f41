package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Projection is another store's record that a Unit writes in the
// same atomic step as the append. Its owner names the key and both
// fields; this package applies only the guard stated here, which the
// owner's own writes of the record must share: the hash at Key gets
// VersionField = Version and StateField = State, unless VersionField
// already holds a number greater than Version (a value that is not a
// number is damage and does not block the write). Key must carry the
// order's hash tag, so the step stays one script on one Redis Cluster
// slot.
//
// Notify, when set, is a shard channel on which the same step publishes
// NotifyMessage (SPUBLISH) if, and only if, it wrote the record: the
// owner's notice of its own write, which a subscriber can only hear once
// the record is readable. It must carry the order's hash tag, as Key
// does: a shard channel belongs to a slot, and only the order's own lets
// the step stay one script on a Redis Cluster. What the notice means is
// the owner's business.
//
// Index, when set, is a sorted-set entry of the owner's that the same
// step updates once the append passed its checks, whether or not the
// guard let the record be written: IndexAdd adds Member with Score
// unless a greater score is stored (ZADD GT), IndexRemove drops it. Its
// key need not carry the order's hash tag, so only an owner whose client
// talks to one server (not a Redis Cluster, not a ring) may set it:
// Commit refuses it otherwise.
type Projection struct {
	Key          string
	VersionField string
	StateField   string
	// Version is the stream version the record reflects: the unit's
	// (Unit.Project sets it).
	Version       int64
	State         []byte
	Notify        string
	NotifyMessage string
	Index         IndexEntry
}

// Companion is a third store's write that rides in a Unit's
// step once the append passed its checks, whether or not the guard let
// the record be written, so that a step spanning three stores is still
// one atomic round trip. Its owner names the key and the values; this
// package only runs the op. A companion whose key's hash tag is the
// order's id (…{<orderId>}…) shares the order's slot and rides on every
// client, a Redis Cluster's included; any other key only on a client
// that talks to one server: Commit refuses it otherwise,
// before anything is sent.
//
// A Require companion is the other way round: a condition of another
// store's that the step checks before anything else, so that the append
// and every companion land only while that store says they may.
type Companion struct {
	Op  CompanionOp
	Key string
	// Value is what SetIfAbsent stores, what HashSetIf and HashSet write
	// to Field, what ListPushCapped pushes, what SetAdd adds, and what
	// Require wants the key to hold.
	Value []byte
	// Field is the hash field of HashSetIf, HashSet and HashDelete;
	// IfField and IfValue are HashSetIf's condition.
	Field, IfField, IfValue string
	// Cap is how many entries ListPushCapped keeps, the newest.
	Cap int
}

// CompanionOp is what a Companion does to its key.
type CompanionOp uint8

const (
	// CompanionNone is an invalid op: a companion must say what it does.
	CompanionNone CompanionOp = iota
	// SetIfAbsent stores Value at Key unless the key exists (SET NX): the
	// first write wins, a later one is no error and changes nothing.
	SetIfAbsent
	// HashSetIf sets Field to Value in the hash at Key if, and only if,
	// its IfField holds IfValue; otherwise nothing is written and the
	// companion reports not applied.
	HashSetIf
	// HashSet sets Field to Value in the hash at Key.
	HashSet
	// HashDelete removes Field from the hash at Key.
	HashDelete
	// Delete removes Key.
	Delete
	// ListPushCapped appends Value to the list at Key and trims the list
	// to its Cap newest entries.
	ListPushCapped
	// SetAdd adds Value to the set at Key.
	SetAdd
	// SortedSetAdd adds Value to the sorted set at Key with the score in
	// Field (a decimal), or sets the score of a member already there.
	SortedSetAdd
	// Require writes nothing: the step goes on only if the string at Key
	// holds Value, and otherwise fails with ErrPrecondition before any
	// other check, so that nothing at all is written. It counts as
	// applied whenever the step's checks passed.
	Require
)

// luaOp is the op as appendProjectedScript reads it.
func (o CompanionOp) luaOp() string {
	switch o {
	case SetIfAbsent:
		return "setnx"
	case HashSetIf:
		return "hsetif"
	case HashSet:
		return "hset"
	case HashDelete:
		return "hdel"
	case Delete:
		return "del"
	case ListPushCapped:
		return "rpushcap"
	case SetAdd:
		return "sadd"
	case SortedSetAdd:
		return "zadd"
	case Require:
		return "require"
	}
	return ""
}

// valid tells whether c carries what its op needs.
func (c Companion) valid() bool {
	switch {
	case c.Key == "" || c.Op.luaOp() == "":
		return false
	case c.Op == HashSetIf:
		return c.Field != "" && c.IfField != ""
	case c.Op == HashSet || c.Op == HashDelete || c.Op == SortedSetAdd:
		return c.Field != ""
	case c.Op == ListPushCapped:
		return c.Cap > 0
	}
	return true
}

// ifValue is the companion's last script argument: HashSetIf's
// condition, or ListPushCapped's cap.
func (c Companion) ifValue() string {
	if c.Op == ListPushCapped {
		return strconv.Itoa(c.Cap)
	}
	return c.IfValue
}

// IndexEntry is Projection.Index; the zero value updates nothing.
type IndexEntry struct {
	Op     IndexOp
	Key    string
	Member string
	Score  int64
}

// IndexOp is what IndexEntry does to its sorted set.
type IndexOp uint8

const (
	// IndexNone leaves every sorted set alone.
	IndexNone IndexOp = iota
	// IndexAdd adds the member, keeping the greater of both scores.
	IndexAdd
	// IndexRemove drops the member.
	IndexRemove
)

// luaOp is the op as appendProjectedScript reads it.
func (o IndexOp) luaOp() string {
	switch o {
	case IndexAdd:
		return "add"
	case IndexRemove:
		return "rem"
	}
	return ""
}

// projectedArgs is how many ARGV precede the companions in
// appendProjectedScript: appendScript's, then versionField, stateField,
// version, state, notify channel (empty: none), notify message, index op
// ("", add, rem), index member, index score, companion count. Each
// companion adds companionArgs more (op, value, field, ifField, ifValue)
// before the events.
const (
	projectedArgs = appendArgs + 10
	companionArgs = 5
)

// appendProjectedScript is the Require companions' checks, appendLua,
// then the caller's projection under the Projection guard, then its index
// entry, then its companions. Nothing is written when a check fails.
// HashSet companions in a row on one key are one HSET (a Ready record's
// five fields, one command instead of five); each still reports applied.
//
// KEYS: stream, fence, cmds, projection, one per companion[, index].
// Reply: {0, newVersion, applied}, {4, key} for a failed Require, or
// appendLua's; applied has a '1' or a '0' per companion.
var appendProjectedScript = redis.NewScript(`#!lua
local base = ` + strconv.Itoa(projectedArgs) +
	` + ` + strconv.Itoa(companionArgs) + ` * tonumber(ARGV[` + strconv.Itoa(projectedArgs) + `])
for i = 0, tonumber(ARGV[14]) - 1 do
  local a = 15 + i * 5
  if ARGV[a] == 'require' and redis.call('GET', KEYS[5 + i]) ~= ARGV[a + 1] then
    return {4, KEYS[5 + i]}
  end
end` + appendLua + `
local cur = tonumber(redis.call('HGET', KEYS[4], ARGV[5]))
if not cur or cur <= tonumber(ARGV[7]) then
  redis.call('HSET', KEYS[4], ARGV[5], ARGV[7], ARGV[6], ARGV[8])
  if ARGV[9] ~= '' then
    redis.call('SPUBLISH', ARGV[9], ARGV[10])
  end
end
local nc = tonumber(ARGV[14])
if ARGV[11] == 'add' then
  redis.call('ZADD', KEYS[5 + nc], 'GT', ARGV[13], ARGV[12])
elseif ARGV[11] == 'rem' then
  redis.call('ZREM', KEYS[5 + nc], ARGV[12])
end
local applied = ''
local i = 0
while i < nc do
  local a = 15 + i * 5
  local k, op = KEYS[5 + i], ARGV[a]
  local done = '1'
  if op == 'setnx' then
    redis.call('SET', k, ARGV[a + 1], 'NX')
  elseif op == 'hsetif' then
    if redis.call('HGET', k, ARGV[a + 3]) == ARGV[a + 4] then
      redis.call('HSET', k, ARGV[a + 2], ARGV[a + 1])
    else
      done = '0'
    end
  elseif op == 'hset' then
    local fv = {ARGV[a + 2], ARGV[a + 1]}
    while i + 1 < nc and ARGV[a + 5] == 'hset' and KEYS[6 + i] == k do
      i = i + 1
      a = a + 5
      fv[#fv + 1] = ARGV[a + 2]
      fv[#fv + 1] = ARGV[a + 1]
      applied = applied .. '1'
    end
    redis.call('HSET', k, unpack(fv))
  elseif op == 'hdel' then
    redis.call('HDEL', k, ARGV[a + 2])
  elseif op == 'del' then
    redis.call('DEL', k)
  elseif op == 'rpushcap' then
    local cap = tonumber(ARGV[a + 4])
    if redis.call('RPUSH', k, ARGV[a + 1]) > cap then
      redis.call('LTRIM', k, -cap, -1)
    end
  elseif op == 'sadd' then
    redis.call('SADD', k, ARGV[a + 1])
  elseif op == 'zadd' then
    redis.call('ZADD', k, ARGV[a + 2], ARGV[a + 1])
  end
  applied = applied .. done
  i = i + 1
end
return {0, version, applied}
`)

// appendProjectedWith is Commit's script: the append and proj, and the
// companions, in order, in the same script once the append's checks
// passed; applied
// tells, per companion, whether it wrote (SetIfAbsent always counts as
// applied: its key holds the first write either way). When a check fails
// no companion runs; a failed Require is ErrPrecondition, checked before
// the append's own checks. A companion outside the order's hash slot
// needs a single-server client (ErrConfig otherwise).
func (r *Redis) appendProjectedWith(ctx context.Context, orderID string, expectedVersion int64, fence Fence, events []Envelope, proj Projection, companions []Companion) (version int64, applied []bool, err error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return 0, nil, err
	}
	if want := expectedVersion + int64(len(events)); proj.Version != want {
		return 0, nil, fmt.Errorf("eventstore: append %s: projection of version %d, the append leads to %d", orderID, proj.Version, want)
	}
	if !strings.Contains(proj.Key, "{"+orderID+"}") {
		return 0, nil, fmt.Errorf("%w: projection key %q lacks the order's hash tag", ErrInvalidOrderID, proj.Key)
	}
	if proj.Notify != "" && HashTag(proj.Notify) != orderID {
		return 0, nil, fmt.Errorf("%w: notice channel %q is outside the order's hash slot", ErrInvalidOrderID, proj.Notify)
	}
	if proj.VersionField == "" || proj.StateField == "" || proj.VersionField == proj.StateField {
		return 0, nil, errors.New("eventstore: append " + orderID + ": projection needs two distinct field names")
	}
	keys := make([]string, 0, 5+len(companions))
	keys = append(keys, k.stream, k.fence, k.cmds, proj.Key)
	ix := proj.Index
	one := singleServer(r.client)
	if ix.Op != IndexNone && !one {
		return 0, nil, fmt.Errorf("%w: append %s: an index entry in the append needs a single-server client, not %T", ErrConfig, orderID, r.client)
	}
	compArgs := make([]any, 0, companionArgs*len(companions))
	for i, c := range companions {
		if !c.valid() {
			return 0, nil, fmt.Errorf("eventstore: append %s: companion %d needs an op, a key and what its op uses (fields, a cap)", orderID, i)
		}
		if !one && HashTag(c.Key) != orderID {
			return 0, nil, fmt.Errorf("%w: append %s: companion %d's key %q is outside the order's hash slot, which only a single-server client may write in the append, not %T", ErrConfig, orderID, i, c.Key, r.client)
		}
		keys = append(keys, c.Key)
		compArgs = append(compArgs, c.Op.luaOp(), c.Value, c.Field, c.IfField, c.ifValue())
	}
	if ix.Op != IndexNone {
		if ix.Key == "" || ix.Member == "" || ix.Op.luaOp() == "" {
			return 0, nil, fmt.Errorf("eventstore: append %s: index entry needs an op, a key and a member", orderID)
		}
		keys = append(keys, ix.Key)
	}
	args := make([]any, 0, projectedArgs+len(compArgs)+6*len(events))
	args = append(args, expectedVersion, fence.Generation, fence.Epoch, orderID,
		proj.VersionField, proj.StateField, proj.Version, proj.State, proj.Notify, proj.NotifyMessage,
		ix.Op.luaOp(), ix.Member, ix.Score, len(companions))
	args = append(args, compArgs...)
	if args, err = appendEvents(args, orderID, events); err != nil {
		return 0, nil, err
	}
	reply, err := r.runAppendReply(ctx, appendProjectedScript, keys, args, orderID, expectedVersion, fence)
	if err != nil {
		return 0, nil, err
	}
	version, err = replyInt(reply, 1)
	if err != nil {
		return 0, nil, fmt.Errorf("eventstore: append %s: %w", orderID, err)
	}
	if len(companions) == 0 {
		return version, nil, nil
	}
	if len(events) == 0 {
		// An empty batch ends the script before anything is written.
		return version, make([]bool, len(companions)), nil
	}
	flags, _ := reply[len(reply)-1].(string)
	if len(reply) < 3 || len(flags) != len(companions) {
		// The append landed; only the companions' report is unreadable.
		return version, make([]bool, len(companions)), fmt.Errorf("%w: append %s: companion report %v", ErrCorrupt, orderID, reply)
	}
	applied = make([]bool, len(companions))
	for i := range companions {
		applied[i] = flags[i] == '1'
	}
	return version, applied, nil
}

// HashTag is the part of key that Redis Cluster hashes to find its slot:
// the text between the first "{" and the first "}" after it, when that
// is not empty, else the whole key. Keys with the same tag share a slot,
// so one script may write them on a Redis Cluster.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// singleServer reports whether every key the client names lives on one
// server, so that a script may touch keys of different hash slots.
func singleServer(c redis.UniversalClient) bool {
	_, ok := c.(*redis.Client)
	return ok
}

// SingleServer reports whether the store's client talks to one server (a
// plain client, not a Redis Cluster or a ring): only then may a
// Projection carry an Index entry, or a companion a key outside the
// order's hash slot.
func (r *Redis) SingleServer() bool { return singleServer(r.client) }
