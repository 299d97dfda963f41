package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
)

// SelfFenceExitCode is the exit status of an order-workflow process that
// fenced itself. Its supervisor (the local cluster's, or Kubernetes with
// restartPolicy Always) starts it again, as a new member.
const SelfFenceExitCode = 3

// DefaultLease is SelfFenceConfig.Lease when unset.
const DefaultLease = 10 * time.Second

// ErrSelfFenced: the member stopped hosting because it is recorded gone
// (placement.ErrEvicted) or its process did not run for longer than its
// lease (placement.ErrLeaseExpired); both stay wrapped. A Location Store
// that does not answer for longer than the lease suspends the member
// instead, until it answers (placement.Lookup.RunSelfFence).
var ErrSelfFenced = errors.New("node: self-fenced")

// SelfFenceConfig tunes the watch of a workflow member's own eviction.
type SelfFenceConfig struct {
	// Lease: see placement.SelfFenceConfig; default DefaultLease.
	Lease time.Duration
	// Interval between reads of the member's gone record; default 500ms.
	Interval time.Duration
	// Since is when the member began to serve: a pause between it and
	// the watch's first step fences as any other (see
	// placement.SelfFenceConfig). A main passes the moment StartWorkflow
	// returned; zero counts from the watch's start.
	Since time.Time
}

// RunSelfFence watches whether this member was evicted until ctx ends
// (nil). Once it was, the member stops hosting at once — its grains stop
// where they are, nothing is released or relocated, its orders stay Ready
// at this member id and answer Unavailable everywhere until an operator
// takes them over — and the error, wrapping ErrSelfFenced and the cause,
// is returned. The member must not serve again: a process exits with
// SelfFenceExitCode so that its supervisor starts a new member.
func (w *Workflow) RunSelfFence(ctx context.Context, cfg SelfFenceConfig) error {
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	err := w.Member.Lookup.RunSelfFence(ctx, placement.SelfFenceConfig{Lease: cfg.Lease, Interval: cfg.Interval, Probe: w.probe, Since: cfg.Since})
	if err == nil {
		return nil
	}
	left := int64(-1)
	if k, ok := w.Member.Cluster.TryGetClusterKind(grain.KindName); ok {
		left = int64(k.Count())
	}
	w.log.Error("self-fenced: "+err.Error(), slog.String("member", w.Member.ID()), slog.Int64("grainsLeft", left),
		slog.Bool("evicted", errors.Is(err, placement.ErrEvicted)), slog.Bool("leaseExpired", errors.Is(err, placement.ErrLeaseExpired)))
	return fmt.Errorf("%w: %w", ErrSelfFenced, err)
}
