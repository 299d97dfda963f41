package placement

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A held creation names one identity and is claimed once: a resend after
// the first resolution (a dead letter, a Retry) must find the record as
// that resolution left it, not claim a lock its commit already ended.
func TestHeldCreationIsClaimedOnceForItsIdentity(t *testing.T) {
	ctx := WithHeldCreation(context.Background(), "order", "o-1", "tok")
	_, ok := heldToken(ctx, "order", "o-2")
	require.False(t, ok, "another identity")
	_, ok = heldToken(ctx, "other", "o-1")
	require.False(t, ok, "another kind")
	token, ok := heldToken(ctx, "order", "o-1")
	require.True(t, ok)
	require.Equal(t, "tok", token)
	_, ok = heldToken(ctx, "order", "o-1")
	require.False(t, ok, "claimed once")
	_, ok = heldToken(context.Background(), "order", "o-1")
	require.False(t, ok)
	_, ok = heldToken(WithHeldCreation(context.Background(), "order", "o-1", ""), "order", "o-1")
	require.False(t, ok, "no token, no claim")
}
