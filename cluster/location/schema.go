package location

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// The schema side of the member record and the cluster-wide compatibility
// level: what event schema each member reads, and the newest schema
// writers may stamp. The rules that use them (who may raise the level,
// when, and what a writer stamps) live in cluster/compat; this file only
// keeps them.

// BaseSchema is the level of a cluster whose level was never raised, and
// what a workflow member that advertises nothing reads: the first event
// schema, which every build reads.
const BaseSchema = 1

// schemaHistoryCap bounds the level's history: raises are rare, operator
// made, and the newest are what an operator asks about.
const schemaHistoryCap = 100

var (
	// ErrSchemaLevelLower: a raise to a level below the current one. The
	// level never drops: an order may hold events of the higher schema,
	// which a writer at the lower level's members could not read.
	ErrSchemaLevelLower = errkind.New(errkind.FailedPrecondition, "location: the compatibility level never drops")
	// ErrInvalidSchema: a schema version below BaseSchema.
	ErrInvalidSchema = errkind.New(errkind.InvalidArgument, "location: invalid schema version")
)

// SchemaLevel is the cluster-wide compatibility level and its last
// change: who raised it, when, and whether it rose by itself.
type SchemaLevel struct {
	// Level is the newest event schema writers may stamp; BaseSchema
	// when it was never raised.
	Level int `json:"level"`
	// RaisedBy names who raised it ("" before the first raise): an
	// operator's name for an operator raise, the member's node name for
	// a raise by itself.
	RaisedBy string `json:"raisedBy,omitempty"`
	// RaisedAtUnixMs is when, by the raiser's clock.
	RaisedAtUnixMs int64 `json:"raisedAtUnixMs,omitempty"`
	// Auto: the level rose by itself (every live workflow member read
	// it), not by an operator's command.
	Auto bool `json:"auto,omitempty"`
	// From is the level before this change (0 before the first raise).
	From int `json:"from,omitempty"`
}

// SchemaLevels keeps the compatibility level. Members advertise what they
// read through Members.PutMember.
type SchemaLevels interface {
	// SchemaLevel returns the current level: Level BaseSchema and nothing
	// else when it was never raised.
	SchemaLevel(ctx context.Context) (SchemaLevel, error)
	// RaiseSchemaLevel sets the level to to.Level, recording to as its
	// last change (From is filled in), in one atomic step, if to.Level
	// is above the current level: raised true. A raise to the current
	// level changes nothing and returns it with raised false, so a
	// repeated command is harmless. A raise below it fails with
	// ErrSchemaLevelLower and the current level; to.Level below
	// BaseSchema fails with ErrInvalidSchema. Checking that the members
	// read to.Level is the caller's.
	RaiseSchemaLevel(ctx context.Context, to SchemaLevel) (cur SchemaLevel, raised bool, err error)
	// SchemaLevelHistory returns the level's changes, newest first, at
	// most the newest 100.
	SchemaLevelHistory(ctx context.Context) ([]SchemaLevel, error)
}

// raiseSchemaLevel: KEYS level, history. ARGV level, record (a JSON
// object without "from", which the script appends: the level it replaces,
// read in the same step), cap.
// Returns {outcome, current record}: 1 raised, 0 same level, -1 lower.
var raiseSchemaLevel = redis.NewScript(`#!lua
local cur = redis.call('GET', KEYS[1])
local level = 1
if cur then level = tonumber(cjson.decode(cur)['level']) end
local to = tonumber(ARGV[1])
if to < level then return {-1, cur or ''} end
if to == level then return {0, cur or ''} end
local enc = string.sub(ARGV[2], 1, -2) .. ',"from":' .. level .. '}'
redis.call('SET', KEYS[1], enc)
redis.call('LPUSH', KEYS[2], enc)
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
return {1, enc}
`)

// SchemaLevel returns the current compatibility level.
func (s *Redis) SchemaLevel(ctx context.Context) (SchemaLevel, error) {
	v, err := s.rdb.Get(ctx, s.keys.schemaLevel()).Result()
	if errors.Is(err, redis.Nil) {
		return SchemaLevel{Level: BaseSchema}, nil
	}
	if err != nil {
		return SchemaLevel{}, translate(err)
	}
	return decodeSchemaLevel(v)
}

// RaiseSchemaLevel raises the level to to.Level when that is above it.
func (s *Redis) RaiseSchemaLevel(ctx context.Context, to SchemaLevel) (SchemaLevel, bool, error) {
	if to.Level < BaseSchema {
		return SchemaLevel{}, false, fmt.Errorf("%w: %d", ErrInvalidSchema, to.Level)
	}
	to.From = 0 // omitted; the script adds it
	b, err := json.Marshal(to)
	if err != nil {
		return SchemaLevel{}, false, fmt.Errorf("location: encode schema level: %w", err)
	}
	res, err := raiseSchemaLevel.Run(ctx, s.rdb, []string{s.keys.schemaLevel(), s.keys.schemaHistory()},
		to.Level, string(b), schemaHistoryCap).Slice()
	if err != nil {
		return SchemaLevel{}, false, translate(err)
	}
	outcome, _ := res[0].(int64)
	raw, _ := res[1].(string)
	now := SchemaLevel{Level: BaseSchema}
	if raw != "" {
		if now, err = decodeSchemaLevel(raw); err != nil {
			return SchemaLevel{}, false, err
		}
	}
	switch outcome {
	case 1:
		return now, true, nil
	case 0:
		return now, false, nil
	default:
		return now, false, fmt.Errorf("%w: it is %d, a raise to %d was asked", ErrSchemaLevelLower, now.Level, to.Level)
	}
}

// SchemaLevelHistory returns the level's changes, newest first.
func (s *Redis) SchemaLevelHistory(ctx context.Context) ([]SchemaLevel, error) {
	vs, err := s.rdb.LRange(ctx, s.keys.schemaHistory(), 0, schemaHistoryCap-1).Result()
	if err != nil {
		return nil, translate(err)
	}
	out := make([]SchemaLevel, 0, len(vs))
	for _, v := range vs {
		l, err := decodeSchemaLevel(v)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func decodeSchemaLevel(v string) (SchemaLevel, error) {
	var l SchemaLevel
	if err := json.Unmarshal([]byte(v), &l); err != nil || l.Level < BaseSchema {
		return SchemaLevel{}, fmt.Errorf("location: schema level record %q is not one this store wrote", v)
	}
	return l, nil
}

// PutMember publishes member id → node name and, for a member that hosts
// orders, the newest event schema it reads, in one atomic step.
func (s *Redis) PutMember(ctx context.Context, memberID, node string, schema int) error {
	if memberID == "" {
		return fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	if schema < 0 {
		return fmt.Errorf("%w: %d", ErrInvalidSchema, schema)
	}
	return translate(putMember.Run(ctx, s.rdb, []string{s.keys.members(), s.keys.memberSchemas()}, memberID, node, schema).Err())
}

// putMember: KEYS names, schemas. ARGV member id, node, schema (0: none).
// A script, not MULTI: a replicated deployment's WAIT follows a script's
// writes, and refuses a transaction's.
var putMember = redis.NewScript(`#!lua
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
`)

// forgetMember: KEYS names, schemas. ARGV member id.
var forgetMember = redis.NewScript(`#!lua
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
`)

// MemberSchemas returns member id → the newest event schema it reads, for
// every member that advertised one.
func (s *Redis) MemberSchemas(ctx context.Context) (map[string]int, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.memberSchemas()).Result()
	if err != nil {
		return nil, translate(err)
	}
	out := make(map[string]int, len(m))
	for id, v := range m {
		n, err := strconv.Atoi(v)
		if err != nil || n < BaseSchema {
			return nil, fmt.Errorf("location: member %s advertises schema %q, which no build writes", id, v)
		}
		out[id] = n
	}
	return out, nil
}
