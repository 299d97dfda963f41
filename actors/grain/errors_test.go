package grain

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// Every sentinel crosses the grain boundary as its stable reason code and
// comes back as the same sentinel.
func TestErrorsCrossTheGrainBoundaryAsReasonCodes(t *testing.T) {
	cases := []struct {
		err    error
		reason contracts.ErrorReason
	}{
		{workflow.ErrNotFound, contracts.ErrorReason_ERROR_REASON_NOT_FOUND},
		{workflow.ErrInvalidArgument, contracts.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{workflow.ErrConflict, contracts.ErrorReason_ERROR_REASON_CONFLICT},
		{location.ErrUnavailable, contracts.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{location.ErrTimeout, contracts.ErrorReason_ERROR_REASON_TIMEOUT},
		{ErrFailedPrecondition, contracts.ErrorReason_ERROR_REASON_FAILED_PRECONDITION},
		{errors.New("disk on fire"), contracts.ErrorReason_ERROR_REASON_INTERNAL},
	}
	for _, tc := range cases {
		t.Run(tc.reason.String(), func(t *testing.T) {
			wire := toWire(fmt.Errorf("order o-1: %w", tc.err))
			require.Equal(t, tc.reason, wire.GetReason())
			back := fromWire(wire)
			if tc.reason == contracts.ErrorReason_ERROR_REASON_INTERNAL {
				require.ErrorIs(t, back, ErrInternal)
				return
			}
			require.ErrorIs(t, back, tc.err)
		})
	}
	require.ErrorIs(t, fromWire(&contracts.WorkflowError{Reason: contracts.ErrorReason(99)}), ErrInternal,
		"an unknown reason from a newer peer is internal, never success")
}
