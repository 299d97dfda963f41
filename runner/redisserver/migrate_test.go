package redisserver_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// BeginMove stops half-way with only the picked keys on the target: the
// old owner serves the keys it kept and answers ASK for the moved ones, a
// cluster client reads and writes both, a new key lands on the target;
// Finish moves the rest and hands the slot over (MOVED afterwards).
func TestBeginMoveStopsHalfWayAndFinishHandsOver(t *testing.T) {
	c := startClusterT(t)
	ctx := ctxT(t)
	rc := c.Client()
	defer rc.Close()
	moved, kept, fresh := "a:{ord-half}:moved", "b:{ord-half}:kept", "a:{ord-half}:new"
	slot := redisserver.Slot(moved)
	must(t, rc.Set(ctx, moved, "1", 0).Err(), "SET")
	must(t, rc.Set(ctx, kept, "2", 0).Err(), "SET")
	from, err := c.Owner(ctx, slot)
	must(t, err, "Owner")
	to := (from + 1) % len(c.Nodes())

	m, err := c.BeginMove(ctx, slot, to, func(k string) bool { return strings.HasPrefix(k, "a:") })
	must(t, err, "BeginMove")
	if m.Moved() != 1 || m.From() != from || m.To() != to || m.Slot() != slot {
		t.Fatalf("move %d: %d keys moved, %d -> %d; want 1 key, %d -> %d", m.Slot(), m.Moved(), m.From(), m.To(), from, to)
	}
	if owner, err := c.Owner(ctx, slot); err != nil || owner != from {
		t.Fatalf("half-way the slot is served by %d (%v), want still %d", owner, err, from)
	}
	old := c.Nodes()[from].Client()
	defer old.Close()
	if err := old.Get(ctx, moved).Err(); err == nil || !redis.HasErrorPrefix(err, "ASK") {
		t.Fatalf("old owner on a moved key: %v, want ASK", err)
	}
	if v, err := old.Get(ctx, kept).Result(); err != nil || v != "2" {
		t.Fatalf("old owner on a kept key: %q, %v", v, err)
	}
	// The cluster client follows the ASK for a moved key and a new one.
	must(t, rc.Incr(ctx, moved).Err(), "INCR moved key")
	must(t, rc.Set(ctx, fresh, "3", 0).Err(), "SET new key")
	if n, err := c.CountKeysInSlot(ctx, to, slot); err != nil || n != 2 {
		t.Fatalf("target holds %d keys of slot %d (%v), want the moved and the new one", n, slot, err)
	}

	total, err := m.Finish(ctx)
	must(t, err, "Finish")
	if total != 2 {
		t.Fatalf("the move migrated %d keys in all, want 2 (1 picked, 1 at Finish)", total)
	}
	if _, err := m.Finish(ctx); err == nil {
		t.Fatal("a finished move finished again")
	}
	if owner, err := c.Owner(ctx, slot); err != nil || owner != to {
		t.Fatalf("after Finish the slot is served by %d (%v), want %d", owner, err, to)
	}
	if n, err := c.CountKeysInSlot(ctx, from, slot); err != nil || n != 0 {
		t.Fatalf("old owner keeps %d keys (%v)", n, err)
	}
	if err := old.Get(ctx, kept).Err(); err == nil || !redis.HasErrorPrefix(err, "MOVED") {
		t.Fatalf("old owner after Finish: %v, want MOVED", err)
	}
	for k, want := range map[string]string{moved: "2", kept: "2", fresh: "3"} {
		if v, err := rc.Get(ctx, k).Result(); err != nil || v != want {
			t.Fatalf("GET %s = %q, %v; want %q", k, v, err, want)
		}
	}
	if _, err := c.BeginMove(ctx, slot, to, nil); err == nil {
		t.Fatal("BeginMove to the slot's owner succeeded")
	}
}
