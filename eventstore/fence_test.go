package eventstore_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// An entry written before the store recorded fences has no fenceGen or
// fenceEpoch; it must still load, with a zero writer fence, next to newer
// entries that carry theirs. The projected append stamps the fence too.
func TestRedisWriterFenceStampsAndLegacyEntries(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	const o = "legacy-1"

	legacy := map[string]any{
		"eventId": "old", "orderId": o, "eventType": "T", "version": 1,
		"sourceCommandId": "", "createdAtUnixMs": 1, "data": "{}",
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "sm:es:{" + o + "}:stream", Values: legacy}).Err(); err != nil {
		t.Fatal(err)
	}
	f, evs, err := s.Open(ctx, o, 2)
	if err != nil {
		t.Fatalf("Open over a legacy entry: %v", err)
	}
	if len(evs) != 1 || evs[0].FenceGeneration != 0 || evs[0].FenceEpoch != 0 {
		t.Fatalf("legacy entry opened as %+v, want one entry with a zero fence", evs)
	}
	ev := []eventstore.Envelope{{EventID: "new", EventType: "T", CreatedAtUnixMs: 2, Data: []byte("{}")}}
	if _, err := commitProjected(ctx, s, o, 1, f, ev, eventstore.Projection{Key: "rm:{" + o + "}", VersionField: "version", StateField: "state", Version: 2, State: []byte("s")}); err != nil {
		t.Fatalf("projected append: %v", err)
	}
	evs, err = s.Load(ctx, o)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(evs) != 2 {
		t.Fatalf("Load has %d entries, want 2", len(evs))
	}
	if evs[0].FenceGeneration != 0 || evs[0].FenceEpoch != 0 {
		t.Fatalf("legacy entry loaded with fence (%d, %d), want (0, 0)", evs[0].FenceGeneration, evs[0].FenceEpoch)
	}
	if got := (eventstore.Fence{Generation: evs[1].FenceGeneration, Epoch: evs[1].FenceEpoch}); got != f {
		t.Fatalf("projected entry loaded with fence %+v, want the writer's %+v", got, f)
	}
	raw, err := c.XRange(ctx, "sm:es:{"+o+"}:stream", "-", "+").Result()
	if err != nil || len(raw) != 2 {
		t.Fatalf("XRANGE: %v %v", raw, err)
	}
	t.Logf("stored fields of the new entry: %v", raw[1].Values)
	if raw[1].Values["fenceGen"] != "2" || raw[1].Values["fenceEpoch"] != "1" {
		t.Fatalf("stored entry fields %v, want fenceGen=2 fenceEpoch=1", raw[1].Values)
	}
}

// Every entry records its body's schema version, so that a reader can
// tell a body it knows from one written by a newer schema; an entry
// written before the store recorded it loads as schema 1, and an append
// that names none records 1.
func TestRedisSchemaVersionIsRecordedAndLegacyEntriesAreOne(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	s := newRedis(t, eventstore.Config{Client: c})
	ctx := ctxT(t)
	const o = "schema-1"

	legacy := map[string]any{
		"eventId": "old", "orderId": o, "eventType": "T", "version": 1,
		"sourceCommandId": "", "createdAtUnixMs": 1, "data": "{}",
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "sm:es:{" + o + "}:stream", Values: legacy}).Err(); err != nil {
		t.Fatal(err)
	}
	f, _, err := s.Open(ctx, o, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, o, 1, f, []eventstore.Envelope{
		{EventID: "unnamed", EventType: "T", Data: []byte("{}")},
		{EventID: "v3", EventType: "T", Data: []byte("{}"), Schema: 3},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := commitProjected(ctx, s, o, 3, f, []eventstore.Envelope{{EventID: "p2", EventType: "T", Data: []byte("{}"), Schema: 2}},
		eventstore.Projection{Key: "rm:{" + o + "}", VersionField: "version", StateField: "state", Version: 4, State: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Load(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, e := range evs {
		got = append(got, e.Schema)
	}
	if want := []int{1, 1, 3, 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("schemas %v, want %v", got, want)
	}
	if _, err := s.Append(ctx, o, 4, f, []eventstore.Envelope{{EventID: "neg", EventType: "T", Schema: -1}}); err == nil {
		t.Fatal("an append with a negative schema was accepted")
	}
}
