package readmodel

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// ActiveShards is how many sorted sets hold the index of non-terminal
// orders. One set would put every order on one Redis Cluster slot, a hot
// key under load; each shard is its own hash tag, so the shards spread
// over the cluster. Changing it strands the entries of dropped shards, so
// it is fixed.
const ActiveShards = 16

// Terminal reports whether a status is final: nothing moves the order on.
func Terminal(s contracts.OrderStatus) bool {
	return s == contracts.OrderStatus_Confirmed || s == contracts.OrderStatus_Failed
}

// StuckOrder is one non-terminal order whose projection has not changed
// since UpdatedAtUnixMs.
type StuckOrder struct {
	OrderID string
	State   *contracts.OrderState
	// Version is the stream version the projection reflects.
	Version int64
}

// ActiveIndex is the index of non-terminal orders kept beside the
// projections. The projection record is the truth; the index only finds
// candidates, so it is written best-effort and repaired by the queries.
type ActiveIndex interface {
	// IndexActive records the order in the index when state is not
	// terminal (scored by its UpdatedAtUnixMs, which never goes back), and
	// drops it when it is, moving it to the FinishedIndex where that is
	// kept. Projection writers that bypass Put call it after their write
	// landed; Put calls it itself.
	IndexActive(ctx context.Context, orderID string, state *contracts.OrderState) error
	// Stuck returns the non-terminal orders whose projection has not
	// changed since now-olderThan, oldest first, at most limit (0: no
	// limit). Every candidate is checked against its projection record;
	// entries whose record is gone or terminal are dropped from the index
	// on the way.
	Stuck(ctx context.Context, olderThan time.Duration, now time.Time, limit int) ([]StuckOrder, error)
	// RebuildActiveIndex re-indexes every stored projection from a SCAN of
	// the records (on every master of a Redis Cluster), for an index that
	// was lost or damaged. It returns how many non-terminal orders it
	// indexed.
	RebuildActiveIndex(ctx context.Context) (int, error)
}

var _ ActiveIndex = (*Redis)(nil)

func shardOf(orderID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(orderID))
	return int(h.Sum32() % ActiveShards)
}

// IndexActive implements ActiveIndex.
func (r *Redis) IndexActive(ctx context.Context, orderID string, state *contracts.OrderState) error {
	if _, err := r.keys.record(orderID); err != nil {
		return err
	}
	if state == nil {
		return fmt.Errorf("readmodel: index %s: nil state", orderID)
	}
	key := r.keys.active(shardOf(orderID))
	var err error
	switch {
	case Terminal(state.GetStatus()) && r.finished:
		// Two slots on a Redis Cluster: a pipeline, one round trip per
		// node.
		_, err = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, key, orderID)
			p.ZAdd(ctx, r.keys.finished(shardOf(orderID)), redis.Z{Score: float64(state.GetUpdatedAtUnixMs()), Member: orderID})
			return nil
		})
	case Terminal(state.GetStatus()):
		err = r.client.ZRem(ctx, key, orderID).Err()
	default:
		// GT: a late writer of an older projection cannot make the order
		// look older than it is.
		err = r.client.ZAddGT(ctx, key, redis.Z{Score: float64(state.GetUpdatedAtUnixMs()), Member: orderID}).Err()
	}
	if err != nil {
		return translate("index "+orderID, err)
	}
	return nil
}

// indexEntry is IndexActive's write of state as the projected append's
// script makes it.
func (r *Redis) indexEntry(orderID string, state *contracts.OrderState) eventstore.IndexEntry {
	e := eventstore.IndexEntry{Op: eventstore.IndexAdd, Key: r.keys.active(shardOf(orderID)), Member: orderID, Score: state.GetUpdatedAtUnixMs()}
	if Terminal(state.GetStatus()) {
		e.Op = eventstore.IndexRemove
	}
	return e
}

// singleServer reports whether the client talks to one server, where a
// script may write the index beside an order's keys.
func (r *Redis) singleServer() bool {
	_, ok := r.client.(*redis.Client)
	return ok
}

// indexBestEffort writes the index after a projection write and only logs
// a failure: the projection landed, which is what the caller asked for.
// An order missing from the index is found again by RebuildActiveIndex; a
// stale entry is dropped by Stuck.
func (r *Redis) indexBestEffort(ctx context.Context, orderID string, state *contracts.OrderState) {
	if err := r.IndexActive(ctx, orderID, state); err != nil {
		r.log.Warn("active-order index not updated; the projection is", slog.String("order", orderID), slog.Any("error", err))
	}
}

// Stuck implements ActiveIndex.
func (r *Redis) Stuck(ctx context.Context, olderThan time.Duration, now time.Time, limit int) ([]StuckOrder, error) {
	if olderThan < 0 {
		return nil, fmt.Errorf("readmodel: stuck: negative age %s", olderThan)
	}
	cutoff := now.Add(-olderThan).UnixMilli()
	max := strconv.FormatInt(cutoff, 10)
	var out []StuckOrder
	for shard := range ActiveShards {
		key := r.keys.active(shard)
		ids, err := r.client.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: max}).Result()
		if err != nil {
			return nil, translate("stuck", err)
		}
		for _, id := range ids {
			st, version, err := r.Get(ctx, id)
			switch {
			case errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidOrderID):
				r.dropFromIndex(ctx, key, id)
				continue
			case errors.Is(err, ErrCorrupt):
				// A damaged record is still an order someone must look at:
				// report it without a state rather than hide it.
				out = append(out, StuckOrder{OrderID: id})
				continue
			case err != nil:
				return nil, err
			}
			if Terminal(st.GetStatus()) {
				r.dropFromIndex(ctx, key, id)
				continue
			}
			if st.GetUpdatedAtUnixMs() > cutoff {
				// The index lags the record (a lost index write); the
				// record says the order moved recently.
				r.indexBestEffort(ctx, id, st)
				continue
			}
			out = append(out, StuckOrder{OrderID: id, State: st, Version: version})
		}
	}
	slices.SortFunc(out, func(a, b StuckOrder) int {
		if c := compareInt64(a.State.GetUpdatedAtUnixMs(), b.State.GetUpdatedAtUnixMs()); c != 0 {
			return c
		}
		return strings.Compare(a.OrderID, b.OrderID)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *Redis) dropFromIndex(ctx context.Context, key, orderID string) {
	if err := r.client.ZRem(ctx, key, orderID).Err(); err != nil {
		r.log.Warn("stale active-order index entry not dropped", slog.String("order", orderID), slog.Any("error", err))
	}
}

// rebuildBatch is the SCAN page size of RebuildActiveIndex.
const rebuildBatch = 500

// RebuildActiveIndex implements ActiveIndex.
func (r *Redis) RebuildActiveIndex(ctx context.Context) (int, error) {
	var indexed atomic.Int64
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		// Projection records are <prefix>{<orderId>}; the index keys are
		// <prefix>active:{n}, which this pattern does not match.
		it := c.Scan(ctx, 0, r.keys.recordPattern(), rebuildBatch).Iterator()
		for it.Next(ctx) {
			id := r.keys.orderOf(it.Val())
			if id == "" {
				continue
			}
			st, _, err := r.Get(ctx, id)
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
				continue
			}
			if err != nil {
				return err
			}
			if err := r.IndexActive(ctx, id, st); err != nil {
				return err
			}
			if !Terminal(st.GetStatus()) {
				indexed.Add(1)
			}
		}
		if err := it.Err(); err != nil {
			return translate("rebuild active index", err)
		}
		return nil
	}
	// SCAN on a Redis Cluster client reaches one node only; every master
	// holds its own share of the records.
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
		return int(indexed.Load()), err
	}
	err := scan(ctx, r.client)
	return int(indexed.Load()), err
}
