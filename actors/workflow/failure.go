package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Permanent reports whether retrying the operation that failed with err
// can never succeed without an operator: the stream or a record cannot be
// decoded, the command contradicts what is recorded, the inventory refused
// a release the stream records as held, or a record the order needs does
// not exist. A fenced owner (ErrFenced) is permanent for that owner too.
//
// Everything else is transient and retried with backoff by the order's
// owner: a store that did not answer (every store's ErrUnavailable), a
// deadline, an append whose outcome is unknown (the fold is reloaded
// first), and any error this list does not know, because retrying an
// operation keyed by deterministic ids is safe while giving up on it
// wedges the order.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []error{
		eventstore.ErrCorrupt, readmodel.ErrCorrupt, commerce.ErrCorrupt,
		eventstore.ErrFenced, ErrConflict, ErrKeyReused, ErrInvalidArgument, ErrReleaseRefused, ErrNotFound,
		commerce.ErrInvalidArgument, commerce.ErrNotFound, eventstore.ErrInvalidOrderID,
	} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// repair finishes what an earlier start left half done once its event
// was recorded: the idempotency mapping that was not marked started (the
// projection rode in the event's append). The write is idempotent, so
// repeating it after an unknown outcome is harmless.
func (s *Service) repair(ctx context.Context, o *Order) error {
	if req := o.startInDoubt; req != nil && !o.stale {
		o.startInDoubt = nil
		if o.state.Started && o.state.StartSourceCommandID == req.SourceCommandId {
			// It landed: finish it as the start itself would have.
			o.start = req
			o.unmarkedKey = req.IdempotencyKey
		}
	}
	if o.unmarkedKey != "" {
		if err := s.cfg.Idempotency.MarkStarted(ctx, o.unmarkedKey, o.id); err != nil {
			return fmt.Errorf("mark idempotency key of order %s started: %w", o.id, err)
		}
		o.unmarkedKey = ""
	}
	return nil
}

// NeedsWork reports whether the owner has something left to do for the
// order without being asked: a step the fold decides, or a repair of a
// start whose mapping was not marked started.
func (s *Service) NeedsWork(o *Order) bool {
	if o == nil || (!o.Exists() && !o.stale) {
		return false
	}
	if o.stale || o.unmarkedKey != "" {
		return true
	}
	return !o.state.Status.Terminal()
}
