package eventstore

import (
	"context"
	"errors"
	"fmt"
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
// (readmodel.ProjectedAppend.Commit, commerce.Redis.AddStartedMark,
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
	with       []Companion
}

// NewUnit starts a unit that appends events to orderID's stream at
// expectedVersion under fence.
func NewUnit(orderID string, expectedVersion int64, fence Fence, events []Envelope) *Unit {
	return &Unit{orderID: orderID, expected: expectedVersion, fence: fence, events: events}
}

// OrderID is the order the unit writes.
func (u *Unit) OrderID() string { return u.orderID }

// Version is the stream version the unit leads to.
func (u *Unit) Version() int64 { return u.expected + int64(len(u.events)) }

// Project sets the unit's projection: the read model's record of the
// fold at Version, under the guard Projection states (its Version is the
// unit's). A unit has one projection; a second call replaces it.
func (u *Unit) Project(p Projection) {
	p.Version = u.Version()
	u.projection = &p
}

// Add appends companions, which run in the order added once the append's
// checks passed, and returns the position of the first of them
// (Outcome.Wrote).
func (u *Unit) Add(c ...Companion) int {
	at := len(u.with)
	u.with = append(u.with, c...)
	return at
}

// SetIfAbsent adds a SetIfAbsent companion: value at key unless the key
// exists (the first write wins). It returns its position.
func (u *Unit) SetIfAbsent(key string, value []byte) int {
	return u.Add(Companion{Op: SetIfAbsent, Key: key, Value: value})
}

// HashSetIf adds a HashSetIf companion: field = value in the hash at key
// if, and only if, its ifField holds ifValue. It returns its position;
// Outcome.Wrote tells whether the condition held.
func (u *Unit) HashSetIf(key, ifField, ifValue, field string, value []byte) int {
	return u.Add(Companion{Op: HashSetIf, Key: key, IfField: ifField, IfValue: ifValue, Field: field, Value: value})
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
	v, applied, err := r.appendProjectedWith(ctx, u.orderID, u.expected, u.fence, u.events, *u.projection, u.with)
	return Outcome{Version: v, Applied: applied}, err
}
