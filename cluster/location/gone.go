package location

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A member is "gone" once a member saw it leave the topology and, its
// heartbeat being stale (below), recorded that in the Location Store. protoactor blocks a member id for
// good once it put it in a topology's Left, but only in the view of the
// members that saw it; the record makes the verdict the same everywhere:
// every lookup answers Unavailable for the gone member's orders, even one
// that still sees it live, and the gone member itself learns of it and
// fences itself (see package placement). The record is never undone: a member comes
// back only as a new incarnation with a new member id.

// GoneMember is the record that a member left the topology. The first
// record of a member id wins; later observations do not move LeftAtUnixMs.
type GoneMember struct {
	MemberID string `json:"-"`
	// Node is the node name the member published, empty if it never did.
	Node string `json:"node"`
	// LeftAtUnixMs is when the recording member saw it leave.
	LeftAtUnixMs int64 `json:"leftAtUnixMs"`
	// Pruned: no record says so any more; the member's name was pruned
	// with its record (PruneMember), which tells a paused member that it
	// is gone.
	Pruned bool `json:"-"`
}

// translateGone is translate, keeping a closed client recognisable so a
// background loop of a member that was stopped ends quietly.
func translateGone(err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrStoreUnavailable, ErrClosed)
	}
	return translate(err)
}

// markGone: KEYS gone, heartbeat. ARGV member id, record, version field.
var markGone = redis.NewScript(`#!lua
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
  return 1
end
return 0
`)

// MarkGone records that memberID (node name node, possibly empty) left
// the topology at leftAtUnixMs. The first record of a member id wins and
// is never changed: won reports whether this call wrote it. Repeating it
// is harmless.
func (s *Redis) MarkGone(ctx context.Context, memberID, node string, leftAtUnixMs int64) (won bool, err error) {
	if memberID == "" {
		return false, fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	v, err := json.Marshal(GoneMember{Node: node, LeftAtUnixMs: leftAtUnixMs})
	if err != nil {
		return false, err
	}
	n, err := markGone.Run(ctx, s.rdb, []string{s.keys.gone(), s.keys.heartbeat()}, memberID, string(v), goneVersion).Int()
	if err != nil {
		return false, translateGone(err)
	}
	return n == 1, nil
}

// Gone returns every member recorded gone, by member id.
func (s *Redis) Gone(ctx context.Context) (map[string]GoneMember, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.gone()).Result()
	if err != nil {
		return nil, translateGone(err)
	}
	out := make(map[string]GoneMember, len(m))
	for id, v := range m {
		out[id] = goneFrom(id, v)
	}
	return out, nil
}

// IsGone returns memberID's gone record, if there is one.
func (s *Redis) IsGone(ctx context.Context, memberID string) (GoneMember, bool, error) {
	v, err := s.rdb.HGet(ctx, s.keys.gone(), memberID).Result()
	if errors.Is(err, redis.Nil) {
		return GoneMember{}, false, nil
	}
	if err != nil {
		return GoneMember{}, false, translateGone(err)
	}
	return goneFrom(memberID, v), true, nil
}

// GoneVersion changes whenever the gone records do: every record written
// and every one pruned (PruneMember) adds one to it, in the script that
// does it. A changed version is how a lookup learns, in one cheap
// command, that it must read them again; a count would not do once
// records are pruned (one pruned and one added leave it as it was).
func (s *Redis) GoneVersion(ctx context.Context) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.keys.heartbeat(), goneVersion).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, translateGone(err)
}

// MemberName returns the node name memberID published, "" if none.
func (s *Redis) MemberName(ctx context.Context, memberID string) (string, error) {
	v, err := s.rdb.HGet(ctx, s.keys.members(), memberID).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, translateGone(err)
}

// goneFrom decodes a stored record. One that cannot be decoded still
// says the member is gone: its existence is the verdict.
func goneFrom(id, v string) GoneMember {
	var g GoneMember
	_ = json.Unmarshal([]byte(v), &g)
	g.MemberID = id
	return g
}

// Heartbeats. One observer's loss of sight is no evidence that a member is
// gone: a burst, a pause of the observer or a link cut between two pods
// looks the same from there. Each workflow member therefore keeps a
// heartbeat here, written by Redis' own clock (TIME, since pods' clocks
// drift) in the same round trip as its self-fence read of its gone record,
// and a member is recorded gone only when its heartbeat is older than the
// bound it published with it, judged by TIME inside the script that writes
// the record: the check and the mark are one atomic step, so a member that
// beat just now is never marked on a verdict read a moment earlier.
//
//	<prefix>heartbeat   hash: member id -> "<TIME in ms>:<bound in ms>"
//
// A member with no heartbeat at all (it died before its first probe, or it
// hosts nothing and never beats) is judged stale: the topology's verdict
// alone decides for it, as before heartbeats existed.
//
// A heartbeat's age counts time in which the member could not beat
// because the store itself was down, restarting (LOADING) or failing
// over: right after such an outage every member's heartbeat is "stale",
// and an observer that lost sight of a member then (a partition in the
// same minute) would record a live member gone. So the store keeps its
// own run of beats beside them, written by every beat:
//
//	"~up" -> "<since ms>:<last ms>"  the newest beat by any member (last)
//	                                 and when the current unbroken run of
//	                                 beats began (since): a beat that
//	                                 comes more than its bound after the
//	                                 last one starts a new run
//
// A stale heartbeat is acted on at once only while the store is steady:
// somebody beat within the member's bound, and the run is older than that
// bound, so the member had a whole bound of store time to beat and did
// not. Otherwise (a run that just began, or nobody beating: the store
// came back, or every member is down) the first stale verdict opens a
// window of one bound, kept in "~judge:<member id>" by Redis' clock, and
// only a heartbeat still stale when it has passed is recorded; a beat in
// between closes it. The cost is one bound's delay in recording a member
// gone when no other member beats, and none in the common case.

// HeartbeatVerdict is what MarkGoneIfStale found.
type HeartbeatVerdict struct {
	// Won: this call wrote the gone record.
	Won bool
	// Gone: the member is recorded gone (by this call or an earlier one).
	Gone bool
	// Fresh: the member's heartbeat is within its bound, so nothing was
	// written; Age is its age by Redis' clock and Bound the bound it
	// published.
	Fresh bool
	// Pending: the heartbeat is stale but the store is not steady (it
	// just came back, or nobody beats), so nothing was written yet: ask
	// again; it is recorded once it stays stale for Bound.
	Pending bool
	Age     time.Duration
	Bound   time.Duration
}

// Fields of the heartbeat hash that are not member ids (member ids never
// begin with "~").
const (
	heartbeatRun   = "~up"
	heartbeatJudge = "~judge:"
	// goneVersion is GoneVersion's counter, kept beside the heartbeats
	// because that hash shares the gone records' slot.
	goneVersion = "~gone"
)

// heartbeatLua is the heartbeat scripts' Redis clock in milliseconds and
// their reading of a "<a>:<b>" pair of numbers (nil, nil when the value
// is missing or not such a pair).
const heartbeatLua = `
local function nowMs()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
local function pair(v)
  if not v then return nil, nil end
  local sep = string.find(v, ':', 1, true)
  if not sep then return nil, nil end
  return tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
end
`

var probeSelf = redis.NewScript("#!lua\n" + heartbeatLua + `
local g = redis.call('HGET', KEYS[1], ARGV[1])
if g then return g end
if ARGV[2] ~= '' then
  local now = nowMs()
  local since = now
  local s0, last = pair(redis.call('HGET', KEYS[2], ARGV[3]))
  if s0 and last and now - last <= tonumber(ARGV[2]) then since = s0 end
  redis.call('HSET', KEYS[2], ARGV[1], now .. ':' .. ARGV[2], ARGV[3], since .. ':' .. now)
  redis.call('HDEL', KEYS[2], ARGV[4] .. ARGV[1])
end
return false
`)

// ProbeSelf is a member's self-fence read: it returns memberID's gone
// record, if there is one, and otherwise, when bound is positive, writes
// the member's heartbeat at Redis' TIME with that bound, in one round
// trip. A zero bound reads without beating (a member that withholds its
// heartbeat so that it can be recorded gone, see package placement).
func (s *Redis) ProbeSelf(ctx context.Context, memberID string, bound time.Duration) (GoneMember, bool, error) {
	if memberID == "" {
		return GoneMember{}, false, fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	b := ""
	if bound > 0 {
		b = strconv.FormatInt(bound.Milliseconds(), 10)
	}
	var v string
	var err error
	if b == "" {
		// A plain read: under a full Redis (noeviction) a script that may
		// write is refused before it runs, while this read still answers.
		v, err = s.rdb.HGet(ctx, s.keys.gone(), memberID).Result()
	} else {
		v, err = probeSelf.Run(ctx, s.rdb, []string{s.keys.gone(), s.keys.heartbeat()}, memberID, b, heartbeatRun, heartbeatJudge).Text()
	}
	if errors.Is(err, redis.Nil) {
		return GoneMember{}, false, nil
	}
	if err != nil {
		return GoneMember{}, false, translateGone(err)
	}
	return goneFrom(memberID, v), true, nil
}

// markGoneIfStale returns {1} when it wrote the record, {2} when the
// member was already recorded, {0, age, bound} when its heartbeat is
// fresh, {3, age, bound} when it is stale but the store is not steady and
// the judging window is open. The heartbeat field and the window go with
// the record: a gone member never beats again.
var markGoneIfStale = redis.NewScript("#!lua\n" + heartbeatLua + `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {2} end
local judge = ARGV[4] .. ARGV[1]
local at, bound = pair(redis.call('HGET', KEYS[2], ARGV[1]))
if at and bound then
  local now = nowMs()
  if now - at <= bound then
    redis.call('HDEL', KEYS[2], judge)
    return {0, now - at, bound}
  end
  local since, last = pair(redis.call('HGET', KEYS[2], ARGV[3]))
  local steady = since and last and now - last <= bound and now - since > bound
  if not steady then
    local opened = tonumber(redis.call('HGET', KEYS[2], judge))
    if not opened then
      redis.call('HSET', KEYS[2], judge, now)
      return {3, now - at, bound}
    end
    if now - opened <= bound then return {3, now - at, bound} end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[1], judge)
redis.call('HINCRBY', KEYS[2], ARGV[5], 1)
return {1}
`)

// MarkGoneIfStale is MarkGone gated by the member's heartbeat: it records
// memberID gone only when its heartbeat is older than the bound it
// published (or it has none), and, unless the store is steady, has stayed
// so for one bound since the first such verdict (Pending until then). The
// first record of a member id wins.
func (s *Redis) MarkGoneIfStale(ctx context.Context, memberID, node string, leftAtUnixMs int64) (HeartbeatVerdict, error) {
	if memberID == "" {
		return HeartbeatVerdict{}, fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	v, err := json.Marshal(GoneMember{Node: node, LeftAtUnixMs: leftAtUnixMs})
	if err != nil {
		return HeartbeatVerdict{}, err
	}
	r, err := markGoneIfStale.Run(ctx, s.rdb, []string{s.keys.gone(), s.keys.heartbeat()}, memberID, string(v), heartbeatRun, heartbeatJudge, goneVersion).Int64Slice()
	if err != nil {
		return HeartbeatVerdict{}, translateGone(err)
	}
	switch {
	case len(r) == 1 && r[0] == 1:
		return HeartbeatVerdict{Won: true, Gone: true}, nil
	case len(r) == 1 && r[0] == 2:
		return HeartbeatVerdict{Gone: true}, nil
	case len(r) == 3 && r[0] == 0:
		return HeartbeatVerdict{Fresh: true, Age: time.Duration(r[1]) * time.Millisecond, Bound: time.Duration(r[2]) * time.Millisecond}, nil
	case len(r) == 3 && r[0] == 3:
		return HeartbeatVerdict{Pending: true, Age: time.Duration(r[1]) * time.Millisecond, Bound: time.Duration(r[2]) * time.Millisecond}, nil
	}
	return HeartbeatVerdict{}, fmt.Errorf("%w: unexpected mark-gone reply %v", ErrStoreUnavailable, r)
}

// Pruning. Every process start adds a member id to the members hash, and
// every departure seen a gone record and a heartbeat field; each member
// also leaves its owned:<member> index behind. Left alone they only grow,
// and every membership read walks them. A gone member is pruned once no
// Location record names it: its orders were taken over, relocated or
// archived, so nothing will ever read its records again. Its name, its
// gone record, its heartbeat and its index go together.
//
// A pruned member must not serve again if it was only paused: its gone
// record is gone, so the self-fence read alone would find it well. So a
// member that published its name treats its name's absence as being
// gone (see package placement), and pruning removes the name first, the
// gone record after: a member that reads its gone record and then its
// name (in that order) sees one or the other whichever step of a prune
// it falls between, on one server as on a Redis Cluster, where the two
// sit in different slots.

// PruneOutcome is what PruneMember did.
type PruneOutcome struct {
	// Pruned: the member's name, gone record, heartbeat and index are
	// gone (by this call, or it had none of them left).
	Pruned bool
	// NotGone: the member is not recorded gone; nothing was touched.
	NotGone bool
	// Owns is how many Location records still name the member (Ready or
	// Moving there); while any does, nothing is touched.
	Owns int
}

// pruneGone drops a member's gone record and heartbeat and moves the
// gone version, in the gone records' slot. KEYS gone, heartbeat. ARGV
// member id, judge prefix, version field. Reply 1 dropped, 0 none.
var pruneGone = redis.NewScript(`#!lua
local n = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1], ARGV[2] .. ARGV[1])
if n == 1 then redis.call('HINCRBY', KEYS[2], ARGV[3], 1) end
return n
`)

// PruneMember removes a gone member's traces (its name, gone record,
// heartbeat and takeover index) once no Location record names it, in
// that order: the name first (see above). A member not recorded gone,
// or one that a record still names (its index lists every record it was
// made owner of; each is checked), is left as it is. Repeating it is
// harmless. It reads one record per index entry: for a background pass,
// not a request path.
func (s *Redis) PruneMember(ctx context.Context, memberID string) (PruneOutcome, error) {
	if memberID == "" {
		return PruneOutcome{}, fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	if _, gone, err := s.IsGone(ctx, memberID); err != nil || !gone {
		return PruneOutcome{NotGone: !gone}, err
	}
	entries, err := s.rdb.SMembers(ctx, s.keys.owned(memberID)).Result()
	if err != nil {
		return PruneOutcome{}, translateGone(err)
	}
	owns := 0
	for _, e := range entries {
		kind, id, ok := splitOwned(e)
		if !ok {
			continue
		}
		rec, err := s.Get(ctx, kind, id)
		if err != nil {
			return PruneOutcome{}, err
		}
		if rec.Owner == memberID {
			owns++
		}
	}
	if owns > 0 {
		return PruneOutcome{Owns: owns}, nil
	}
	if err := forgetMember.Run(ctx, s.rdb, []string{s.keys.members(), s.keys.memberSchemas()}, memberID).Err(); err != nil {
		return PruneOutcome{}, translateGone(err)
	}
	if err := pruneGone.Run(ctx, s.rdb, []string{s.keys.gone(), s.keys.heartbeat()}, memberID, heartbeatJudge, goneVersion).Err(); err != nil {
		return PruneOutcome{}, translateGone(err)
	}
	if err := s.rdb.Del(ctx, s.keys.owned(memberID)).Err(); err != nil {
		return PruneOutcome{}, translateGone(err)
	}
	return PruneOutcome{Pruned: true}, nil
}

// MembershipSize is how many entries the membership keys hold: member
// names, gone records, heartbeat fields (the store's own "~" fields
// aside) and takeover indexes.
type MembershipSize struct {
	Names, Gone, Heartbeats, Indexes int
}

// MembershipSize counts the membership keys' entries. It walks the
// keyspace for the indexes (SCAN): for operators and tests.
func (s *Redis) MembershipSize(ctx context.Context) (MembershipSize, error) {
	var out MembershipSize
	names, err := s.rdb.HLen(ctx, s.keys.members()).Result()
	if err != nil {
		return out, translateGone(err)
	}
	gone, err := s.rdb.HLen(ctx, s.keys.gone()).Result()
	if err != nil {
		return out, translateGone(err)
	}
	beats, err := s.rdb.HKeys(ctx, s.keys.heartbeat()).Result()
	if err != nil {
		return out, translateGone(err)
	}
	out.Names, out.Gone = int(names), int(gone)
	for _, f := range beats {
		if !strings.HasPrefix(f, "~") {
			out.Heartbeats++
		}
	}
	n, err := s.countKeys(ctx, s.keys.owned("*"))
	out.Indexes = n
	return out, err
}

// orphanBeatBounds is how many of its own bounds an orphan heartbeat must
// be old before PruneOrphanBeats drops it: a member that just started may
// beat before it published its name.
const orphanBeatBounds = 10

// pruneBeats drops the listed heartbeats that have no gone record and
// are older than orphanBeatBounds of their bounds (or unreadable), in
// the gone records' slot. KEYS gone, heartbeat. ARGV judge prefix, then
// the candidate member ids. Reply: how many it dropped.
var pruneBeats = redis.NewScript("#!lua\n" + heartbeatLua + `
local now = nowMs()
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    local at, bound = pair(redis.call('HGET', KEYS[2], id))
    if not at or not bound or now - at > ` + strconv.Itoa(orphanBeatBounds) + ` * bound then
      n = n + redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[2], ARGV[1] .. id)
    end
  end
end
return n
`)

// PruneOrphanBeats drops the heartbeat of every member that has neither a
// name nor a gone record, once it is older than ten of its bounds: a
// member pruned while it was paused beats once more before its
// self-fence read finds its name gone, and leaves that beat behind. It
// returns how many it dropped.
func (s *Redis) PruneOrphanBeats(ctx context.Context) (int, error) {
	beats, err := s.rdb.HKeys(ctx, s.keys.heartbeat()).Result()
	if err != nil {
		return 0, translateGone(err)
	}
	names, err := s.rdb.HKeys(ctx, s.keys.members()).Result()
	if err != nil {
		return 0, translateGone(err)
	}
	named := make(map[string]bool, len(names))
	for _, n := range names {
		named[n] = true
	}
	args := []any{heartbeatJudge}
	for _, id := range beats {
		if !strings.HasPrefix(id, "~") && !named[id] {
			args = append(args, id)
		}
	}
	if len(args) == 1 {
		return 0, nil
	}
	n, err := pruneBeats.Run(ctx, s.rdb, []string{s.keys.gone(), s.keys.heartbeat()}, args...).Int()
	return n, translateGone(err)
}
