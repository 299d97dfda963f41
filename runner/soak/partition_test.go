package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A partition that evicted its workflow member is a problem of the run;
// one that did not, and any other fault's eviction (a pause's is
// expected), is not.
func TestPartitionEvictionIsAProblem(t *testing.T) {
	faults := []Fault{
		{N: 1, Kind: faultWorkflowPause, Target: "workflow-a", Injected: true, Evicted: true},
		{N: 2, Kind: faultPartition, Target: "api-a", Peer: "workflow-b", Injected: true, Effective: true},
		{N: 3, Kind: faultPartition, Target: "api-b", Peer: "workflow-c", Injected: true, Effective: true, Evicted: true},
	}
	p := partitionProblems(faults)
	require.Len(t, p, 1)
	require.Contains(t, p[0], "#3")
	require.Contains(t, p[0], "workflow-c was recorded gone")
	require.Empty(t, partitionProblems(faults[:2]))
}

// Without a partitioner the fault is skipped and says why, rather than
// passing silently.
func TestPartitionSkippedWithoutPartitioner(t *testing.T) {
	p, why := newPartitioner(nil, nil, "no partitioner available: needs root")
	require.Nil(t, p)
	f := &faulter{partition: p, noPartition: why}
	ft := f.partitionFault(context.Background(), Fault{N: 1, Kind: faultPartition, Target: "api-a", Peer: "workflow-a", Hold: time.Second})
	require.False(t, ft.Injected)
	require.False(t, ft.Effective)
	require.Equal(t, []string{"skipped: no partitioner available: needs root"}, ft.Detail)
	require.Nil(t, cgroupHook(nil), "nodes start in the runner's own cgroup")
}
