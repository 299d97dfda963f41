package redisserver

import (
	"context"
	"fmt"
	"net"
	"slices"

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
	clients, closeAll := c.clients()
	defer closeAll()
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

// Owners maps every slot to the index (in Nodes) of the master serving
// it, as the first master sees it: Owner for every slot in one
// CLUSTER SHARDS.
func (c *Cluster) Owners(ctx context.Context) ([]int, error) {
	rc := c.Nodes()[0].Client()
	defer rc.Close()
	ranges, err := slotRanges(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("%w: CLUSTER SHARDS: %w", ErrCluster, err)
	}
	owners := make([]int, Slots)
	for i := range owners {
		owners[i] = -1
	}
	nodes := c.Nodes()
	for _, r := range ranges {
		i := slices.IndexFunc(nodes, func(s *Server) bool { return s.Addr() == r.addr })
		if i < 0 {
			return nil, fmt.Errorf("%w: slots %d-%d served by unknown %q", ErrCluster, r.start, r.end, r.addr)
		}
		for slot := r.start; slot <= r.end; slot++ {
			owners[slot] = i
		}
	}
	return owners, nil
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
	m := &SlotMove{c: c, slot: slot, from: from, to: to}
	if err := m.begin(ctx, clients); err != nil {
		return 0, err
	}
	for batch := 0; ; batch++ {
		n, err := m.migrateBatch(ctx, clients[from], opt.Batch, nil)
		if err != nil || n == 0 {
			if err != nil {
				return m.moved, err
			}
			break
		}
		if batch == 0 && opt.Between != nil {
			if err := opt.Between(ctx, slot); err != nil {
				return m.moved, err
			}
		}
	}
	return m.moved, m.handOver(ctx, clients)
}

// SlotMove is a slot move begun and not handed over yet (BeginMove): the
// slot is MIGRATING at its owner and IMPORTING at the target, some of its
// keys may be on the target already. The owner serves the keys it still
// holds and answers ASK for the others; the target serves a key only to a
// client that sent ASKING first. Not safe for concurrent use.
type SlotMove struct {
	c                *Cluster
	slot, from, to   int
	moved            int
	finished, failed bool
}

// BeginMove starts moving slot from its owner to Nodes()[to] and stops
// half-way, as a reshard that is interrupted or still running does:
// SETSLOT IMPORTING at the target and MIGRATING at the owner, then MIGRATE
// of the slot's keys that pick accepts (nil: none). Finish completes the
// move. It fails wrapping ErrCluster if the target owns the slot already.
func (c *Cluster) BeginMove(ctx context.Context, slot, to int, pick func(key string) bool) (*SlotMove, error) {
	if to < 0 || to >= len(c.nodes) {
		return nil, fmt.Errorf("%w: no master %d", ErrCluster, to)
	}
	clients, closeAll := c.clients()
	defer closeAll()
	from, err := c.owner(ctx, clients[to], slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("%w: slot %d is served by master %d already", ErrCluster, slot, to)
	}
	m := &SlotMove{c: c, slot: slot, from: from, to: to}
	wrap := func(err error) error {
		m.failed = true
		return fmt.Errorf("%w: begin moving slot %d from %s to %s: %w", ErrCluster, slot, c.nodes[from].Addr(), c.nodes[to].Addr(), err)
	}
	if err := m.begin(ctx, clients); err != nil {
		return m, wrap(err)
	}
	if pick == nil {
		return m, nil
	}
	if _, err := m.migrateBatch(ctx, clients[from], 0, pick); err != nil {
		return m, wrap(err)
	}
	return m, nil
}

// Slot is the slot being moved.
func (m *SlotMove) Slot() int { return m.slot }

// From is the index (in Nodes) of the master the slot moves from.
func (m *SlotMove) From() int { return m.from }

// To is the index (in Nodes) of the master the slot moves to.
func (m *SlotMove) To() int { return m.to }

// Moved is how many keys have been migrated so far.
func (m *SlotMove) Moved() int { return m.moved }

// Finish migrates the slot's remaining keys and hands the slot over to
// the target (SETSLOT NODE on the target, the owner, then the others). It
// returns how many keys the whole move migrated. A move that failed or
// finished already cannot be finished.
func (m *SlotMove) Finish(ctx context.Context) (int, error) {
	if m.finished || m.failed {
		return m.moved, fmt.Errorf("%w: move of slot %d is finished or failed", ErrCluster, m.slot)
	}
	clients, closeAll := m.c.clients()
	defer closeAll()
	for {
		n, err := m.migrateBatch(ctx, clients[m.from], 100, nil)
		if err != nil {
			m.failed = true
			return m.moved, m.wrapFinish(err)
		}
		if n == 0 {
			break
		}
	}
	if err := m.handOver(ctx, clients); err != nil {
		m.failed = true
		return m.moved, m.wrapFinish(err)
	}
	m.finished = true
	return m.moved, nil
}

func (m *SlotMove) wrapFinish(err error) error {
	return fmt.Errorf("%w: finish moving slot %d from %s to %s: %w", ErrCluster, m.slot, m.c.nodes[m.from].Addr(), m.c.nodes[m.to].Addr(), err)
}

// clients opens a plain client per master; closeAll closes them.
func (c *Cluster) clients() ([]*redis.Client, func()) {
	clients := make([]*redis.Client, len(c.nodes))
	for i, s := range c.nodes {
		clients[i] = s.Client()
	}
	return clients, func() {
		for _, rc := range clients {
			rc.Close()
		}
	}
}

// begin marks the slot IMPORTING at the target before MIGRATING at the
// owner, as redis-cli does: an ASK the owner sends must find a target that
// accepts it.
func (m *SlotMove) begin(ctx context.Context, clients []*redis.Client) error {
	if err := clients[m.to].Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.c.ids[m.from]).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING: %w", err)
	}
	if err := clients[m.from].Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.c.ids[m.to]).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING: %w", err)
	}
	return nil
}

// migrateBatch MIGRATEs to the target up to batch (0: all) of the keys the
// owner still holds in the slot, those pick accepts (nil: every one), and
// returns how many moved.
func (m *SlotMove) migrateBatch(ctx context.Context, src *redis.Client, batch int, pick func(string) bool) (int, error) {
	count := batch
	if count <= 0 {
		n, err := src.ClusterCountKeysInSlot(ctx, m.slot).Result()
		if err != nil {
			return 0, fmt.Errorf("COUNTKEYSINSLOT: %w", err)
		}
		if n == 0 {
			return 0, nil
		}
		count = int(n)
	}
	keys, err := src.ClusterGetKeysInSlot(ctx, m.slot, count).Result()
	if err != nil {
		return 0, fmt.Errorf("GETKEYSINSLOT: %w", err)
	}
	host, port, _ := net.SplitHostPort(m.c.nodes[m.to].Addr())
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	n := 0
	for _, k := range keys {
		if pick == nil || pick(k) {
			args = append(args, k)
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	if err := src.Do(ctx, args...).Err(); err != nil {
		return 0, fmt.Errorf("MIGRATE: %w", err)
	}
	m.moved += n
	return n, nil
}

// handOver gives the slot to the target: the target first, so that it
// serves the slot before the owner starts answering MOVED to it, then the
// owner, then the other masters. It then waits until every master agrees
// and has learnt the target's new epoch, so that the next move starts
// from a settled cluster.
func (m *SlotMove) handOver(ctx context.Context, clients []*redis.Client) error {
	if err := m.setNode(ctx, clients); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return m.c.waitAgreed(ctx)
}

func (m *SlotMove) setNode(ctx context.Context, clients []*redis.Client) error {
	order := []int{m.to, m.from}
	for i := range clients {
		if i != m.to && i != m.from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if err := clients[i].Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.c.ids[m.to]).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE at %s: %w", m.c.nodes[i].Addr(), err)
		}
	}
	return nil
}
