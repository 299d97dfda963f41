package redisserver

import (
	"context"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
)

// MoveOptions tune MoveSlots.
type MoveOptions struct {
	// Batch is how many keys one MIGRATE moves; default 100.
	Batch int
	// Between, if set, runs once per slot after its first batch of keys
	// moved and before the rest move and the slot is handed over: the
	// slot is MIGRATING at its owner and IMPORTING at the target, so a
	// client of the moved keys is redirected with ASK. An error stops the
	// move there, the slot left half-moved.
	Between func(ctx context.Context, slot int) error
}

// MoveSlots moves each slot from its owner to Nodes()[to] as redis-cli
// --cluster reshard does, under live traffic: CLUSTER SETSLOT IMPORTING at
// the target and MIGRATING at the owner, MIGRATE of the slot's keys in
// batches (CLUSTER GETKEYSINSLOT), then SETSLOT NODE on the target, the
// owner and the other masters. A slot the target already owns is skipped.
// It returns how many keys moved per slot.
func (c *Cluster) MoveSlots(ctx context.Context, slots []int, to int, opt MoveOptions) (map[int]int, error) {
	if to < 0 || to >= len(c.nodes) {
		return nil, fmt.Errorf("%w: no master %d", ErrCluster, to)
	}
	if opt.Batch <= 0 {
		opt.Batch = 100
	}
	clients := make([]*redis.Client, len(c.nodes))
	for i, s := range c.nodes {
		clients[i] = s.Client()
		defer clients[i].Close()
	}
	moved := map[int]int{}
	for _, slot := range slots {
		from, err := c.owner(ctx, clients[to], slot)
		if err != nil {
			return moved, err
		}
		if from == to {
			continue
		}
		n, err := c.moveSlot(ctx, clients, slot, from, to, opt)
		moved[slot] = n
		if err != nil {
			return moved, fmt.Errorf("%w: move slot %d from %s to %s: %w", ErrCluster, slot, c.nodes[from].Addr(), c.nodes[to].Addr(), err)
		}
	}
	return moved, nil
}

// Owner is the index (in Nodes) of the master that serves slot, as the
// first master sees it.
func (c *Cluster) Owner(ctx context.Context, slot int) (int, error) {
	rc := c.nodes[0].Client()
	defer rc.Close()
	return c.owner(ctx, rc, slot)
}

// CountKeysInSlot is how many keys Nodes()[i] holds in slot.
func (c *Cluster) CountKeysInSlot(ctx context.Context, i, slot int) (int64, error) {
	rc := c.nodes[i].Client()
	defer rc.Close()
	return rc.ClusterCountKeysInSlot(ctx, slot).Result()
}

// owner is the index of the master that serves slot, as rc sees it.
func (c *Cluster) owner(ctx context.Context, rc *redis.Client, slot int) (int, error) {
	ranges, err := slotRanges(ctx, rc)
	if err != nil {
		return 0, fmt.Errorf("%w: CLUSTER SHARDS: %w", ErrCluster, err)
	}
	for _, r := range ranges {
		if slot < r.start || slot > r.end {
			continue
		}
		for i, s := range c.nodes {
			if s.Addr() == r.addr {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%w: slot %d served by unknown %q", ErrCluster, slot, r.addr)
	}
	return 0, fmt.Errorf("%w: slot %d unassigned", ErrCluster, slot)
}

func (c *Cluster) moveSlot(ctx context.Context, clients []*redis.Client, slot, from, to int, opt MoveOptions) (int, error) {
	src, dst := clients[from], clients[to]
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from]).Err(); err != nil {
		return 0, fmt.Errorf("SETSLOT IMPORTING: %w", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[to]).Err(); err != nil {
		return 0, fmt.Errorf("SETSLOT MIGRATING: %w", err)
	}
	host, port, _ := net.SplitHostPort(c.nodes[to].Addr())
	moved := 0
	for batch := 0; ; batch++ {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, opt.Batch).Result()
		if err != nil {
			return moved, fmt.Errorf("GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return moved, fmt.Errorf("MIGRATE: %w", err)
		}
		moved += len(keys)
		if batch == 0 && opt.Between != nil {
			if err := opt.Between(ctx, slot); err != nil {
				return moved, err
			}
		}
	}
	// The target first, so that it serves the slot before the owner
	// starts answering MOVED to it.
	order := []int{to, from}
	for i := range clients {
		if i != to && i != from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if err := clients[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[to]).Err(); err != nil {
			return moved, fmt.Errorf("SETSLOT NODE at %s: %w", c.nodes[i].Addr(), err)
		}
	}
	return moved, nil
}
