package placement_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// The mint names one identity: a call under the same context for another
// one (a nested or later lookup) does not claim it.
func TestMintedIdentityNamesOneIdentity(t *testing.T) {
	ctx := placement.WithMintedIdentity(context.Background(), "order", "o-1")
	require.True(t, placement.IsMinted(ctx, "order", "o-1"))
	require.False(t, placement.IsMinted(ctx, "order", "o-2"))
	require.False(t, placement.IsMinted(ctx, "other", "o-1"))
	require.False(t, placement.IsMinted(context.Background(), "order", "o-1"))
}
