package localcluster

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// A cluster's node ports and its Redis Cluster's ports come from one
// reservation: all distinct, so a master cannot take a port a node has
// not bound yet.
func TestReservePortsIsOneDistinctSet(t *testing.T) {
	for range 50 {
		nodes, cluster, err := reservePorts(2, 2, true)
		require.NoError(t, err)
		require.Len(t, nodes, 1+4*2+3*2)
		require.Len(t, cluster, 2*redisserver.DefaultMasters)
		seen := map[int]bool{}
		for _, p := range append(append([]int{}, nodes...), cluster...) {
			require.False(t, seen[p], "port %d reserved twice", p)
			seen[p] = true
		}
	}
	nodes, cluster, err := reservePorts(1, 1, false)
	require.NoError(t, err)
	require.Len(t, nodes, 1+4+3)
	require.Empty(t, cluster)
}
