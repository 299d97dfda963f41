package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
)

// MoveStage names the steps of a planned relocation, for the operation
// record kept by the caller.
type MoveStage string

const (
	MoveStarted         MoveStage = "moving"
	MoveTargetActivated MoveStage = "target-activated"
	MoveCommitted       MoveStage = "committed"
	MoveAborted         MoveStage = "aborted"
)

// MovePlan names what a relocation moves and where.
type MovePlan struct {
	Kind     string
	Identity string
	// Source is the current owner's pid; the caller is that owner, in its
	// own turn, so the move never splits a turn.
	Source *actor.PID
	// TargetNode is an operator-chosen node name; empty lets the cluster
	// pick another eligible member.
	TargetNode  string
	OperationID string
	// Progress is told each stage before the next begins.
	Progress func(stage MoveStage, target string, generation int64)
}

// Move relocates an identity to another member with the same generation:
// Ready → Moving (callers wait) → the target activates and replays → Ready
// at the target. A failure before the target activated rolls back to the
// source; after it, only completion is possible (the target's activation
// fenced the source), so the error says to repeat the operation. Repeating
// with the same OperationID resumes.
func (l *Lookup) Move(ctx context.Context, p MovePlan) (location.Record, error) {
	report := func(s MoveStage, target string, g int64) {
		if p.Progress != nil {
			p.Progress(s, target, g)
		}
	}
	gen, err := l.store.BeginMove(ctx, p.Kind, p.Identity, p.Source.Id, p.OperationID)
	if err != nil {
		if errors.Is(err, location.ErrNotOwner) || errors.Is(err, location.ErrInvalidIdentity) {
			return location.Record{}, err
		}
		// The store did not answer, or did not confirm the write (a
		// replica short): the record may read Moving under this
		// operation, which nobody else knows of. Roll it back, or the
		// identity waits for a Ready that never comes.
		if rerr := l.rollBack(ctx, p); rerr != nil {
			return location.Record{}, fmt.Errorf("%w: relocation of %s: %w (roll back: %w)", ErrMoveInDoubt, p.Identity, err, rerr)
		}
		return location.Record{}, fmt.Errorf("%w: %s: %w", ErrMoveNotBegun, p.Identity, err)
	}
	target, err := l.pickTarget(ctx, p.Kind, p.Identity, p.TargetNode, l.Self())
	if err != nil {
		_ = l.rollBack(ctx, p)
		report(MoveAborted, "", gen)
		return location.Record{}, fmt.Errorf("%w: %w", ErrMoveRolledBack, err)
	}
	report(MoveStarted, target.Id, gen)
	pid, _, err := l.activateOn(ctx, target, p.Kind, p.Identity, gen, ActivationReason_ACTIVATION_REASON_RELOCATION, "", nil)
	if err != nil {
		_ = l.rollBack(ctx, p)
		report(MoveAborted, target.Id, gen)
		return location.Record{}, fmt.Errorf("%w: relocation of %s: %w", ErrMoveRolledBack, p.Identity, err)
	}
	report(MoveTargetActivated, target.Id, gen)
	rec := location.Record{Status: location.Ready, Owner: target.Id, PIDAddress: pid.Address, PIDID: pid.Id, Generation: gen}
	if err := l.commitMove(ctx, p, rec); err != nil {
		return location.Record{}, fmt.Errorf("relocation of %s activated the target but did not commit; repeat operation %s: %w", p.Identity, p.OperationID, err)
	}
	l.cluster.PidCache.Set(p.Identity, p.Kind, pid)
	report(MoveCommitted, target.Id, gen)
	return rec, nil
}

// moveRollbackBound bounds how long a relocation keeps trying to roll its
// record back or commit it: long enough to outlast a store failover,
// including one whose new primary has no replica for WAIT to count for a
// while.
const moveRollbackBound = 30 * time.Second

// rollBack returns the record to Ready at its source if it is Moving
// under p's operation (AbortMove, which leaves any other record alone),
// retrying while the store does not answer or confirm (settle): a
// rollback left undone leaves the record Moving, and every caller
// waiting.
func (l *Lookup) rollBack(ctx context.Context, p MovePlan) error {
	return settle(ctx, func(c context.Context) error { return l.store.AbortMove(c, p.Kind, p.Identity, p.OperationID) }, nil)
}

// commitMove makes the target the Ready owner (CommitMove, a no-op once
// done), retrying as rollBack does: the target activated and fenced the
// source, so a commit left undone leaves the record Moving with nobody
// serving it. A record no longer Moving under the operation
// (ErrNotOwner) is final.
func (l *Lookup) commitMove(ctx context.Context, p MovePlan, target location.Record) error {
	return settle(ctx, func(c context.Context) error {
		return l.store.CommitMove(c, p.Kind, p.Identity, p.OperationID, target)
	}, func(err error) bool { return errors.Is(err, location.ErrNotOwner) })
}

// settle runs write until it succeeds or fails for good (final), and
// retries a store that does not answer or confirm for up to
// moveRollbackBound, whatever ctx says: the caller's deadline must not
// leave a record half moved.
func settle(ctx context.Context, write func(context.Context) error, final func(error) bool) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveRollbackBound)
	defer cancel()
	wait := retry.Backoff(50*time.Millisecond, time.Second)
	for {
		err := write(c)
		if err == nil || (final != nil && final(err)) {
			return err
		}
		t := time.NewTimer(wait.NextBackOff())
		select {
		case <-c.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// pickTarget finds the named member, or another eligible member than
// exclude (the current owner), that reads id's state (readers): a named
// member whose build does not is refused with ErrVersionUnsupported.
func (l *Lookup) pickTarget(ctx context.Context, kind, id, node, exclude string) (*pcluster.Member, error) {
	self := exclude
	if node != "" {
		m, err := l.MemberByNode(ctx, node)
		if err != nil {
			return nil, err
		}
		if m.Id == self {
			return nil, fmt.Errorf("%w: %s already owns it", location.ErrNotOwner, node)
		}
		if !m.HasKind(kind) {
			return nil, fmt.Errorf("%w: %s does not host %s", ErrNoMember, node, kind)
		}
		if _, err := l.readers(ctx, kind, id, []*pcluster.Member{m}); err != nil {
			return nil, fmt.Errorf("%s: %w", node, err)
		}
		return m, nil
	}
	var others []*pcluster.Member
	for _, m := range l.Eligible(kind) {
		if m.Id != self {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return nil, fmt.Errorf("%w: no other member hosts %s", ErrNoMember, kind)
	}
	start := int(l.rr.Add(1)) % len(others)
	others = slices.Concat(others[start:], others[:start])
	others, err := l.readers(ctx, kind, id, others)
	if err != nil {
		return nil, err
	}
	return others[0], nil
}

// CompleteMove finishes a relocation that was interrupted after it began
// (its operation id is still the record's moveOp): it activates the target
// with the same generation — an activator hands back a target that already
// activated — commits it, and stops the source, which the target's fence
// has cut off from the stream. If the target cannot be activated the move
// rolls back to the source. Repeating a committed move is a no-op.
func (l *Lookup) CompleteMove(ctx context.Context, p MovePlan) (location.Record, error) {
	report := func(s MoveStage, target string, g int64) {
		if p.Progress != nil {
			p.Progress(s, target, g)
		}
	}
	rec, err := l.store.Get(ctx, p.Kind, p.Identity)
	if err != nil {
		return location.Record{}, err
	}
	if rec.Status != location.Moving || rec.MoveOp != p.OperationID {
		return location.Record{}, fmt.Errorf("%w: relocation %s of %s is not in progress", location.ErrNotOwner, p.OperationID, p.Identity)
	}
	source := actor.NewPID(rec.PIDAddress, rec.PIDID)
	target, err := l.pickTarget(ctx, p.Kind, p.Identity, p.TargetNode, rec.Owner)
	if err != nil {
		_ = l.rollBack(ctx, p)
		report(MoveAborted, "", rec.Generation)
		return location.Record{}, fmt.Errorf("%w: %w", ErrMoveRolledBack, err)
	}
	pid, _, err := l.activateOn(ctx, target, p.Kind, p.Identity, rec.Generation, ActivationReason_ACTIVATION_REASON_RELOCATION, "", nil)
	if err != nil {
		_ = l.rollBack(ctx, p)
		report(MoveAborted, target.Id, rec.Generation)
		return location.Record{}, fmt.Errorf("%w: relocation of %s: %w", ErrMoveRolledBack, p.Identity, err)
	}
	report(MoveTargetActivated, target.Id, rec.Generation)
	done := location.Record{Status: location.Ready, Owner: target.Id, PIDAddress: pid.Address, PIDID: pid.Id, Generation: rec.Generation}
	if err := l.commitMove(ctx, p, done); err != nil {
		return location.Record{}, err
	}
	l.cluster.PidCache.RemoveByValue(p.Identity, p.Kind, source)
	if l.Live(rec.Owner) {
		l.cluster.ActorSystem.Root.Poison(source)
	}
	report(MoveCommitted, target.Id, rec.Generation)
	return done, nil
}
