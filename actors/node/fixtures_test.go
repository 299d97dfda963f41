package node

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fixture store exists only when asked for: production wiring has
// none, and a member asked to answer the runner's interrupt points from
// stores built without it refuses to start rather than run without them.
func TestTheFixtureStoreIsBuiltOnlyWhenAsked(t *testing.T) {
	// No Redis answers at this URL: nothing here contacts it.
	const u = "redis://127.0.0.1:1/0"
	prod, err := NewStores(RedisURLs{Default: u}, StoreOptions{})
	require.NoError(t, err)
	defer prod.Close()
	require.Nil(t, prod.Fixtures, "production wiring built the fixture store")

	_, err = StartWorkflow(context.Background(), WorkflowConfig{Stores: prod, Fixtures: true})
	require.ErrorIs(t, err, ErrFixturesMissing)

	withFixtures, err := NewStores(RedisURLs{Default: u}, StoreOptions{Fixtures: true})
	require.NoError(t, err)
	defer withFixtures.Close()
	require.NotNil(t, withFixtures.Fixtures)
}
