package location

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The Location Store's part of a takeover (package cluster/takeover runs
// the whole operation): the per-member index that finds a lost member's
// orders, a scan of every record for when the index cannot be trusted,
// and the reset of a record that still names the lost owner.
//
// The index is a Redis set per member id, <prefix>owned:<memberId>, of
// "<kind>/<id>" entries. It cannot live in the record's script: its key
// is the member's, in another Redis Cluster slot than the record. So it
// is kept beside the record, best-effort, in a way that errs on the side
// of listing too much: an entry is added in the same pipeline as the
// commit that makes a member the owner, just before it (a commit that then
// fails leaves a stale entry, never a missing one), and removed after the
// record stops naming the member. The record stays the truth: a takeover
// checks each entry's record before it acts and drops stale entries.

func ownedEntry(kind, id string) string { return kind + "/" + id }

// indexedEval runs script in one round trip with the index entry of
// (kind, id) at owner added just before it.
func (s *Redis) indexedEval(ctx context.Context, owner, kind, id string, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if owner == "" {
		return script.Run(ctx, s.rdb, keys, args...)
	}
	var cmd *redis.Cmd
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.keys.owned(owner), ownedEntry(kind, id))
		cmd = script.EvalSha(ctx, p, keys, args...)
		return nil
	})
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		return script.Eval(ctx, s.rdb, keys, args...)
	}
	return cmd
}

// unindex drops an index entry, best-effort: a stale entry costs a
// takeover one record read, never a wrong decision.
func (s *Redis) unindex(ctx context.Context, owner, kind, id string) {
	if owner == "" {
		return
	}
	_ = s.rdb.SRem(context.WithoutCancel(ctx), s.keys.owned(owner), ownedEntry(kind, id)).Err()
}

// Owned returns the ids of kind that memberID's index lists. It lists
// every identity committed Ready at that member since the index existed
// (and possibly some it no longer owns): check each record before acting
// on it, and ScanRecords for records older than the index.
func (s *Redis) Owned(ctx context.Context, memberID, kind string) ([]string, error) {
	if memberID == "" {
		return nil, fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	entries, err := s.rdb.SMembers(ctx, s.keys.owned(memberID)).Result()
	if err != nil {
		return nil, translate(err)
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e, kind+"/"); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Unindex drops a stale entry from memberID's index: the record of (kind,
// id) was found not to name that member.
func (s *Redis) Unindex(ctx context.Context, memberID, kind, id string) error {
	if memberID == "" {
		return nil
	}
	return translate(s.rdb.SRem(ctx, s.keys.owned(memberID), ownedEntry(kind, id)).Err())
}

// Reindex implements TakeoverIndex: one SADD per owned record, on top of
// the scan's read of it.
func (s *Redis) Reindex(ctx context.Context, kind string) (int, error) {
	n := 0
	err := s.ScanRecords(ctx, kind, func(id string, rec Record) error {
		if rec.Owner == "" || (rec.Status != Ready && rec.Status != Moving) {
			return nil
		}
		if err := s.rdb.SAdd(ctx, s.keys.owned(rec.Owner), ownedEntry(kind, id)).Err(); err != nil {
			return translate(err)
		}
		n++
		return nil
	})
	return n, err
}

// ScanRecords calls fn with every record of kind in the store, in no
// particular order, by SCAN (on every master of a Redis Cluster). It is
// the fallback of a takeover that cannot trust the index: it reads the
// whole keyspace, so it is for operators, never for a request path. A
// record may change while the scan runs; fn sees each as it was read.
func (s *Redis) ScanRecords(ctx context.Context, kind string, fn func(id string, rec Record) error) error {
	pattern := s.keys.recordPattern(kind)
	// ForEachMaster scans masters at once; fn runs under mu, and once it
	// returned an error (stopped) no master calls it again: the scans of
	// the other masters end at their next record.
	var (
		mu      sync.Mutex
		stopped bool
	)
	return s.scanPages(ctx, pattern, func(ctx context.Context, c redis.Cmdable, found []string) error {
		for _, k := range found {
			id, ok := s.keys.recordID(kind, k)
			if !ok {
				continue
			}
			m, err := c.HGetAll(ctx, k).Result()
			if err != nil {
				return translate(err)
			}
			if len(m) == 0 {
				continue
			}
			mu.Lock()
			if stopped {
				mu.Unlock()
				return errScanStopped
			}
			err = fn(id, recordFrom(m))
			stopped = err != nil
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// errScanStopped ends one master's scan once another's fn failed; that
// failure is what ScanRecords returns.
var errScanStopped = errors.New("location: scan stopped")

// scanPages calls page with each page of keys matching pattern and the
// client that holds them, by SCAN, on every master of a Redis Cluster
// at once (page must then be safe for concurrent calls), until page
// fails. A page that fails with errScanStopped ends that master's scan
// quietly.
func (s *Redis) scanPages(ctx context.Context, pattern string, page func(ctx context.Context, c redis.Cmdable, keys []string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			found, next, err := c.Scan(ctx, cursor, pattern, 500).Result()
			if err != nil {
				return translate(err)
			}
			if err := page(ctx, c, found); err != nil {
				if errors.Is(err, errScanStopped) {
					return nil
				}
				return err
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, s.rdb)
}

// ResetOutcome is what ResetTakenOver found.
type ResetOutcome int

const (
	// ResetDone: the record named the old owner at the old generation (or
	// no owner at it) and is now Missing at the new generation.
	ResetDone ResetOutcome = iota
	// ResetAlready: the record is at the new generation or beyond: this
	// takeover, or something newer, already happened. Nothing changed.
	ResetAlready
	// ResetReleased: the old owner let go by itself and another caller
	// is creating the next generation (Creating). Nothing changed; the old
	// owner has no authority left.
	ResetReleased
	// ResetOtherOwner: the record names another owner, or another
	// generation than the one taken over. Nothing changed.
	ResetOtherOwner
)

func (o ResetOutcome) String() string {
	switch o {
	case ResetDone:
		return "reset"
	case ResetAlready:
		return "already"
	case ResetReleased:
		return "released"
	case ResetOtherOwner:
		return "other-owner"
	}
	return "ResetOutcome(" + strconv.Itoa(int(o)) + ")"
}

// resetTakenOver makes a record Missing at the new generation if it still
// names the old owner at the old generation; a record the old owner
// released (Missing at the old generation) is moved to the new generation
// too, so generations stay in step with the raised fence. Either way it
// marks the record taken over (field takeover), which tells the next
// activation its cause; that activation's commitReady deletes the mark.
//
// KEYS: record, history. ARGV: owner, oldGeneration, newGeneration,
// nowUnixMs.
// Reply: {outcome, status, generation}.
var resetTakenOver = redis.NewScript("#!lua\n" + historyLua + `
local st = redis.call('HGET', KEYS[1], 'status') or ''
local g = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0')
if g >= tonumber(ARGV[3]) then return {'already', st, tostring(g)} end
if g ~= tonumber(ARGV[2]) then return {'other', st, tostring(g)} end
if st == 'Creating' then return {'released', st, tostring(g)} end
if (st == 'Ready' or st == 'Moving') and redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return {'other', st, tostring(g)}
end
redis.call('HDEL', KEYS[1], 'status', 'owner', 'pidAddress', 'pidId', 'moveOp')
redis.call('HSET', KEYS[1], 'generation', ARGV[3], 'takeover', '1')
history(KEYS[2], 'takeover', ARGV[1], ARGV[3], ARGV[4])
return {'reset', '', ARGV[3]}
`)

// ResetTakenOver is the last step of a takeover: it makes the identity
// Missing at newGeneration and marks it TakenOver, but only if the record
// still names owner (a member id) at oldGeneration, Ready or Moving, or
// names nobody at oldGeneration. The next command then cold-activates newGeneration+1 on
// a live member. owner's index entry is dropped. Repeating it is harmless.
// The caller must have raised the stream's fence to newGeneration first:
// resetting without it would let the old owner and the next one write.
func (s *Redis) ResetTakenOver(ctx context.Context, kind, id, owner string, oldGeneration, newGeneration int64) (ResetOutcome, error) {
	if err := checkIdentity(id); err != nil {
		return 0, err
	}
	if owner == "" || newGeneration <= oldGeneration {
		return 0, fmt.Errorf("%w: reset of %s from member %q generation %d to %d", ErrInvalidIdentity, id, owner, oldGeneration, newGeneration)
	}
	res, err := resetTakenOver.Run(ctx, s.rdb, []string{s.keys.record(kind, id), s.keys.history(kind, id)},
		owner, oldGeneration, newGeneration, nowUnixMs()).StringSlice()
	if err != nil {
		return 0, translate(err)
	}
	if len(res) == 0 {
		return 0, fmt.Errorf("%w: reset of %s: empty reply", ErrStoreUnavailable, id)
	}
	var out ResetOutcome
	switch res[0] {
	case "reset":
		out = ResetDone
	case "already":
		out = ResetAlready
	case "released":
		out = ResetReleased
	default:
		out = ResetOtherOwner
	}
	if out != ResetOtherOwner {
		s.unindex(ctx, owner, kind, id)
	}
	return out, nil
}

// splitOwned reads an index entry ("<kind>/<id>").
func splitOwned(e string) (kind, id string, ok bool) {
	kind, id, ok = strings.Cut(e, "/")
	return kind, id, ok && kind != "" && id != ""
}

// countKeys counts the keys matching pattern by SCAN, on every master of
// a Redis Cluster.
func (s *Redis) countKeys(ctx context.Context, pattern string) (int, error) {
	var n atomic.Int64
	err := s.scanPages(ctx, pattern, func(_ context.Context, _ redis.Cmdable, keys []string) error {
		n.Add(int64(len(keys)))
		return nil
	})
	return int(n.Load()), err
}
