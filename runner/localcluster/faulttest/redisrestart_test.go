package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// The fault schedule of TestRedisRestartWedgesNothing.
const (
	// loadClients start orders concurrently, each alternating between
	// the two APIs, for loadFor.
	loadClients = 12
	loadFor     = 6 * time.Second
	// redis-server gets SIGKILL killAfter into the load and starts again,
	// from the same append-only file, downFor later.
	killAfter = 1500 * time.Millisecond
	downFor   = 1500 * time.Millisecond
	// failurePace spaces a client's next key after a failed start, so the
	// outage yields a bounded number of failed keys.
	failurePace = 100 * time.Millisecond
	// restartRequestTimeout is the APIs' -request-timeout: a wedged key's
	// retry answers 504 after it.
	restartRequestTimeout = 5 * time.Second
	// After the load: every failed key's start is retried until it is
	// acknowledged (retryFor), then every acknowledged order must become
	// terminal (terminalFor). No continue call is ever made.
	retryFor    = 60 * time.Second
	retryPace   = 200 * time.Millisecond
	terminalFor = 60 * time.Second
)

// TestRedisRestartWedgesNothing: loadClients clients start orders over
// both APIs while redis-server is SIGKILLed and restarted from its AOF.
// Afterwards, with no continue call, every key that failed must be
// startable again with the same idempotency key and body, every
// acknowledged order must reach a terminal status by itself, and Redis
// must show each order started once, each key mapped to one order, and
// stock taken exactly once per confirmed order.
func TestRedisRestartWedgesNothing(t *testing.T) {
	f := startCluster(t, clusterOpts{persist: true, requestTimeout: restartRequestTimeout})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)

	// ---- Load, with the fault in the middle.
	perClient := make([][]attempt, loadClients)
	loadStart := time.Now()
	stopAt := loadStart.Add(loadFor)
	var wg sync.WaitGroup
	for i := range loadClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(stopAt); j++ {
				a := f.start(ctx, (i+j)%len(f.apis), fmt.Sprintf("fault-%s-c%02d-%05d", run, i, j))
				perClient[i] = append(perClient[i], a)
				if !a.acked() {
					pause(ctx, failurePace)
				}
			}
		}()
	}
	// Pacing the fault schedule is the only sleeping here.
	time.Sleep(time.Until(loadStart.Add(killAfter)))
	killAt := time.Now()
	killErr := f.c.KillRedis()
	var restartErr error
	var restartedAt time.Time
	if killErr == nil {
		time.Sleep(time.Until(killAt.Add(downFor)))
		restartErr = f.c.RestartRedis(ctx)
		restartedAt = time.Now()
	}
	wg.Wait()
	require.NoError(t, killErr, "SIGKILL redis-server")
	require.NoError(t, restartErr, "restart redis-server from its AOF")
	t.Logf("redis-server SIGKILLed %s into the load, answering again %s later (restart took %s)",
		killAt.Sub(loadStart).Round(time.Millisecond), restartedAt.Sub(killAt).Round(time.Millisecond),
		restartedAt.Sub(killAt.Add(downFor)).Round(time.Millisecond))
	for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
		require.True(t, f.c.Running(n), "%s exited during the Redis outage; log %s:\n%s", n, f.c.LogPath(n), localcluster.Tail(f.c.LogPath(n), 30))
	}

	var all []attempt
	for _, as := range perClient {
		all = append(all, as...)
	}
	byKey := map[string][]attempt{} // every answer per key, initial first
	var keys []string
	var failed []attempt
	var duringOutage []attempt
	for _, a := range all {
		keys = append(keys, a.key)
		byKey[a.key] = append(byKey[a.key], a)
		if a.acked() {
			continue
		}
		failed = append(failed, a)
		if a.end.After(killAt) && a.begin.Before(restartedAt) {
			duringOutage = append(duringOutage, a)
		}
	}
	t.Logf("load: %d starts by %d clients in %s: %d acknowledged, %d failed (%d of them overlapping the outage); answers: %s",
		len(all), loadClients, loadFor, len(all)-len(failed), len(failed), len(duringOutage), tally(all, attempt.outcome))
	for _, a := range firstN(failed, 5) {
		t.Logf("  failed: %s", a)
	}
	// Evidence that the fault bit: otherwise the test proves nothing.
	require.NotEmpty(t, duringOutage, "no start failed while redis-server was down: the fault had no effect")

	// ---- Retry every failed key (same key, same body) until acknowledged.
	retryStart := time.Now()
	retryDeadline := retryStart.Add(retryFor)
	work := make(chan string)
	var mu sync.Mutex
	var retries []attempt
	for w := 0; w < loadClients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				for n := 0; time.Now().Before(retryDeadline); n++ {
					a := f.start(ctx, n%len(f.apis), key)
					mu.Lock()
					byKey[key] = append(byKey[key], a)
					retries = append(retries, a)
					mu.Unlock()
					if a.acked() {
						break
					}
					pause(ctx, retryPace)
				}
			}
		}()
	}
	for _, a := range failed {
		work <- a.key
	}
	close(work)
	wg.Wait()

	writeAttempts(t, f.c.RunDir(), loadStart, keys, byKey)

	ackedID := map[string]string{} // key -> the order id its first ack named
	var wedgedKeys []string
	var conflicting []string
	for _, key := range keys {
		for _, a := range byKey[key] {
			if !a.acked() {
				continue
			}
			if prev, ok := ackedID[key]; ok && prev != a.orderID {
				conflicting = append(conflicting, fmt.Sprintf("%s: acknowledged as %s and as %s", key, prev, a.orderID))
			} else if !ok {
				ackedID[key] = a.orderID
			}
		}
		if _, ok := ackedID[key]; !ok {
			as := byKey[key]
			wedgedKeys = append(wedgedKeys, fmt.Sprintf("%s: %d tries, last %s; answers: %s", key, len(as), as[len(as)-1].outcome(), tally(as, attempt.outcome)))
		}
	}
	t.Logf("retry: %d failed keys retried in %s with %d starts (answers: %s); %d never acknowledged",
		len(failed), time.Since(retryStart).Round(time.Millisecond), len(retries), tally(retries, attempt.outcome), len(wedgedKeys))

	ackedAt := map[string]time.Time{} // key -> when its first ack arrived
	for _, key := range keys {
		for _, a := range byKey[key] {
			if a.acked() {
				ackedAt[key] = a.end
				break
			}
		}
	}
	describe := func(key string) string {
		at, ok := ackedAt[key]
		if !ok {
			return "key " + key + ", never acknowledged"
		}
		return fmt.Sprintf("key %s, acknowledged %s after the SIGKILL", key, at.Sub(killAt).Round(time.Millisecond))
	}

	// ---- Every acknowledged order must become terminal by itself.
	var orderIDs []string
	keyOf := map[string]string{}
	for _, key := range keys {
		if id, ok := ackedID[key]; ok {
			orderIDs = append(orderIDs, id)
			keyOf[id] = key
		}
	}
	final, allTerminalAt := f.waitTerminal(ctx, orderIDs, time.Now().Add(terminalFor))
	var stuck, stuckIDs, stuckStatus, notConfirmed []string
	for _, id := range orderIDs {
		switch st := final[id]; {
		case !terminal(st):
			stuck = append(stuck, id+" ("+describe(keyOf[id])+"): "+st)
			stuckIDs = append(stuckIDs, id)
			stuckStatus = append(stuckStatus, st)
		case st != "Confirmed":
			notConfirmed = append(notConfirmed, id+": "+st)
		}
	}
	sort.Strings(stuck)
	traceOrders(t, f.c, keyOf, stuckIDs)
	confirmedAcked := len(orderIDs) - len(stuck) - len(notConfirmed)
	if allTerminalAt.IsZero() {
		t.Logf("terminal: %d of %d acknowledged orders terminal after %s; stuck by status: %s",
			len(orderIDs)-len(stuck), len(orderIDs), terminalFor, tally(stuckStatus, func(s string) string { return s }))
	} else {
		t.Logf("terminal: all %d acknowledged orders terminal %s after the Redis restart (%d Confirmed)",
			len(orderIDs), allTerminalAt.Sub(restartedAt).Round(time.Millisecond), confirmedAcked)
	}

	// ---- Invariants, read from Redis directly.
	inv := checkStore(t, ctx, f, keys, ackedID, describe)

	t.Logf("SUMMARY acknowledged orders: %d during the load, %d in all after retries; keys failed during the outage: %d (failed in all: %d); wedged keys: %d; stuck orders: %d; time from Redis restart until all terminal: %s",
		len(all)-len(failed), len(orderIDs), len(duringOutage), len(failed), len(wedgedKeys), len(stuck), sinceOrNever(allTerminalAt, restartedAt))
	t.Logf("store: %d order streams, %d confirmed in the store; stock taken %s", inv.streams, inv.confirmed, inv.stockNote)

	assert.Empty(t, firstN(wedgedKeys, 10), "%d idempotency keys never acknowledged in %s of retries (wedged)", len(wedgedKeys), retryFor)
	assert.Empty(t, firstN(stuck, 10), "%d acknowledged orders not terminal %s after the retries, with no continue call", len(stuck), terminalFor)
	assert.Empty(t, firstN(notConfirmed, 10), "%d orders ended other than Confirmed although stock is ample and the method approves", len(notConfirmed))
	assert.Empty(t, firstN(conflicting, 10), "%d keys acknowledged with two different order ids", len(conflicting))
}

// writeAttempts records every key and what each of its starts was told
// in RunDir/attempts.tsv, for a post-mortem (see keepRunDirEnv).
func writeAttempts(t *testing.T, dir string, t0 time.Time, keys []string, byKey map[string][]attempt) {
	var b strings.Builder
	b.WriteString("key\ttry\tapi\tbegin_ms\ttook_ms\toutcome\torder_id\terror\n")
	for _, key := range keys {
		for i, a := range byKey[key] {
			errText := ""
			if a.err != nil {
				errText = strings.ReplaceAll(a.err.Error(), "\t", " ")
			}
			fmt.Fprintf(&b, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", key, i, a.api,
				a.begin.Sub(t0).Milliseconds(), a.end.Sub(a.begin).Milliseconds(), a.outcome(), a.orderID, errText)
		}
	}
	path := filepath.Join(dir, "attempts.tsv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("write %s: %v", path, err)
		return
	}
	t.Logf("every key and its answers: %s", path)
}

func sinceOrNever(at, from time.Time) string {
	if at.IsZero() {
		return "never (deadline passed)"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

type storeFacts struct {
	streams, confirmed int
	stockNote          string
}

// checkStore reads the CommerceStateStore and every order stream in Redis
// and asserts: each stream holds exactly one OrderStartedEvent, whose
// sourceCommandId is the start of the key whose mapping names that order;
// each key maps to one order, the one it was acknowledged with, and no
// two keys share one; every acknowledged order has a stream; at most one
// OrderConfirmedEvent per stream; and per SKU the stock taken equals the
// quantity of the confirmed orders (checked as: taken once per reservation
// the streams record and do not release, and each of those is confirmed).
func checkStore(t *testing.T, ctx context.Context, f *fixture, keys []string, ackedID map[string]string, describe func(key string) string) storeFacts {
	t.Helper()
	idem := f.stores.Idempotency()
	mapped := map[string]string{}  // order id -> key whose mapping names it
	mapping := map[string]string{} // key -> order id its mapping names
	var mapProblems []string
	for _, key := range keys {
		m, err := idem.Get(ctx, key, order.OrderIDFor(f.c.OrderIDSecret(), key))
		if errors.Is(err, commerce.ErrNotFound) {
			if id, ok := ackedID[key]; ok {
				mapProblems = append(mapProblems, fmt.Sprintf("%s: acknowledged as %s but has no mapping (%s)", key, id, describe(key)))
			}
			continue
		}
		require.NoError(t, err, "read mapping of %s", key)
		if id, ok := ackedID[key]; ok && m.OrderID != id {
			mapProblems = append(mapProblems, fmt.Sprintf("%s: acknowledged as %s, mapped to %s (%s)", key, id, m.OrderID, describe(key)))
		}
		if other, ok := mapped[m.OrderID]; ok {
			mapProblems = append(mapProblems, fmt.Sprintf("%s and %s both map to %s", other, key, m.OrderID))
		}
		mapped[m.OrderID] = key
		mapping[key] = m.OrderID
	}

	// Every order stream in this private Redis is one of this test's.
	var streamKeys []string
	iter := f.rdb.Scan(ctx, 0, eventstore.DefaultKeyPrefix+"{*}:stream", 1000).Iterator()
	for iter.Next(ctx) {
		streamKeys = append(streamKeys, iter.Val())
	}
	require.NoError(t, iter.Err())
	es, err := eventstore.NewRedis(eventstore.Config{Client: f.rdb})
	require.NoError(t, err)
	hasStream := map[string]bool{}
	var startProblems, orphans []string
	confirmed := 0
	var heldNotConfirmed []string // reservations held by orders not confirmed
	held := 0                     // streams whose reservation is recorded and not released
	for _, k := range streamKeys {
		id := strings.TrimSuffix(strings.TrimPrefix(k, eventstore.DefaultKeyPrefix+"{"), "}:stream")
		hasStream[id] = true
		events, err := es.Load(ctx, id)
		require.NoError(t, err, "load stream of %s", id)
		var starts, confirms []eventstore.Envelope
		var reserved, released bool
		for _, e := range events {
			switch e.EventType {
			case order.TypeOrderStarted:
				starts = append(starts, e)
			case order.TypeOrderConfirmed:
				confirms = append(confirms, e)
			case order.TypeInventoryReserved:
				reserved = true
			case order.TypeInventoryReleased:
				released = true
			}
		}
		if reserved && !released {
			held++
			if len(confirms) == 0 {
				heldNotConfirmed = append(heldNotConfirmed, fmt.Sprintf("%s (last event %s)", id, events[len(events)-1].EventType))
			}
		}
		if len(starts) != 1 {
			startProblems = append(startProblems, fmt.Sprintf("%s: %d OrderStartedEvent", id, len(starts)))
		}
		if len(confirms) > 1 {
			startProblems = append(startProblems, fmt.Sprintf("%s: %d OrderConfirmedEvent", id, len(confirms)))
		}
		if len(confirms) > 0 {
			confirmed++
		}
		key, ok := mapped[id]
		switch {
		case !ok:
			who := "no key's mapping names it"
			if len(starts) > 0 {
				for _, k := range keys {
					if order.StartSourceCommandID(k) == starts[0].SourceCommandID {
						who = "started for key " + k + ", whose mapping names " + orNone(mapping[k])
						break
					}
				}
			}
			orphans = append(orphans, id+": "+who)
		case len(starts) > 0 && starts[0].SourceCommandID != order.StartSourceCommandID(key):
			startProblems = append(startProblems, fmt.Sprintf("%s: started with sourceCommandId %s, not the start of its key %s", id, starts[0].SourceCommandID, key))
		}
	}
	var missing []string
	for _, key := range keys {
		if id, ok := ackedID[key]; ok && !hasStream[id] {
			missing = append(missing, fmt.Sprintf("%s (%s)", id, describe(key)))
		}
	}

	var stockProblems, notes []string
	for _, l := range []struct {
		sku string
		qty int64
	}{{skuA, qtyA}, {skuB, qtyB}} {
		left, err := f.stores.Inventory().Stock(ctx, l.sku)
		require.NoError(t, err, "read stock of %s", l.sku)
		taken := initialStock - left
		notes = append(notes, fmt.Sprintf("%s %d (confirmed × %d = %d)", l.sku, taken, l.qty, int64(confirmed)*l.qty))
		if want := int64(held) * l.qty; taken != want {
			stockProblems = append(stockProblems, fmt.Sprintf("%s: %d taken, but %d reservations recorded and not released × %d = %d", l.sku, taken, held, l.qty, want))
		}
	}

	assert.Empty(t, firstN(startProblems, 10), "%d streams break exactly-once start/confirm", len(startProblems))
	assert.Empty(t, firstN(mapProblems, 10), "%d idempotency mapping problems", len(mapProblems))
	assert.Empty(t, firstN(orphans, 10), "%d order streams no idempotency mapping names (a key started twice?)", len(orphans))
	assert.Empty(t, firstN(missing, 10), "%d acknowledged orders have no event stream", len(missing))
	// Stock taken == quantity × confirmed orders, split in two so that a
	// failure says which half broke: stock taken exactly once per recorded
	// reservation, and every reservation still held is a confirmed order's.
	assert.Empty(t, stockProblems, "stock is not taken exactly once per recorded reservation")
	assert.Empty(t, firstN(heldNotConfirmed, 10), "%d orders hold a reservation but are not confirmed, so stock taken != quantity × confirmed orders", len(heldNotConfirmed))
	require.Less(t, int64(len(streamKeys))*qtyA, int64(initialStock), "the seed must hold stock for every order")
	return storeFacts{streams: len(streamKeys), confirmed: confirmed, stockNote: strings.Join(notes, ", ")}
}

func orNone(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}
