package grain

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Every sentinel crosses the grain boundary as its stable reason code and
// comes back as the caller-side sentinel of that code.
func TestErrorsCrossTheGrainBoundaryAsReasonCodes(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		reason contracts.ErrorReason
		back   error // the caller-side sentinel; nil means err itself
	}{
		{"not found", workflow.ErrNotFound, contracts.ErrorReason_ERROR_REASON_NOT_FOUND, nil},
		{"invalid argument", workflow.ErrInvalidArgument, contracts.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, nil},
		{"conflict", workflow.ErrConflict, contracts.ErrorReason_ERROR_REASON_CONFLICT, nil},
		{"owner gone", placement.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_UNAVAILABLE, nil},
		{"timeout", location.ErrTimeout, contracts.ErrorReason_ERROR_REASON_TIMEOUT, nil},
		{"turn deadline", context.DeadlineExceeded, contracts.ErrorReason_ERROR_REASON_TIMEOUT, location.ErrTimeout},
		{"store deadline", fmt.Errorf("%w: append: %w", eventstore.ErrUnavailable, context.DeadlineExceeded),
			contracts.ErrorReason_ERROR_REASON_TIMEOUT, location.ErrTimeout},
		{"key reused", workflow.ErrKeyReused, contracts.ErrorReason_ERROR_REASON_KEY_REUSED, nil},
		{"failed precondition", ErrFailedPrecondition, contracts.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, nil},
		{"relocation without a member", fmt.Errorf("%w: %w: %w", ErrFailedPrecondition, placement.ErrMoveRolledBack, placement.ErrNoMember),
			contracts.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, ErrFailedPrecondition},
		{"store unavailable", ErrStoreUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, nil},
		{"event store", eventstore.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, ErrStoreUnavailable},
		{"read model", readmodel.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, ErrStoreUnavailable},
		{"commerce", commerce.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, ErrStoreUnavailable},
		{"relocation store", relocation.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, ErrStoreUnavailable},
		{"fixture store", fixture.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, ErrStoreUnavailable},
		{"location store", location.ErrStoreUnavailable, contracts.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, ErrStoreUnavailable},
		{"store full", ErrStoreFull, contracts.ErrorReason_ERROR_REASON_STORE_FULL, nil},
		{"event store full", fmt.Errorf("%w: %w: append", eventstore.ErrUnavailable, errkind.StoreFull),
			contracts.ErrorReason_ERROR_REASON_STORE_FULL, ErrStoreFull},
		{"location store full", fmt.Errorf("%w: %w: open", location.ErrStoreUnavailable, errkind.StoreFull),
			contracts.ErrorReason_ERROR_REASON_STORE_FULL, ErrStoreUnavailable},
		{"no eligible member", placement.ErrNoMember, contracts.ErrorReason_ERROR_REASON_NO_ELIGIBLE_MEMBER, nil},
		{"overloaded", placement.ErrOverloaded, contracts.ErrorReason_ERROR_REASON_OVERLOADED, nil},
		{"creation lock lost", location.ErrLockLost, contracts.ErrorReason_ERROR_REASON_OVERLOADED, placement.ErrOverloaded},
		{"version unsupported", fmt.Errorf("order o-1 version 3: %w", workflow.ErrVersionUnsupported), contracts.ErrorReason_ERROR_REASON_VERSION_UNSUPPORTED, workflow.ErrVersionUnsupported},
		{"no member reads the state", placement.ErrVersionUnsupported, contracts.ErrorReason_ERROR_REASON_VERSION_UNSUPPORTED, workflow.ErrVersionUnsupported},
		{"internal", errors.New("disk on fire"), contracts.ErrorReason_ERROR_REASON_INTERNAL, ErrInternal},
		// A store's refusal inside a step is the grain's failure, not the
		// caller's: it must not reach a client as "order not found".
		{"store not found", readmodel.ErrNotFound, contracts.ErrorReason_ERROR_REASON_INTERNAL, ErrInternal},
		{"store invalid id", eventstore.ErrInvalidOrderID, contracts.ErrorReason_ERROR_REASON_INTERNAL, ErrInternal},
	}
	covered := map[contracts.ErrorReason]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire := toWire(fmt.Errorf("order o-1: %w", tc.err))
			require.Equal(t, tc.reason, wire.GetReason())
			covered[wire.GetReason()] = true
			want := tc.back
			if want == nil {
				want = tc.err
			}
			back := fromWire(wire)
			require.ErrorIs(t, back, want)
			require.Equal(t, kindOf(t, tc.reason), errkind.Of(back), "the caller classifies it by the reason's kind")
			require.Equal(t, tc.reason, toWire(back).GetReason(), "a relayed error keeps its code")
		})
	}
	// RETRY is not an error reply: a grain that did not process a command
	// answers placement.Retry and the caller resends it.
	for n, name := range contracts.ErrorReason_name {
		r := contracts.ErrorReason(n)
		if r == contracts.ErrorReason_ERROR_REASON_UNSPECIFIED || r == contracts.ErrorReason_ERROR_REASON_RETRY {
			continue
		}
		require.True(t, covered[r], "reason %s has no round-trip case", name)
	}
	unknown := fromWire(&contracts.WorkflowError{Reason: contracts.ErrorReason(99), Message: "new"})
	require.ErrorIs(t, unknown, ErrUnknownReason, "an unknown reason from a newer peer is an error, never success")
	require.Equal(t, errkind.VersionUnsupported, errkind.Of(unknown), "and a well-formed 503 VERSION_UNSUPPORTED, not a 500")
	require.ErrorIs(t, fromWire(&contracts.WorkflowError{Reason: contracts.ErrorReason_ERROR_REASON_UNSPECIFIED}), ErrInternal)
}

// kindOf is the kind the reasons table gives a reason code; INTERNAL (and
// any code not in the table) is errkind.Internal.
func kindOf(t *testing.T, reason contracts.ErrorReason) errkind.Kind {
	t.Helper()
	for _, r := range reasons {
		if r.reason == reason {
			return r.kind
		}
	}
	return errkind.Internal
}

// Each reason's caller-side sentinel carries the reason's kind, and no two
// reasons share a kind: the reason code is the kind on the wire.
func TestEveryReasonIsOneKind(t *testing.T) {
	seen := map[errkind.Kind]contracts.ErrorReason{}
	for _, r := range reasons {
		require.ErrorIs(t, r.err, r.kind, "%s: sentinel %v", r.reason, r.err)
		require.Equal(t, r.kind, errkind.Of(r.err), "%s", r.reason)
		prev, dup := seen[r.kind]
		require.False(t, dup, "%s and %s share kind %s", prev, r.reason, r.kind)
		seen[r.kind] = r.reason
	}
	require.Equal(t, errkind.Internal, errkind.Of(ErrInternal))
}
