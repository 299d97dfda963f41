package localcluster

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// A cluster's node ports and its Redis topology's ports (a Redis
// Cluster's masters and replicas, or a replica and sentinels) come from
// one reservation: all distinct, so a Redis process cannot take a port a
// node has not bound yet.
func TestReservePortsIsOneDistinctSet(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		redis int
	}{
		{Config{RedisCluster: true}, 2 * redisserver.DefaultMasters},
		{Config{RedisCluster: true, RedisClusterReplicas: 1}, 4 * redisserver.DefaultMasters},
		{Config{RedisHA: RedisHASentinel}, 2 + 3},
	} {
		for range 20 {
			nodes, redis, err := reservePorts(2, 2, tc.cfg)
			require.NoError(t, err)
			require.Len(t, nodes, 1+4*2+3*2)
			require.Len(t, redis, tc.redis)
			seen := map[int]bool{}
			for _, p := range append(append([]int{}, nodes...), redis...) {
				require.False(t, seen[p], "port %d reserved twice", p)
				seen[p] = true
			}
		}
	}
	nodes, cluster, err := reservePorts(1, 1, Config{})
	require.NoError(t, err)
	require.Len(t, nodes, 1+4+3)
	require.Empty(t, cluster)
}
