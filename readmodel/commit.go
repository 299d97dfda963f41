package readmodel

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// Committer is the one write of an order's state: the order's unit of
// work (eventstore.Unit), its events and whatever other stores added, with
// the read-model record of the fold the events lead to, in one atomic
// step, so a step records its event and its projection in one round trip
// instead of two. This package owns it because the record is its own.
//
// Its contract is both stores' contracts in one:
//
//   - The events: eventstore.Store.Append's contract (eventstore.Redis.Commit). The same checks
//     apply in the same order (fence, expected version, source command)
//     with the same errors and the returned new version; when a check
//     fails nothing at all is written, the record included.
//   - The record: Store.Put(orderID, new version, state)'s contract. It is
//     written unless a record of a newer version is stored; that refusal
//     is not an error (the append stands). A written terminal record is
//     announced as Put announces it (TerminalWatcher), in the same step.
//   - The ActiveIndex (Redis only): updated for the Created and terminal
//     states only (Put updates it on every applied write); Stuck reads
//     each candidate's record, so the steps in between need no index
//     write. On a single server it is written in the same atomic step as
//     the append, once its checks passed; on a Redis Cluster (the index
//     shard is another slot) best-effort right after the write landed.
//     The FinishedIndex, where it is kept, gets a terminal order the same
//     way.
//   - The other stores' writes: each store's contract for what it adds;
//     each reports, by its position, whether it wrote (Outcome.Wrote).
type Committer interface {
	Commit(ctx context.Context, u *eventstore.Unit, state *contracts.OrderState) (eventstore.Outcome, error)
}

// RedisCommitterConfig wires a RedisCommitter.
type RedisCommitterConfig struct {
	// Events and ReadModel are required and must live on the same Redis:
	// the step is one script over the order's keys of both stores.
	Events    *eventstore.Redis
	ReadModel *Redis
}

// RedisCommitter is Committer on Redis: the read model's part of
// an order's eventstore.Unit, this store's record (key, fields, encoded
// state) as the unit's eventstore.Projection, whose guard is Put's.
//
// It is the only way an event is recorded with its projection: the two
// stores are one deployment (a split is refused at start), and an order's
// keys of both share its hash slot, so this is one script on a lone
// server, on Sentinel and on Redis Cluster alike. A record still lags its
// stream only where a step was recorded without it on purpose (the
// interrupt fixtures) or a failover lost writes; Continue then re-projects
// a terminal order whose record is missing or older than its fold, and
// Rebuild rewrites it from the stream alone.
type RedisCommitter struct {
	events  *eventstore.Redis
	records *Redis
	// inScript: both stores' clients talk to one server, so the index
	// entry is written in the append's script.
	inScript bool
}

var _ Committer = (*RedisCommitter)(nil)

// NewRedisCommitter returns the committer over cfg's stores, or an
// error wrapping ErrConfig when one is missing. It cannot tell whether the
// two are one deployment; the caller checks that first.
func NewRedisCommitter(cfg RedisCommitterConfig) (*RedisCommitter, error) {
	if cfg.Events == nil || cfg.ReadModel == nil {
		return nil, fmt.Errorf("%w: RedisCommitterConfig needs both Events and ReadModel", ErrConfig)
	}
	return &RedisCommitter{
		events: cfg.Events, records: cfg.ReadModel,
		inScript: cfg.Events.SingleServer() && cfg.ReadModel.singleServer(),
	}, nil
}

// Commit implements Committer: it adds this store's record of state, the fold the unit's events
// lead to, to u and commits u through the event store
// (eventstore.Redis.Commit): one script with whatever other stores added.
// On a Redis Cluster only companions in the order's hash slot
// (eventstore.ErrConfig otherwise, before anything is sent).
func (p *RedisCommitter) Commit(ctx context.Context, u *eventstore.Unit, state *contracts.OrderState) (eventstore.Outcome, error) {
	orderID := u.OrderID()
	key, encoded, err := p.records.encode(orderID, state)
	if err != nil {
		return eventstore.Outcome{}, err
	}
	// Only the first and the last projection touch the index: two index
	// commands per order instead of one per event. In between the entry
	// keeps its Created score, which only bounds the order's last change
	// from below; Stuck reads each candidate's record for its real age.
	st := state.GetStatus()
	indexed := st == contracts.OrderStatus_Created || Terminal(st)
	// On one server the index entry rides in the append's script: no round
	// trip of its own. On a Redis Cluster its shard is another slot than
	// the order's keys, so it stays a command of its own after the append
	// (a cross-order index is derived: the reconciler repairs a lost one).
	var entry eventstore.IndexEntry
	inScript := indexed && p.inScript
	if inScript {
		entry = p.records.indexEntry(orderID, state)
		if Terminal(st) && p.records.finished {
			u.SortedSetAdd(p.records.keys.finished(shardOf(orderID)), orderID, state.GetUpdatedAtUnixMs())
		}
	}
	u.Project(eventstore.Projection{
		Key:           key,
		VersionField:  fieldVersion,
		StateField:    fieldState,
		State:         encoded,
		Notify:        p.records.noticeChannel(orderID, state),
		NotifyMessage: p.records.notice(orderID, state, encoded),
		Index:         entry,
	})
	out, err := p.events.Commit(ctx, u)
	if err != nil || !indexed || inScript {
		return out, err
	}
	if ierr := p.records.IndexActive(ctx, orderID, state); ierr != nil {
		p.records.log.Warn("active-order index not updated; the append and its projection are",
			slog.String("order", orderID), slog.Any("error", ierr))
	}
	return out, nil
}
