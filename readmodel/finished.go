package readmodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// The FinishedIndex: terminal orders by the time they ended, kept only
// with Config.IndexFinished, in ActiveShards sorted sets (member: order
// id, score: the terminal state's UpdatedAtUnixMs) beside the active
// ones, under the same shard of an order. The terminal step moves an
// order from the active index to this one: in its own script on one
// server, right after it on a Redis Cluster (IndexActive), where a lost
// write is found again by RebuildActiveIndex. The archiver reads it for
// the orders past their grace and forgets each one it archived. Per
// order it costs one ZADD in the terminal step, one ZREM at archival and
// an entry of about 60 bytes while the order waits.

// FinishedOrder is an entry of the FinishedIndex.
type FinishedOrder struct {
	OrderID          string
	TerminalAtUnixMs int64
}

// Finished returns the terminal orders that ended at or before before,
// oldest first, at most limit (0: no limit). An entry is a candidate
// only: its record is not read.
func (r *Redis) Finished(ctx context.Context, before time.Time, limit int) ([]FinishedOrder, error) {
	var out []FinishedOrder
	for shard := range ActiveShards {
		got, err := r.FinishedIn(ctx, shard, before, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	slices.SortFunc(out, func(a, b FinishedOrder) int {
		return cmp.Or(cmp.Compare(a.TerminalAtUnixMs, b.TerminalAtUnixMs), cmp.Compare(a.OrderID, b.OrderID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ForgetFinished drops orderID from the FinishedIndex: the archiver is
// done with it. Forgetting an order that is not there is no error.
func (r *Redis) ForgetFinished(ctx context.Context, orderID string) error {
	if _, err := r.keys.record(orderID); err != nil {
		return err
	}
	if err := r.client.ZRem(ctx, r.keys.finished(shardOf(orderID)), orderID).Err(); err != nil {
		return translate("forget finished "+orderID, err)
	}
	return nil
}

// keptState names the record's state in a sealed order's record
// (eventstore.SealedRecord.Kept). Its version is not kept: the archiver
// compacts only an order whose record reflects its whole stream, so it
// is the sealed record's own (SealedRecord.Version).
const keptState = "readmodel.state"

// AddCompaction adds the order's record to c: its state is kept in the
// sealed record, the record itself goes.
func (r *Redis) AddCompaction(c *eventstore.Compaction) error {
	key, err := r.keys.record(c.OrderID())
	if err != nil {
		return err
	}
	c.Keep(key, fieldState, keptState)
	c.Delete(key)
	return nil
}

// EncodeState is a state as this store keeps it (and as the archive's
// FinalState holds it).
func EncodeState(state *contracts.OrderState) ([]byte, error) {
	if state == nil {
		return nil, errors.New("readmodel: encode a nil state")
	}
	b, err := proto.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("readmodel: encode state: %w", err)
	}
	return b, nil
}

// KeptState is the final state and version a compacted order's sealed
// record kept of its record (AddCompaction), or ErrNotFound when it kept
// none.
func KeptState(rec eventstore.SealedRecord) (*contracts.OrderState, int64, error) {
	raw, ok := rec.Kept[keptState]
	if !ok {
		return nil, 0, fmt.Errorf("%w: no kept state", ErrNotFound)
	}
	state := &contracts.OrderState{}
	if err := proto.Unmarshal([]byte(raw), state); err != nil {
		return nil, 0, fmt.Errorf("%w: kept state: %v", ErrCorrupt, err)
	}
	return state, rec.Version, nil
}

// KeptWriter rewrites a field a compacted order's sealed record kept
// (eventstore.Redis.RewriteKept).
type KeptWriter interface {
	// RewriteKept sets the kept field as to value unless it holds it, and
	// reports whether it wrote; an order not compacted is
	// eventstore.ErrNotSealed.
	RewriteKept(ctx context.Context, orderID, as string, value []byte) (bool, error)
}

// RewriteKeptState makes state the final state a compacted order's
// sealed record keeps of its record (KeptState), and reports whether it
// wrote: a record that keeps these bytes already is left alone. The
// cold tier's rebuild calls it with the state replayed from the
// archive's events.
func RewriteKeptState(ctx context.Context, w KeptWriter, orderID string, state *contracts.OrderState) (bool, error) {
	b, err := EncodeState(state)
	if err != nil {
		return false, err
	}
	return w.RewriteKept(ctx, orderID, keptState, b)
}

// PostponeFinished lists orderID again as ended at at, if it is listed.
func (r *Redis) PostponeFinished(ctx context.Context, orderID string, at time.Time) error {
	if _, err := r.keys.record(orderID); err != nil {
		return err
	}
	err := r.client.ZAddXX(ctx, r.keys.finished(shardOf(orderID)), redis.Z{Score: float64(at.UnixMilli()), Member: orderID}).Err()
	if err != nil {
		return translate("postpone finished "+orderID, err)
	}
	return nil
}

// leaseScript takes or renews a lease. KEYS[1] the lease; ARGV owner,
// ttl (ms). Reply 1 held by owner now, 0 held by another.
var leaseScript = redis.NewScript(`#!lua
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// unleaseScript gives a lease back if owner holds it. KEYS[1] the lease;
// ARGV owner.
var unleaseScript = redis.NewScript(`#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`)

// LeaseFinished takes shard's lease of the FinishedIndex for owner for
// ttl, or renews it when owner holds it already, and reports whether
// owner holds it now. Archivers lease the shards they work on, so that
// two of them do not archive the same order at once; a lease whose
// owner died ends with its ttl.
func (r *Redis) LeaseFinished(ctx context.Context, shard int, owner string, ttl time.Duration) (bool, error) {
	if shard < 0 || shard >= ActiveShards || owner == "" || ttl < time.Millisecond {
		return false, fmt.Errorf("readmodel: lease finished shard %d for %q, ttl %s: invalid", shard, owner, ttl)
	}
	n, err := leaseScript.Run(ctx, r.client, []string{r.keys.finishedLease(shard)}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, translate("lease finished shard", err)
	}
	return n == 1, nil
}

// UnleaseFinished gives shard's lease back if owner holds it.
func (r *Redis) UnleaseFinished(ctx context.Context, shard int, owner string) error {
	if err := unleaseScript.Run(ctx, r.client, []string{r.keys.finishedLease(shard)}, owner).Err(); err != nil {
		return translate("unlease finished shard", err)
	}
	return nil
}

// FinishedIn is Finished for one shard of the FinishedIndex.
func (r *Redis) FinishedIn(ctx context.Context, shard int, before time.Time, limit int) ([]FinishedOrder, error) {
	if shard < 0 || shard >= ActiveShards {
		return nil, fmt.Errorf("readmodel: finished shard %d: out of range", shard)
	}
	by := &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(before.UnixMilli(), 10)}
	if limit > 0 {
		by.Count = int64(limit)
	}
	zs, err := r.client.ZRangeByScoreWithScores(ctx, r.keys.finished(shard), by).Result()
	if err != nil {
		return nil, translate("finished orders", err)
	}
	out := make([]FinishedOrder, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		out = append(out, FinishedOrder{OrderID: id, TerminalAtUnixMs: int64(z.Score)})
	}
	return out, nil
}
