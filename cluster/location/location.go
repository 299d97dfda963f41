package location

import (
	"context"
	"errors"
	"time"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

var (
	// ErrConfig: NewRedis was given a Config it cannot work with.
	ErrConfig = errors.New("location: invalid config")
	// ErrTimeout: no answer within the request's time.
	ErrTimeout = errkind.New(errkind.Timeout, "location: timeout")
	// ErrStoreUnavailable: the Location Store could not be reached.
	ErrStoreUnavailable = errkind.New(errkind.StoreUnavailable, "location: store unavailable")
	// ErrLockLost: the creation lock expired before the activation
	// committed. Nothing was committed, and it happens when the activation
	// took longer than the lock's lease (a member too busy to finish in
	// time), so it is an overload: a retry is safe.
	ErrLockLost = errkind.New(errkind.Overloaded, "location: creation lock lost")
	// ErrSealed: the identity's state is sealed for good (an archived
	// order, Config.Sealed); nothing activates it again, and the
	// activation wrote nothing.
	ErrSealed = errkind.New(errkind.FailedPrecondition, "location: the identity is sealed; nothing activates it")
	// ErrNotOwner: the caller is not the identity's current owner.
	ErrNotOwner = errors.New("location: not the owner")
	// ErrInvalidIdentity: an identity (or member id) that cannot be stored.
	ErrInvalidIdentity = errkind.New(errkind.InvalidArgument, "location: invalid identity")
	// ErrClosed: the store's client was closed (its member stopped); it
	// comes wrapped with ErrStoreUnavailable, and a background loop that
	// sees it ends instead of retrying.
	ErrClosed = errors.New("location: store client closed")
)

// Status is an identity's authority state in the Location Store.
type Status string

const (
	// Missing: no owner; the next command cold-activates a new generation.
	Missing Status = ""
	// Creating: a caller holds the creation lock and is activating.
	Creating Status = "Creating"
	// Ready: Owner hosts the identity at PID.
	Ready Status = "Ready"
	// Moving: a planned relocation is under way; callers wait for Ready.
	Moving Status = "Moving"
)

// Record is one identity's authority as stored.
type Record struct {
	Status     Status
	Owner      string // protoactor member id of the owner
	PIDAddress string
	PIDID      string
	// Generation is the last activated generation. It survives release, so
	// the next cold activation is Generation+1.
	Generation int64
	MoveOp     string // relocation operation id while Moving
	// TakenOver marks an identity a takeover reset (ResetTakenOver) and
	// that no activation has committed Ready since: the next activation's
	// cause is the takeover, not a plain cold start. CommitReady clears it.
	TakenOver bool
}

// Store is the Location Store. All methods are safe for concurrent use;
// each is at most a few round trips and honours ctx. Unless a method says
// otherwise, a store that cannot be reached fails with ErrStoreUnavailable
// or ErrTimeout, and an identity that cannot be stored (empty, or with a
// brace) with ErrInvalidIdentity.
type Store interface {
	Authority
	Members
	SchemaLevels
	OwnershipHistory
	TakeoverIndex
}

// Authority is the per identity record: who owns it, at which pid and
// generation. Each method changes one record atomically and, when it
// changes who owns it, appends to its ownership history in the same step.
type Authority interface {
	// Get returns the identity's record; a never-seen identity is Missing
	// at generation 0.
	Get(ctx context.Context, kind, id string) (Record, error)

	// BeginCreate tries to become the creator of a Missing identity by
	// taking its creation lock for ttl under token. acquired reports
	// success; next is then the generation to activate (the stored one
	// plus one) and rec reads Creating, with TakenOver when a takeover
	// reset the identity since its last Ready owner. Otherwise rec is the
	// record as it stands (Ready or Moving, with its owner), or Creating
	// while another token holds the lock. A lock whose holder died expires
	// after ttl and can be taken again. Of many concurrent callers at most
	// one acquires.
	BeginCreate(ctx context.Context, kind, id, token string, ttl time.Duration) (acquired bool, next int64, rec Record, err error)

	// ExtendCreate keeps the creation lock held by token for ttl from now.
	// It fails with ErrLockLost when the lock expired or another token
	// holds it.
	ExtendCreate(ctx context.Context, kind, id, token string, ttl time.Duration) error

	// CommitReady records rec (Owner, PIDAddress, PIDID, Generation) as
	// the Ready owner and gives the lock back, if token still holds the
	// creation lock; else it fails with ErrLockLost and changes nothing.
	// It clears the TakenOver mark: the takeover's activation is done.
	// The owner is added to the takeover index (TakeoverIndex.Owned)
	// before the record names it.
	CommitReady(ctx context.Context, kind, id, token string, rec Record) error

	// RaiseCreating raises the generation of a record Creating under
	// token to generation, if token still holds the creation lock and the
	// stored generation is lower; a higher one is left alone. It fails
	// with ErrLockLost otherwise and changes nothing. The creator calls
	// it when the identity's state is fenced at generation, above the one
	// the record gave it (a record restored from an older snapshot): it
	// then activates generation+1, and a creation it aborts leaves the
	// record Missing at generation, so no later activation is refused
	// for the same reason.
	RaiseCreating(ctx context.Context, kind, id, token string, generation int64) error

	// AbortCreate gives the creation lock held by token back without
	// using up a generation; a record left Creating is Missing again,
	// TakenOver mark included. A token that no longer holds the lock
	// changes nothing.
	AbortCreate(ctx context.Context, kind, id, token string) error

	// Release makes a Ready identity Missing if pidID is still its owner
	// pid, and reports whether it did. With KeepGeneration the next
	// activation is generation+1; with GiveBackGeneration (an activation
	// that found nothing to own) the generation is given back, and an
	// identity back at generation 0 leaves no key at all, history
	// included. The history entry says why (WithReleaseReason on ctx, or
	// OwnershipDiscarded when the generation is given back).
	Release(ctx context.Context, kind, id, pidID string, gen Generation) (bool, error)

	// ReleaseDead makes a Ready identity Missing if it still names pidID
	// at owner (a member id), and reports whether it did: the repair of a
	// record whose grain provably does not exist. The generation is kept,
	// so the next activation fences whatever the dead one left. Of many
	// concurrent calls at most one releases.
	ReleaseDead(ctx context.Context, kind, id, owner, pidID string) (bool, error)

	// BeginMove marks a Ready identity owned by pidID as Moving under opID
	// and returns its generation. Repeating it with the same opID answers
	// the same generation and changes nothing. A record that is not Ready
	// at pidID fails with ErrNotOwner.
	BeginMove(ctx context.Context, kind, id, pidID, opID string) (int64, error)

	// CommitMove makes target (Owner, PIDAddress, PIDID) the Ready owner
	// of an identity Moving under opID, generation unchanged. Repeating it
	// after success is a no-op; a record not Moving under opID fails with
	// ErrNotOwner.
	CommitMove(ctx context.Context, kind, id, opID string, target Record) error

	// AbortMove returns an identity Moving under opID to Ready at its
	// source owner; any other record is left alone. Only valid before the
	// target activated: after that the source is fenced and the move must
	// be completed instead.
	AbortMove(ctx context.Context, kind, id, opID string) error
}

// OwnerReleaser is a Store that can release a record in the name of the
// member expected to own it: where the store allows it, that owner's
// takeover index entry (TakeoverIndex.Owned) goes in the same round trip.
type OwnerReleaser interface {
	// ReleaseAt is Store.Release, with owner the member id the caller
	// expects the record to name (its own, for a grain that passivates).
	// The result is Release's whoever the record names; only the index
	// removal depends on owner.
	ReleaseAt(ctx context.Context, kind, id, owner, pidID string, gen Generation) (bool, error)
}

// Members maps member ids to node names and keeps the gone records: a
// member recorded gone is gone for good (gone.go).
type Members interface {
	// PutMember publishes member id → node name, so operators and logs
	// can speak of workflow-a while ownership stays keyed by incarnation,
	// and the newest event schema the member reads (every older one too),
	// in one atomic step. schema 0 is a member that hosts no orders and
	// advertises none (an API); a negative schema fails with
	// ErrInvalidSchema, an empty member id with ErrInvalidIdentity.
	PutMember(ctx context.Context, memberID, node string, schema int) error
	// MemberSchemas returns member id → advertised schema for every
	// member that advertised one; a member absent from it that hosts
	// orders is of a build that predates the advertisement and reads
	// BaseSchema.
	MemberSchemas(ctx context.Context) (map[string]int, error)
	// MemberNames returns the whole member id → node name mapping.
	MemberNames(ctx context.Context) (map[string]string, error)
	// MemberName returns the node name memberID published, "" if none.
	MemberName(ctx context.Context, memberID string) (string, error)

	// MarkGone records that memberID (node name node, possibly empty) left
	// the topology at leftAtUnixMs. The first record of a member id wins
	// and is never changed: won reports whether this call wrote it. An
	// empty member id fails with ErrInvalidIdentity.
	MarkGone(ctx context.Context, memberID, node string, leftAtUnixMs int64) (won bool, err error)
	// Gone returns every member recorded gone, by member id.
	Gone(ctx context.Context) (map[string]GoneMember, error)
	// IsGone returns memberID's gone record, if there is one.
	IsGone(ctx context.Context, memberID string) (GoneMember, bool, error)
	// GoneVersion changes whenever the gone records do (a record
	// written, a member pruned), so a changed version tells a reader to
	// read them again.
	GoneVersion(ctx context.Context) (int64, error)
	// ProbeSelf is a member's self-fence read: its gone record, and when
	// it is not gone and bound is positive, its heartbeat written at the
	// store's clock with that bound, in one round trip (gone.go).
	ProbeSelf(ctx context.Context, memberID string, bound time.Duration) (GoneMember, bool, error)
	// MarkGoneIfStale is MarkGone only when memberID's heartbeat is older
	// than its bound by the store's clock, checked and written in one
	// atomic step; a fresh heartbeat writes nothing, and a stale one
	// while the store is not steady (it just came back) is Pending for
	// one bound before it counts (gone.go).
	MarkGoneIfStale(ctx context.Context, memberID, node string, leftAtUnixMs int64) (HeartbeatVerdict, error)
}

// OwnershipHistory is each identity's log of ownership changes, written
// by the Authority methods in the same step as the change.
type OwnershipHistory interface {
	// History returns the identity's ownership history, oldest first: at
	// most the newest HistoryCap events. A never-seen identity, or one
	// whose only activation was discarded, has none.
	History(ctx context.Context, kind, id string) ([]OwnershipEvent, error)
}

// TakeoverIndex finds and resets a lost member's identities (takeover.go).
type TakeoverIndex interface {
	// Owned returns the ids of kind that memberID's index lists: every
	// identity committed Ready at that member since the index existed,
	// and possibly some it no longer owns. Check each record before acting
	// on it, and ScanRecords for records older than the index.
	Owned(ctx context.Context, memberID, kind string) ([]string, error)
	// Unindex drops a stale entry from memberID's index: the record of
	// (kind, id) was found not to name that member.
	Unindex(ctx context.Context, memberID, kind, id string) error
	// ScanRecords calls fn with every non-empty record of kind, in no
	// particular order, one call at a time, and stops at fn's first
	// error, which it returns. It reads the whole keyspace: for
	// operators, never for a request path. A record may change while the
	// scan runs; fn sees each as it was read.
	ScanRecords(ctx context.Context, kind string, fn func(id string, rec Record) error) error
	// Reindex adds, from a ScanRecords, the index entry of every record of
	// kind that names an owner (Ready or Moving): it repairs entries that
	// a lost write left out, and returns how many records it indexed. It
	// drops nothing: an entry the records contradict is a takeover's to
	// drop, after it checked the record. Like ScanRecords it reads the
	// whole keyspace, and is for the index reconciler and operators.
	Reindex(ctx context.Context, kind string) (int, error)
	// ResetTakenOver makes the identity Missing at newGeneration, marked
	// TakenOver, if the record still names owner (a member id) at
	// oldGeneration, Ready or Moving, or names nobody at oldGeneration;
	// the outcome says what it found, and owner's index entry is dropped
	// unless another owner holds it. Repeating it is harmless: it never
	// marks a record past newGeneration. An empty owner or a newGeneration
	// not above oldGeneration fails with ErrInvalidIdentity. The caller
	// must have raised the stream's fence to newGeneration first.
	ResetTakenOver(ctx context.Context, kind, id, owner string, oldGeneration, newGeneration int64) (ResetOutcome, error)
}

// Generation says what a Release does with the generation its owner
// took.
type Generation int

const (
	// KeepGeneration leaves the counter where it is, so the next
	// activation is generation+1 and fences whatever the released owner
	// left behind: the release of an owner that recorded anything.
	KeepGeneration Generation = iota
	// GiveBackGeneration returns the generation: the release of an
	// activation that found no order to own, so a probe for an unknown
	// id uses up no generation and leaves no key.
	GiveBackGeneration
)
