package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Unit is one order's writes for one acknowledgement, committed as one
// script (Redis.Commit): the events appended at the expected version
// under the owner's fence, the read model's record of the fold they lead
// to (Project), and what other stores add to it.
//
// Each store adds its own writes through a method of its own package,
// under its own prefix and encoding, that takes the few methods of Unit
// it uses as an interface of its own: no store imports another, and this
// package spells none of their keys or encodings, it only runs the ops
// (readmodel.RedisCommitter.Commit, commerce.Redis.AddStartedMark,
// relocation.Redis.AddFirstEnvelope).
//
// Every key of a unit carries the order's hash tag, so the script runs on
// the order's slot on a lone server, on Sentinel and on Redis Cluster
// alike; a write outside that slot (a cross-order index) is refused on a
// Redis Cluster before anything is sent.
//
// A Unit is built by one goroutine and committed once; it is not safe for
// concurrent use.
type Unit struct {
	orderID  string
	expected int64
	fence    Fence
	events   []Envelope

	projection *Projection
	// Writes are the companions, in the order added; a unit takes them
	// through the methods of Writes (SetIfAbsent, HashSetIf, ...).
	Writes
}

// NewUnit starts a unit that appends events to orderID's stream at
// expectedVersion under fence.
func NewUnit(orderID string, expectedVersion int64, fence Fence, events []Envelope) *Unit {
	return &Unit{orderID: orderID, expected: expectedVersion, fence: fence, events: events}
}

// OrderID is the order the unit writes.
func (u *Unit) OrderID() string { return u.orderID }

// ExpectedVersion is the stream version the append expects to find.
func (u *Unit) ExpectedVersion() int64 { return u.expected }

// Fence is the owner's fence the append runs under.
func (u *Unit) Fence() Fence { return u.fence }

// Events are the events the unit appends, in order.
func (u *Unit) Events() []Envelope { return u.events }

// Version is the stream version the unit leads to.
func (u *Unit) Version() int64 { return u.expected + int64(len(u.events)) }

// Project sets the unit's projection: the read model's record of the
// fold at Version, under the guard Projection states (its Version is the
// unit's). A unit has one projection; a second call replaces it.
func (u *Unit) Project(p Projection) {
	p.Version = u.Version()
	u.projection = &p
}

// Writes collects companion writes in the order they are to run, each
// method adding one and returning its position (Outcome.Wrote): a Unit's
// own, or writes a store hands to a unit it does not build (an order's
// first append carrying an activation's Ready, workflow.Order's
// CarryFirstWrite). A store adds its writes through an interface of its
// own with the methods it uses, which *Writes and *Unit both have.
type Writes []Companion

// Add appends companions and returns the position of the first of them.
func (w *Writes) Add(c ...Companion) int {
	at := len(*w)
	*w = append(*w, c...)
	return at
}

// SetIfAbsent adds value at key unless the key exists (the first write
// wins).
func (w *Writes) SetIfAbsent(key string, value []byte) int {
	return w.Add(Companion{Op: SetIfAbsent, Key: key, Value: value})
}

// HashSetIf adds field = value in the hash at key if, and only if, its
// ifField holds ifValue; Outcome.Wrote tells whether the condition held.
func (w *Writes) HashSetIf(key, ifField, ifValue, field string, value []byte) int {
	return w.Add(Companion{Op: HashSetIf, Key: key, IfField: ifField, IfValue: ifValue, Field: field, Value: value})
}

// HashSet adds field = value in the hash at key.
func (w *Writes) HashSet(key, field string, value []byte) int {
	return w.Add(Companion{Op: HashSet, Key: key, Field: field, Value: value})
}

// HashDelete adds the removal of field from the hash at key.
func (w *Writes) HashDelete(key, field string) int {
	return w.Add(Companion{Op: HashDelete, Key: key, Field: field})
}

// Delete adds the removal of key.
func (w *Writes) Delete(key string) int { return w.Add(Companion{Op: Delete, Key: key}) }

// ListPushCapped adds value to the list at key, keeping its newest
// capacity entries.
func (w *Writes) ListPushCapped(key string, value []byte, capacity int) int {
	return w.Add(Companion{Op: ListPushCapped, Key: key, Value: value, Cap: capacity})
}

// SetAdd adds value to the set at key.
func (w *Writes) SetAdd(key string, value []byte) int {
	return w.Add(Companion{Op: SetAdd, Key: key, Value: value})
}

// SortedSetAdd adds member to the sorted set at key with score.
func (w *Writes) SortedSetAdd(key, member string, score int64) int {
	return w.Add(Companion{Op: SortedSetAdd, Key: key, Value: []byte(member), Field: strconv.FormatInt(score, 10)})
}

// Require adds a condition, checked before anything of the unit is
// written: the string at key holds value (ErrPrecondition otherwise).
func (w *Writes) Require(key string, value []byte) int {
	return w.Add(Companion{Op: Require, Key: key, Value: value})
}

// Outcome is what a committed unit wrote.
type Outcome struct {
	// Version is the stream's version after the append.
	Version int64
	// Applied tells, per companion in the order added, whether it wrote.
	Applied []bool
}

// Wrote reports whether the companion at position i (Unit.Add's) wrote;
// false for a position the unit does not have.
func (o Outcome) Wrote(i int) bool { return i >= 0 && i < len(o.Applied) && o.Applied[i] }

// ErrNoProjection: a unit was committed without a projection. Every
// acknowledging write of an order carries its record; an event recorded
// without one is Append's business.
var ErrNoProjection = errors.New("eventstore: a unit needs a projection")

// Commit writes u in one script: the Require
// companions' checks, the append's (fence, expected version, source
// command, with Append's errors and nothing written when one fails),
// then the projection under its guard, then the companions in order. An
// empty batch writes nothing.
func (r *Redis) Commit(ctx context.Context, u *Unit) (Outcome, error) {
	if u == nil {
		return Outcome{}, ErrNoProjection
	}
	if u.projection == nil {
		return Outcome{}, fmt.Errorf("%w (order %s)", ErrNoProjection, u.orderID)
	}
	v, applied, err := r.appendProjectedWith(ctx, u.orderID, u.expected, u.fence, u.events, *u.projection, u.Writes)
	return Outcome{Version: v, Applied: applied}, err
}
