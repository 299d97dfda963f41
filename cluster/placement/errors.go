package placement

import (
	"errors"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// The placement's own failures. A failure of the Location Store itself
// comes wrapped in location's sentinels (location.ErrStoreUnavailable,
// location.ErrTimeout, location.ErrNotOwner, location.ErrInvalidIdentity),
// and so does a call that runs out of time here: one timeout, whichever
// layer ran out of it.
var (
	// ErrUnavailable: the identity is Ready at an owner that has left the
	// topology (or is leaving, or is recorded gone). Nothing is activated
	// anywhere instead.
	ErrUnavailable = errkind.New(errkind.OwnerGone, "placement: owner unavailable")
	// ErrNoMember: no live member hosts the kind.
	ErrNoMember = errkind.New(errkind.NoEligibleMember, "placement: no eligible member")
	// ErrMoveRolledBack: a relocation failed before the target activated
	// and the source is the Ready owner again.
	ErrMoveRolledBack = errkind.New(errkind.RelocationRolledBack, "placement: relocation rolled back")
	// ErrMoveNotBegun: a relocation's first write failed for want of the
	// store (it did not answer, or a replica did not confirm the write)
	// and whatever of it may have landed was rolled back: the source is
	// the Ready owner, and the error says why the store failed.
	ErrMoveNotBegun = errors.New("placement: relocation did not begin")
	// ErrMoveInDoubt: a relocation's first write may have landed (the
	// store did not answer, or a replica did not confirm it) and rolling
	// it back did not succeed within its bound either: the record may
	// read Moving under the operation until the operation is repeated.
	// No target was activated, so the source still owns the identity.
	ErrMoveInDoubt = errors.New("placement: relocation in doubt, not rolled back")
	// ErrOverloaded: this member has no room for the request right now
	// (the grain's mailbox is full, or every hosted grain has work left
	// and the hosting cap is reached); nothing was done.
	ErrOverloaded = errkind.New(errkind.Overloaded, "placement: member overloaded")
	// ErrOwnerUnreachable: the identity's owner is in the topology but
	// this member cannot reach it; it is not gone.
	ErrOwnerUnreachable = errkind.New(errkind.OwnerUnreachable, "placement: owner unreachable")
	// ErrVersionUnsupported: the identity's state holds what no member
	// that was asked can read (an event of a newer schema than their
	// builds); nothing was spawned. A member of a newer build can.
	ErrVersionUnsupported = errkind.New(errkind.VersionUnsupported, "placement: no member asked reads the identity's state")
	// ErrOpen classes why a grain could not open its state: its sentinel
	// decides whether the activation failure is reported as a store outage
	// (retry later) or as a permanent failure of this identity.
	ErrOpen = errors.New("placement: grain could not open its state")
	// ErrEvicted: this member is recorded gone; it must stop hosting.
	ErrEvicted = errors.New("placement: this member is recorded gone")
	// ErrLeaseExpired: this member went longer than its lease without
	// reading its gone record. Its process did not run meanwhile, so it
	// cannot know whether it was recorded gone and taken over: it must stop
	// hosting. (A store that did not answer while the process ran suspends
	// the member instead; the reason it suspended wraps this too.)
	ErrLeaseExpired = errors.New("placement: lease expired without a read of this member's gone record")
)
