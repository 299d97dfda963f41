package main

import (
	"context"
	"fmt"
	"time"

	localcluster "github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// partitioner cuts one API off from one workflow member, both ways,
// while both still reach Redis and every other process, and heals the
// cut. The runner's partition helper (network namespaces or loopback
// aliases with nftables) provides it; the soak only schedules and
// observes.
type partitioner interface {
	// Cut cuts api off from workflow and returns how to heal it. A cut
	// that fails leaves nothing to heal.
	Cut(ctx context.Context, api, workflow string) (heal func(context.Context) error, err error)
}

// newPartitioner is where the partition helper plugs in. Until it does
// there is none: every partition fault is skipped and the reason logged,
// so a run says that it did not partition rather than pass silently.
func newPartitioner(*localcluster.Cluster) (partitioner, string) {
	return nil, "no partitioner available: the runner's partition helper is not wired into the soak yet"
}

// partitionFault cuts ft.Target (an API) off from ft.Peer (a workflow
// member) for ft.Hold and heals the cut, whatever happens meanwhile. It
// notes whether the member was recorded gone meanwhile: it must not be,
// since it is alive and reaches the store.
func (f *faulter) partitionFault(ctx context.Context, ft Fault) Fault {
	note := func(format string, a ...any) { ft.Detail = append(ft.Detail, fmt.Sprintf(format, a...)) }
	if f.partition == nil {
		note("skipped: %s", f.noPartition)
		logf("FAULT #%d %s skipped: %s", ft.N, ft.Kind, f.noPartition)
		return ft
	}
	at := time.Now()
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
	if err != nil {
		note("heal: %v", err)
	}
	ft.Evicted = f.goneSince(ctx, ft.Peer, at)
	note("healed=%v %s recorded gone=%v", err == nil, ft.Peer, ft.Evicted)
	ft.Effective = err == nil
	return ft
}
