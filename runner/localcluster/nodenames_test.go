package localcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNodeNamesDefaultToTwoAndRunFromA(t *testing.T) {
	apis, err := NodeNames(RoleAPI, 0)
	require.NoError(t, err)
	require.Equal(t, APINodes, apis)
	wfs, err := NodeNames(RoleWorkflow, 0)
	require.NoError(t, err)
	require.Equal(t, WorkflowNodes, wfs)

	apis, err = NodeNames(RoleAPI, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"api-a", "api-b", "api-c"}, apis)
	wfs, err = NodeNames(RoleWorkflow, 6)
	require.NoError(t, err)
	require.Equal(t, []string{"workflow-a", "workflow-b", "workflow-c", "workflow-d", "workflow-e", "workflow-f"}, wfs)

	wfs, err = NodeNames(RoleWorkflow, MaxNodesPerRole)
	require.NoError(t, err)
	require.Equal(t, "workflow-z", wfs[len(wfs)-1])
	for _, n := range []int{-1, MaxNodesPerRole + 1} {
		_, err := NodeNames(RoleAPI, n)
		require.ErrorIs(t, err, ErrConfig, "%d APIs", n)
	}
}
