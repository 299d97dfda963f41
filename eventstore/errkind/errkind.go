// Package errkind is the project's one vocabulary of error kinds: the
// reasons of the public error contract, which a client sees as an HTTP
// status, code and reason (edge/errors.go) and a grain's caller sees as a
// reason code (actors/grain/errors.go).
//
// A package gives a sentinel its kind where it declares it (New), so a
// caller several layers up can classify any error by its kind (Of) without
// importing the package that raised it. The kind is a classification in
// addition to the sentinel, never instead of it: errors.Is on the sentinel
// keeps working, and a sentinel without a kind is Internal to everyone
// outside its package.
//
// It lives under eventstore, the lowest top-level folder that needs it,
// rather than beside the contracts: the stores (eventstore, readmodel,
// cluster/location, cluster/relocation) and placement give their
// sentinels kinds, and a vocabulary above them would make every one of
// them import upward. Mapping each store's plain sentinels to kinds where
// they meet (the grain, the edge, the workflow's retry rule) was the
// other way; it would have spread one table over three places that must
// agree, while a kind given where the sentinel is declared cannot drift.
//
// It imports only the standard library and must import nothing of the
// project, so that every layer but the pure domain (actors/order) may use
// it.
package errkind

import (
	"context"
	"errors"
)

// Kind is one class of failure as the public contract names it. A Kind is
// itself an error so that errors.Is(err, NotFound) asks whether err
// carries that kind.
type Kind uint8

// The kinds. Their meaning never changes; new ones are added at the end.
const (
	// Internal: nothing the caller can act on; also every error that has
	// no kind.
	Internal Kind = iota
	// InvalidArgument: the request or an identifier in it is malformed.
	InvalidArgument
	// NotFound: the order (or the record asked for) does not exist.
	NotFound
	// Conflict: the command conflicts with what the order has recorded.
	Conflict
	// FailedPrecondition: the operation cannot run in the order's current
	// situation.
	FailedPrecondition
	// OwnerGone: the order's Ready owner has left; nothing fails over by
	// itself (the contract's reason UNAVAILABLE).
	OwnerGone
	// StoreUnavailable: a store could not be reached; the owner is fine
	// and the same request may succeed soon.
	StoreUnavailable
	// NoEligibleMember: no live member can host what the request needs
	// until a member (re)joins.
	NoEligibleMember
	// RelocationRolledBack: a relocation of the order failed and its
	// previous owner is Ready again.
	RelocationRolledBack
	// Timeout: the time ran out before the order or a store answered;
	// context.DeadlineExceeded is one.
	Timeout
	// Canceled: the caller gave up (or the process is stopping);
	// context.Canceled is one.
	Canceled
	// Overloaded: the process that answered has no room for the request
	// right now (its in-flight budget, a grain's mailbox or its hosting
	// cap is full); nothing was done, and a retry after a short, jittered
	// pause is safe.
	Overloaded
	// OwnerUnreachable: the order's owner is still a member of the
	// topology, but the process that answered cannot reach it; other
	// processes may, and the owner is not gone.
	OwnerUnreachable
	// StoreFull: a store refused a write because it reached its memory
	// limit (Redis' OOM reply under noeviction). Nothing of the write was
	// applied; the same request may succeed once memory is freed, but not
	// by waiting alone. It is a store outage that tells the operator what
	// to fix, so every error of this kind is also StoreUnavailable to a
	// caller that only asks whether to retry.
	StoreFull
	// KeyReused: a client's idempotency key already stands for a
	// different request (another cart, shipping address or payment
	// method); nothing was done, and retrying the same request never
	// helps.
	KeyReused
	// VersionUnsupported: what the request needs was written by a newer
	// schema than the process that answered can read (a rolling upgrade
	// or a rollback in progress). Nothing was done; a member that reads
	// that schema can serve it, so it is an outage of this build, not a
	// failure of the order.
	VersionUnsupported
)

var names = [...]string{
	Internal:             "internal",
	InvalidArgument:      "invalid argument",
	NotFound:             "not found",
	Conflict:             "conflict",
	FailedPrecondition:   "failed precondition",
	OwnerGone:            "owner gone",
	StoreUnavailable:     "store unavailable",
	NoEligibleMember:     "no eligible member",
	RelocationRolledBack: "relocation rolled back",
	Timeout:              "timeout",
	Canceled:             "canceled",
	Overloaded:           "overloaded",
	OwnerUnreachable:     "owner unreachable",
	StoreFull:            "store full",
	KeyReused:            "key reused",
	VersionUnsupported:   "version unsupported",
}

// All returns every kind, Internal first, so that a mapping can prove it
// covers them all.
func All() []Kind {
	all := make([]Kind, len(names))
	for i := range all {
		all[i] = Kind(i)
	}
	return all
}

// String returns the kind's name.
func (k Kind) String() string {
	if int(k) < len(names) {
		return names[k]
	}
	return "unknown kind"
}

// Error makes a Kind a target for errors.Is.
func (k Kind) Error() string { return "errkind: " + k.String() }

// New returns a sentinel error with message msg that also is kind k:
// errors.Is(err, sentinel) and errors.Is(err, k) both hold for every err
// that wraps it. Its message is msg alone, so giving an existing sentinel a
// kind changes no log line.
func New(k Kind, msg string) error { return &sentinel{kind: k, msg: msg} }

type sentinel struct {
	kind Kind
	msg  string
}

func (s *sentinel) Error() string { return s.msg }

func (s *sentinel) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == s.kind
}

// precedence is the order in which Of looks for a kind when an error
// carries several (a store that wraps an expired context in its own
// Unavailable, a failed precondition that names the rolled-back relocation
// behind it). A deadline or a cancellation says more than the store error
// that wrapped it; a refusal (not found, invalid, precondition) says more
// than the outage behind it; of the outages, the dead owner says most,
// and an overload (nothing was tried) less than any outage behind it.
var precedence = []Kind{
	Timeout, NotFound, InvalidArgument, KeyReused, Conflict, FailedPrecondition, VersionUnsupported,
	Canceled, OwnerGone, OwnerUnreachable, StoreFull, StoreUnavailable, NoEligibleMember, RelocationRolledBack,
	Overloaded,
}

// Of returns the kind of err: the first of its kinds in precedence order
// (Timeout, NotFound, InvalidArgument, KeyReused, Conflict, FailedPrecondition,
// VersionUnsupported, Canceled, OwnerGone, OwnerUnreachable, StoreFull, StoreUnavailable,
// NoEligibleMember, RelocationRolledBack, Overloaded), where context.DeadlineExceeded counts as Timeout
// and context.Canceled as Canceled. An error with no kind, and nil, are
// Internal.
func Of(err error) Kind {
	if err == nil {
		return Internal
	}
	for _, k := range precedence {
		if errors.Is(err, k) ||
			k == Timeout && errors.Is(err, context.DeadlineExceeded) ||
			k == Canceled && errors.Is(err, context.Canceled) {
			return k
		}
	}
	return Internal
}
