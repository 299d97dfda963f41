package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/partition"
)

// partitioner cuts one API off from one workflow member, both ways,
// while both still reach Redis and every other process, and heals the
// cut. netPartitioner provides it on top of the runner's partition
// helper; the soak only schedules and observes.
type partitioner interface {
	// Cut cuts api off from workflow and returns how to heal it. A cut
	// that fails leaves nothing to heal.
	Cut(ctx context.Context, api, workflow string) (heal func(context.Context) error, err error)
}

// newPartitionNet makes the run's partition.Net, before the cluster
// starts: a node's packets are told apart by the cgroup it started in,
// so every API and workflow node must start in its own. On a machine
// that cannot partition (no root, cgroup v2 or iptables) it returns nil
// and why, and the soak skips the partition fault and says so.
func newPartitionNet() (*partition.Net, string) {
	net, err := partition.New(partition.Config{Logf: func(f string, a ...any) { logf(f, a...) }})
	if err != nil {
		if errors.Is(err, partition.ErrUnsupported) {
			return nil, fmt.Sprintf("no partitioner available: %v", err)
		}
		return nil, fmt.Sprintf("no partitioner: %v", err)
	}
	return net, ""
}

// cgroupHook is localcluster.Config.Cgroup for net: a cgroup of its own
// for every node a partition may cut, the runner's own for the rest.
func cgroupHook(net *partition.Net) func(string) string {
	if net == nil {
		return nil
	}
	return func(node string) string {
		if slices.Contains(localcluster.APINodes, node) || slices.Contains(workflowNodes, node) {
			return net.Cgroup(node)
		}
		return ""
	}
}

// closePartitionNet heals whatever is still cut and removes the cgroups;
// the cluster's processes must have exited by then.
func closePartitionNet(net *partition.Net) {
	if net == nil {
		return
	}
	if err := net.Close(); err != nil {
		logf("partition close: %v", err)
	}
}

// netPartitioner cuts by the nodes' current PIDs: the ports a node
// listens on are read at the cut, from its current incarnation.
type netPartitioner struct {
	c   *localcluster.Cluster
	net *partition.Net
}

func (p *netPartitioner) Cut(_ context.Context, api, workflow string) (func(context.Context) error, error) {
	apiPID, wfPID := p.c.PID(api), p.c.PID(workflow)
	if apiPID <= 0 || wfPID <= 0 {
		return nil, fmt.Errorf("cut %s (pid %d) from %s (pid %d): not running", api, apiPID, workflow, wfPID)
	}
	if err := p.net.Cut(api, apiPID, workflow, wfPID); err != nil {
		// Cut may have added the rules of one direction before failing.
		return nil, errors.Join(err, p.net.Heal())
	}
	return func(context.Context) error { return p.net.Heal() }, nil
}

// newPartitioner is the soak's partitioner over net, or none and why.
func newPartitioner(c *localcluster.Cluster, net *partition.Net, why string) (partitioner, string) {
	if net == nil {
		return nil, why
	}
	return &netPartitioner{c: c, net: net}, ""
}

// partitionRejoinWithin bounds the cut API's rejoin after the heal: the
// dial that sees the link back, its graceful stop, the supervisor's
// backoff and a start (the partition test's bound).
const partitionRejoinWithin = 30 * time.Second

// partitionFault cuts ft.Target (an API) off from ft.Peer (a workflow
// member) for ft.Hold and heals the cut, whatever happens meanwhile.
//
// What it expects (docs/operations.md, "Gone members and self-fencing"):
// the cut API answers the member's orders OWNER_UNREACHABLE, and once
// healed it exits 4 and the supervisor starts it as a new member; that
// rejoin is expected, not a failure, and is noted. The member is alive and reaches the store, so
// it must not be recorded gone: ft.Evicted is reported as a problem
// (partitionProblems). The fault is effective when the cut healed and the
// cut API lost the member (OWNER_UNREACHABLE answers or the rejoin).
func (f *faulter) partitionFault(ctx context.Context, ft Fault) Fault {
	note := func(format string, a ...any) { ft.Detail = append(ft.Detail, fmt.Sprintf(format, a...)) }
	if f.partition == nil {
		note("skipped: %s", f.noPartition)
		logf("FAULT #%d %s skipped: %s", ft.N, ft.Kind, f.noPartition)
		return ft
	}
	at := time.Now()
	wfPID := f.c.PID(ft.Peer)
	heal, err := f.partition.Cut(ctx, ft.Target, ft.Peer)
	if err != nil {
		note("cut: %v", err)
		return ft
	}
	ft.Injected = true
	select {
	case <-ctx.Done():
	case <-time.After(ft.Hold):
	}
	// Healed under a context of its own: an interrupted soak must not
	// leave the cut in place.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err = heal(hctx)
	cancel()
	healedAt := time.Now()
	if err != nil {
		note("heal: %v", err)
	}
	healed := err == nil
	unreachable := f.log.reasonFromBetween(ft.Target, "OWNER_UNREACHABLE", at, healedAt)
	note("healed=%v after %s; %s answered OWNER_UNREACHABLE %d times during the cut",
		healed, healedAt.Sub(at).Round(time.Millisecond), ft.Target, unreachable)

	// The rejoin: the cut API exits 4 once it dials the member again.
	ft.Rejoined = f.waitRejoined(ctx, ft.Target, at, partitionRejoinWithin)
	var exits []string
	for _, r := range f.c.Restarts(ft.Target) {
		if r.At.After(at) {
			exits = append(exits, r.Exit)
		}
	}
	switch {
	case ft.Rejoined && slices.Equal(exits, []string{"exit status 4"}):
		note("%s rejoined as a new member (exit 4, restarted by the supervisor): expected after a partition", ft.Target)
	case ft.Rejoined:
		note("%s restarted after the cut: %s", ft.Target, strings.Join(exits, ", "))
	case ctx.Err() != nil:
		note("interrupted before %s rejoined", ft.Target)
	default:
		note("%s did not rejoin within %s of the heal", ft.Target, partitionRejoinWithin)
	}

	// The member must not be recorded gone, during the cut or as the
	// cut API leaves; it is the same process throughout.
	ft.Evicted = f.goneSince(ctx, ft.Peer, at)
	var wfRestarts []string
	for _, r := range f.c.Restarts(ft.Peer) {
		if r.At.After(at) {
			wfRestarts = append(wfRestarts, r.Exit)
		}
	}
	note("%s recorded gone=%v, same process=%v, restarts %v", ft.Peer, ft.Evicted, f.c.PID(ft.Peer) == wfPID, wfRestarts)
	ft.Effective = healed && (unreachable > 0 || ft.Rejoined)
	return ft
}

// partitionProblems are the partition faults whose workflow member was
// recorded gone: a partition between one API and a member that still
// reaches the store and the other APIs must not evict it.
func partitionProblems(faults []Fault) []string {
	var out []string
	for _, ft := range faults {
		if ft.Kind == faultPartition && ft.Evicted {
			out = append(out, fmt.Sprintf("fault #%d partition %s from %s: %s was recorded gone", ft.N, ft.Target, ft.Peer, ft.Peer))
		}
	}
	return out
}
