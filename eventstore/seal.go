package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sealing and compaction: how a finished order leaves the hot tier.
//
// Seal marks the order's fence sealed. From then on nothing is written to
// the order by anyone: Open, Append and Commit fail with ErrSealed
// (checked before the fence, so no generation gets past it) and
// RaiseFence changes nothing, so the fence keeps the last generation and
// epoch. No event is appended to seal: the stream stays what it was, to be
// copied to the archive.
//
// Compact then removes the order's hot keys in one script, once the
// archive holds its history: the stream, its source-command index and its
// barrier, and whatever the other stores add (Compaction.Delete), after
// copying the fields they keep (Compaction.Keep) into the sealed fence.
// The fence is the one key of this store that stays: the order's sealed
// record (Sealed), with the last generation and fence, the final version
// and the kept fields.

// Sealed record fields of this store; another store's kept field carries
// a '.' (its own prefix), so the two never collide.
const (
	fenceGen      = "gen"
	fenceEpoch    = "epoch"
	fenceSealed   = "sealed"
	fenceArchived = "archived"
	fenceVersion  = "version"
)

// sealScript seals an order that has a stream or a fence.
//
// KEYS: stream, fence. ARGV: now (unix ms).
// Reply: {0, gen, epoch, sealedAt} | {1} when there is neither.
var sealScript = redis.NewScript(`#!lua
local f = redis.call('HMGET', KEYS[2], 'gen', 'epoch', 'sealed')
if not f[3] then
  if not f[1] and redis.call('EXISTS', KEYS[1]) == 0 then
    return {1}
  end
  redis.call('HSET', KEYS[2], 'sealed', ARGV[1])
  f[3] = ARGV[1]
end
return {0, tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3])}
`)

// Seal seals orderID at atUnixMs and returns the fence it keeps. Sealing
// again changes nothing and returns the first seal. An order with neither
// a stream nor a fence fails with ErrNoStream: there is nothing to seal.
func (r *Redis) Seal(ctx context.Context, orderID string, atUnixMs int64) (Fence, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return Fence{}, err
	}
	reply, err := sealScript.Run(ctx, r.client, []string{k.stream, k.fence}, atUnixMs).Slice()
	if err != nil {
		return Fence{}, translate("seal "+orderID, err)
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return Fence{}, fmt.Errorf("eventstore: seal %s: %w", orderID, err)
	}
	if status != statusOK {
		return Fence{}, fmt.Errorf("%w: seal %s", ErrNoStream, orderID)
	}
	gen, err1 := replyInt(reply, 1)
	epoch, err2 := replyInt(reply, 2)
	if err := errors.Join(err1, err2); err != nil {
		return Fence{}, fmt.Errorf("eventstore: seal %s: %w", orderID, err)
	}
	return Fence{Generation: gen, Epoch: epoch}, nil
}

// SealedRecord is what a sealed order's fence holds.
type SealedRecord struct {
	Fence          Fence
	SealedAtUnixMs int64
	// ArchivedAtUnixMs is when Compact removed the hot keys; 0 while the
	// order is sealed and still hot.
	ArchivedAtUnixMs int64
	// Version is the stream's last version, set by Compact.
	Version int64
	// Kept are the other stores' fields Compact copied in (Keep), by the
	// names they gave them.
	Kept map[string]string
}

// Compacted reports whether the hot keys are gone.
func (s SealedRecord) Compacted() bool { return s.ArchivedAtUnixMs > 0 }

// Sealed returns orderID's sealed record, or ErrNotSealed when the order
// is not sealed (a hot order, or none).
func (r *Redis) Sealed(ctx context.Context, orderID string) (SealedRecord, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return SealedRecord{}, err
	}
	m, err := r.client.HGetAll(ctx, k.fence).Result()
	if err != nil {
		return SealedRecord{}, translate("read sealed record "+orderID, err)
	}
	return sealedRecord(orderID, m)
}

// sealedRecord reads a fence hash as a sealed record: ErrNotSealed when
// it is not sealed, ErrCorrupt when a field of this store is no number.
func sealedRecord(orderID string, m map[string]string) (SealedRecord, error) {
	if m[fenceSealed] == "" {
		return SealedRecord{}, fmt.Errorf("%w: %s", ErrNotSealed, orderID)
	}
	num := func(f string) (int64, error) {
		v, ok := m[f]
		if !ok {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: sealed record of %s: %s = %q", ErrCorrupt, orderID, f, v)
		}
		return n, nil
	}
	var rec SealedRecord
	var errs [5]error
	rec.Fence.Generation, errs[0] = num(fenceGen)
	rec.Fence.Epoch, errs[1] = num(fenceEpoch)
	rec.SealedAtUnixMs, errs[2] = num(fenceSealed)
	rec.ArchivedAtUnixMs, errs[3] = num(fenceArchived)
	rec.Version, errs[4] = num(fenceVersion)
	if err := errors.Join(errs[:]...); err != nil {
		return SealedRecord{}, err
	}
	for f, v := range m {
		if strings.Contains(f, ".") {
			if rec.Kept == nil {
				rec.Kept = map[string]string{}
			}
			rec.Kept[f] = v
		}
	}
	return rec, nil
}

// SealMark is where a sealed order is marked: its fence's key and the
// field Seal sets, in the order's hash slot. The Location Store reads it
// in its activation script (location.Config.Sealed), so that no
// activation of a sealed order begins.
func (r *Redis) SealMark(orderID string) (key, field string, err error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return "", "", err
	}
	return k.fence, fenceSealed, nil
}

// Tier is where an order's events are.
type Tier uint8

const (
	// TierNone: no event anywhere, an order that never started (or whose
	// start is still being recorded).
	TierNone Tier = iota
	// TierHot: the stream is in Redis (sealed or not).
	TierHot
	// TierArchived: the order was compacted; its events are in the
	// archive and its sealed record answers for it (Presence.Sealed).
	TierArchived
)

// Presence is where an order's events are, and for an archived order its
// sealed record.
type Presence struct {
	Tier Tier
	// Sealed is the sealed record when Tier is TierArchived.
	Sealed SealedRecord
}

// Presence implements StreamChecker: the stream's EXISTS and the fence's
// fields in one round trip on the order's slot. An archived order is
// TierArchived even when the read saw its stream a moment before the
// compaction removed it: the sealed record answers the same either way.
func (r *Redis) Presence(ctx context.Context, orderID string) (Presence, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return Presence{}, err
	}
	var exists *redis.IntCmd
	var fence *redis.MapStringStringCmd
	_, err = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, k.stream)
		fence = p.HGetAll(ctx, k.fence)
		return nil
	})
	if err != nil {
		return Presence{}, translate("check presence of "+orderID, err)
	}
	if m := fence.Val(); m[fenceArchived] != "" {
		rec, err := sealedRecord(orderID, m)
		if err != nil {
			return Presence{}, err
		}
		return Presence{Tier: TierArchived, Sealed: rec}, nil
	}
	if exists.Val() > 0 {
		return Presence{Tier: TierHot}, nil
	}
	return Presence{Tier: TierNone}, nil
}

// rewriteKeptScript sets one kept field of a compacted order's sealed
// record, unless it holds that value already.
//
// KEYS: fence. ARGV: kept-as, value.
// Reply: 0 unchanged, 1 written, 2 not compacted.
var rewriteKeptScript = redis.NewScript(`#!lua
if not redis.call('HGET', KEYS[1], 'archived') then return 2 end
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// RewriteKept sets the kept field as (a name with its owner's '.' prefix,
// as Compaction.Keep gave it) of a compacted order's sealed record to
// value, and reports whether it wrote: the same value already there is
// no write. An order that is not compacted fails with ErrNotSealed and
// nothing is written: a hot order's own keys are its stores' to repair.
func (r *Redis) RewriteKept(ctx context.Context, orderID, as string, value []byte) (bool, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return false, err
	}
	if !strings.Contains(as, ".") {
		return false, fmt.Errorf("%w: rewrite kept field %q of %s: a kept name carries its owner's prefix", ErrConfig, as, orderID)
	}
	n, err := rewriteKeptScript.Run(ctx, r.client, []string{k.fence}, as, value).Int()
	if err != nil {
		return false, translate("rewrite kept field of "+orderID, err)
	}
	if n == 2 {
		return false, fmt.Errorf("%w: %s is not compacted", ErrNotSealed, orderID)
	}
	return n == 1, nil
}

// Compaction is the removal of a sealed order's hot keys, committed as one
// script by Compact. Each store adds its own keys through a method of its
// own package, as with a Unit: Keep for a field it wants to outlive its
// key, Delete for a key that goes. Every key carries the order's hash
// tag: a store's keys in other slots leave by its own scripts.
//
// A Compaction is built by one goroutine and committed once.
type Compaction struct {
	orderID string
	at      int64
	ops     []compactOp
}

type compactOp struct {
	keep       bool
	key, field string
	keptAs     string
}

// NewCompaction starts the compaction of orderID, stamped atUnixMs.
func NewCompaction(orderID string, atUnixMs int64) *Compaction {
	return &Compaction{orderID: orderID, at: atUnixMs}
}

// OrderID is the order the compaction removes.
func (c *Compaction) OrderID() string { return c.orderID }

// Keep copies field of the hash at key into the sealed record as as, which
// must name its owner with a '.' ("readmodel.state"); a missing field is
// not copied. Every Keep runs before any Delete.
func (c *Compaction) Keep(key, field, as string) {
	c.ops = append(c.ops, compactOp{keep: true, key: key, field: field, keptAs: as})
}

// Delete removes key.
func (c *Compaction) Delete(key string) { c.ops = append(c.ops, compactOp{key: key}) }

// compactScript: KEYS stream, fence, cmds, barrier, then one per op.
// ARGV: now, then per op: kind ('keep' or 'del'), field, kept-as.
// Reply: {0, version} | {1} not sealed | {2, version} compacted already.
var compactScript = redis.NewScript(`#!lua
local f = redis.call('HMGET', KEYS[2], 'sealed', 'archived', 'version')
if not f[1] then return {1} end
if f[2] then return {2, tonumber(f[3]) or 0} end
local version = redis.call('XLEN', KEYS[1])
local n = #KEYS - 4
for i = 1, n do
  local a = 2 + (i - 1) * 3
  if ARGV[a] == 'keep' then
    local v = redis.call('HGET', KEYS[4 + i], ARGV[a + 1])
    if v then redis.call('HSET', KEYS[2], ARGV[a + 2], v) end
  end
end
for i = 1, n do
  if ARGV[2 + (i - 1) * 3] == 'del' then redis.call('DEL', KEYS[4 + i]) end
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[2], 'archived', ARGV[1], 'version', version)
return {0, version}
`)

// CompactOutcome is what Compact did.
type CompactOutcome struct {
	// Version is the order's last stream version, now in the sealed
	// record.
	Version int64
	// Already: an earlier Compact had removed the keys; this one wrote
	// nothing.
	Already bool
}

// Compact commits c: on a sealed order, it copies the kept fields into
// the sealed record, then deletes every key of c and the order's stream,
// source-command index and barrier, and stamps the record archived with
// the stream's last version, all in one script. An order that is not
// sealed fails with ErrNotSealed and nothing is written; a compacted one
// is left as it is (Already). Keys outside the order's hash tag, and kept
// names without a '.', are refused before anything is sent.
func (r *Redis) Compact(ctx context.Context, c *Compaction) (CompactOutcome, error) {
	if c == nil {
		return CompactOutcome{}, errors.New("eventstore: nil compaction")
	}
	k, err := r.keys.order(c.orderID)
	if err != nil {
		return CompactOutcome{}, err
	}
	keys := []string{k.stream, k.fence, k.cmds, k.barrier}
	args := []any{c.at}
	for i, op := range c.ops {
		if op.key == "" || HashTag(op.key) != c.orderID {
			return CompactOutcome{}, fmt.Errorf("%w: compact %s: key #%d %q is not in the order's hash slot", ErrConfig, c.orderID, i, op.key)
		}
		kind := "del"
		if op.keep {
			if op.field == "" || !strings.Contains(op.keptAs, ".") {
				return CompactOutcome{}, fmt.Errorf("%w: compact %s: keep #%d needs a field and a name with its owner's prefix, not %q", ErrConfig, c.orderID, i, op.keptAs)
			}
			kind = "keep"
		}
		keys = append(keys, op.key)
		args = append(args, kind, op.field, op.keptAs)
	}
	reply, err := compactScript.Run(ctx, r.client, keys, args...).Slice()
	if err != nil {
		return CompactOutcome{}, translate("compact "+c.orderID, err)
	}
	status, err := replyInt(reply, 0)
	if err != nil {
		return CompactOutcome{}, fmt.Errorf("eventstore: compact %s: %w", c.orderID, err)
	}
	switch status {
	case 1:
		return CompactOutcome{}, fmt.Errorf("%w: compact %s", ErrNotSealed, c.orderID)
	case 0, 2:
		v, err := replyInt(reply, 1)
		if err != nil {
			return CompactOutcome{}, fmt.Errorf("eventstore: compact %s: %w", c.orderID, err)
		}
		return CompactOutcome{Version: v, Already: status == 2}, nil
	}
	return CompactOutcome{}, fmt.Errorf("eventstore: compact %s: unexpected script status %d", c.orderID, status)
}
