// Package readmodel owns the OrderReadModelStore: the derived per-order
// lookup model, guarded by the stream version it reflects, and beside it
// the ActiveIndex of non-terminal orders that the stuck-order report reads,
// and the terminal notices: the writes that make a record terminal announce
// it on the order's own channel, and a TerminalWatcher (on Redis, one
// TerminalFeed per process, subscribed to the orders it has waiters for)
// wakes the waiters of that order, so nobody polls the store.
//
// It is a projection that can always be rebuilt from the event stream; it
// must not import actors/workflow, actors/grain, cluster or edge. It
// imports eventstore for one reason: it owns the projected append
// (RedisCommitter), the one write that spans the event store and this
// store.
package readmodel

import (
	"context"
	"errors"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

var (
	// ErrConfig: NewRedis or NewRedisCommitter was given a Config it
	// cannot work with.
	ErrConfig = errors.New("readmodel: invalid config")
	// ErrNotFound: no projection is stored for the order.
	ErrNotFound = errkind.New(errkind.NotFound, "readmodel: order not found")
	// ErrCorrupt: the stored projection cannot be decoded.
	ErrCorrupt = errors.New("readmodel: corrupt projection")
)

// Store is the OrderReadModelStore. All methods are safe for concurrent use.
type Store interface {
	// Get returns the projection and the stream version it reflects, or
	// ErrNotFound.
	Get(ctx context.Context, orderID string) (*contracts.OrderState, int64, error)

	// Put stores state as the projection of stream version version, in one
	// atomic step, unless a projection of a newer version is stored: then
	// it writes nothing and reports applied=false. Equal versions
	// overwrite, so a rebuild can repair a damaged record. The projected
	// append writes the record under the same guard.
	//
	// An applied write of a terminal record (Confirmed or Failed) is
	// announced to the store's TerminalWatchers in the same atomic step
	// (terminal.go); a refused one, or one of another status, is not.
	Put(ctx context.Context, orderID string, version int64, state *contracts.OrderState) (applied bool, err error)

	// Replace stores state as the projection of stream version version,
	// in one atomic step, whatever version is stored: the repair of a
	// projection ahead of its stream, which a store failover that lost
	// the stream's newest events leaves behind and Put's guard would keep
	// for good. Only the order's owner calls it, right after it replayed
	// the stream and checked that its fence is current and the stream
	// still at version; a terminal record is announced as by Put.
	Replace(ctx context.Context, orderID string, version int64, state *contracts.OrderState) error

	// Delete removes the projection. Deleting an absent one is not an error.
	Delete(ctx context.Context, orderID string) error
}
