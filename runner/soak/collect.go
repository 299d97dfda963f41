package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/soak/check"
)

// scan lists the keys matching pattern: on a Redis Cluster, of every
// master (a SCAN reaches one node only).
func scan(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	one := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			out = append(out, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
		return out, err
	}
	return out, one(ctx, rdb)
}

// tagged is the hash tag of a key: prefix{id}suffix → id.
func tagged(key string) string {
	i, j := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
	if i < 0 || j < i {
		return ""
	}
	return key[i+1 : j]
}

var ownershipKinds = map[location.OwnershipKind]string{
	location.OwnershipActivated:    check.OwnActivation,
	location.OwnershipMoved:        check.OwnRelocation,
	location.OwnershipClosed:       check.OwnRelease,
	location.OwnershipIdle:         check.OwnRelease,
	location.OwnershipReleased:     check.OwnRelease,
	location.OwnershipDiscarded:    check.OwnRelease,
	location.OwnershipReleasedDead: check.OwnRepair,
	location.OwnershipTakenOver:    check.OwnTakeover,
}

// collect reads the history from Redis through the stores' read paths,
// plus the client log and the faults.
func collect(ctx context.Context, rdb redis.UniversalClient, ids seedIDs, log *clientLog, faults []Fault, seed uint64) (*check.History, []string, error) {
	var missing []string
	h := &check.History{
		Seed: int64(seed), Orders: map[string]*check.OrderRecord{}, Idempotency: map[string]*check.IdempotencyRecord{},
		Modules: map[string]*check.ModuleRecord{}, Stock: map[string]*check.StockRecord{},
	}
	log.mu.Lock()
	for _, e := range log.events {
		a := check.Attempt{Key: e.Key, API: e.API, Op: e.Op, StatusCode: e.HTTPStatus, ErrorCode: e.Code, ErrorReason: e.Reason,
			OrderID: e.OrderID, OrderStatus: e.OrderStatus, SentAtUnixMs: e.SentAtUnixMs, AtUnixMs: e.AtUnixMs}
		if e.Op == "start" {
			if p := strings.SplitN(e.Body, "/", 3); len(p) == 3 {
				a.CartID, a.PaymentMethodID, a.ShippingAddressID = p[0], p[1], p[2]
			}
			if e.HTTPStatus >= 400 {
				// The answer names no order; only a 2xx does.
				a.OrderID = ""
			}
		}
		h.Client = append(h.Client, a)
	}
	log.mu.Unlock()
	for _, f := range faults {
		eff := ""
		if f.Effective {
			eff = strings.Join(f.Detail, "; ")
			if eff == "" {
				eff = "effective"
			}
		}
		h.Faults = append(h.Faults, check.Fault{Kind: f.Kind, Target: f.Target, AtUnixMs: f.InjectedAtUnixMs, Effect: eff})
	}

	es, err1 := eventstore.NewRedis(eventstore.Config{Client: rdb})
	rm, err2 := readmodel.NewRedis(readmodel.Config{Client: rdb})
	cs, err3 := commerce.NewRedis(commerce.Config{Client: rdb})
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, nil, err
	}
	loc, err := location.NewRedis(location.Config{Client: rdb})
	if err != nil {
		return nil, nil, err
	}

	streams, err := scan(ctx, rdb, eventstore.DefaultKeyPrefix+"{*}:stream")
	if err != nil {
		return nil, nil, fmt.Errorf("scan streams: %w", err)
	}
	// Location records by order id → kind, for the ownership history.
	locKind := map[string]string{}
	locKeys, err := scan(ctx, rdb, "sm:loc:*")
	if err != nil {
		return nil, nil, fmt.Errorf("scan location: %w", err)
	}
	for _, k := range locKeys {
		rest := strings.TrimPrefix(k, "sm:loc:")
		if i := strings.Index(rest, ":{"); i > 0 && strings.HasSuffix(rest, "}") {
			locKind[tagged(k)] = rest[:i]
		}
	}
	for _, sk := range streams {
		id := tagged(sk)
		envs, err := es.Load(ctx, id)
		if err != nil {
			return nil, nil, fmt.Errorf("load stream %s: %w", id, err)
		}
		rec := &check.OrderRecord{}
		for _, e := range envs {
			rec.Stream = append(rec.Stream, check.Envelope{Version: e.Version, EventID: e.EventID, EventType: e.EventType,
				SourceCommandID: e.SourceCommandID, CreatedAtUnixMs: e.CreatedAtUnixMs, Data: string(e.Data), Schema: e.Schema,
				FenceGeneration: e.FenceGeneration, FenceEpoch: e.FenceEpoch})
		}
		if st, v, err := rm.Get(ctx, id); err == nil && st != nil {
			raw, err := contracts.MarshalJSON(st)
			if err != nil {
				return nil, nil, fmt.Errorf("projection of %s: %w", id, err)
			}
			rec.ReadModel = &check.ReadModel{Status: st.GetStatus().String(), Version: v, State: raw}
		}
		if kind, ok := locKind[id]; ok {
			hist, err := loc.History(ctx, kind, id)
			if err != nil {
				return nil, nil, fmt.Errorf("ownership history %s: %w", id, err)
			}
			for _, ev := range hist {
				k, ok := ownershipKinds[ev.Kind]
				if !ok {
					k = string(ev.Kind)
				}
				rec.Ownership = append(rec.Ownership, check.OwnershipEvent{Kind: k, Member: ev.Member, Generation: ev.Generation, AtUnixMs: ev.AtUnixMs})
				rec.LocationGeneration = max(rec.LocationGeneration, ev.Generation)
			}
		}
		h.Orders[id] = rec
	}
	// Every module record, by the order it names: an order with records
	// and no stream is in the history too.
	recs, err := cs.RecordsByOrder(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("module records: %w", err)
	}
	for id, r := range recs {
		if id == "" {
			// A Release before any Reserve names no order; the workflow
			// never sends one.
			missing = append(missing, fmt.Sprintf("%d reservation and %d payment records name no order", len(r.Reservations), len(r.Payments)))
			continue
		}
		h.Modules[id] = moduleRecord(id, r)
	}
	for id := range h.Orders {
		if h.Modules[id] == nil {
			h.Modules[id] = &check.ModuleRecord{}
		}
	}
	if len(locKind) == 0 {
		missing = append(missing, "no Location records found: ownership histories empty")
	}

	// Mappings under their order's tag name their key in a field; those
	// of the layout before are tagged by the key itself.
	for _, layout := range []struct {
		pattern string
		key     func(redisKey string, v map[string]string) string
	}{
		{commerce.DefaultKeyPrefix + "idem:order:{*}", func(_ string, v map[string]string) string { return v["key"] }},
		{commerce.DefaultKeyPrefix + "idem:{*}", func(k string, _ map[string]string) string { return tagged(k) }},
	} {
		idem, err := scan(ctx, rdb, layout.pattern)
		if err != nil {
			return nil, nil, fmt.Errorf("scan idempotency: %w", err)
		}
		for _, k := range idem {
			v, err := rdb.HGetAll(ctx, k).Result()
			if err != nil {
				return nil, nil, fmt.Errorf("idempotency %s: %w", k, err)
			}
			r := &check.IdempotencyRecord{Status: v["status"]}
			if v["orderId"] != "" {
				r.OrderIDs = []string{v["orderId"]}
			}
			key := layout.key(k, v)
			if prev := h.Idempotency[key]; prev != nil && len(r.OrderIDs) == 1 && !slices.Contains(prev.OrderIDs, r.OrderIDs[0]) {
				// Both layouts map the key to different orders: the
				// checker sees both.
				r.OrderIDs = append(prev.OrderIDs, r.OrderIDs...)
			}
			h.Idempotency[key] = r
		}
	}
	for sku, initial := range ids.Stock {
		n, err := cs.Inventory().Stock(ctx, sku)
		if err != nil {
			return nil, nil, fmt.Errorf("stock %s: %w", sku, err)
		}
		h.Stock[sku] = &check.StockRecord{Initial: initial, Remaining: n}
	}
	return h, missing, nil
}

// moduleRecord sums up the records naming one order (commerce.RecordScan):
// the counts over all of them; the reservation and payment described are
// the ones under the order's own ids when they exist, else the first by
// id; the payment's amount and currency are those of the accepted record,
// if any, which is what the checker holds against the stream.
func moduleRecord(id string, recs *commerce.OrderRecords) *check.ModuleRecord {
	m := &check.ModuleRecord{Reservations: len(recs.Reservations), Authorizations: len(recs.Payments)}
	if len(recs.Reservations) > 0 {
		rsv := recs.Reservations[0]
		for _, r := range recs.Reservations {
			if r.ReservationID == order.ReservationID(id) {
				rsv = r
			}
		}
		m.Reserved = rsv.Decided && rsv.Accepted
		m.ReservationFailed = rsv.Decided && !rsv.Accepted
		m.Released = rsv.Released
		m.ReserveCalls, m.ReleaseCalls = int(rsv.ReserveCalls), int(rsv.ReleaseCalls)
		for _, l := range rsv.Lines {
			m.Lines = append(m.Lines, check.Line{SKU: l.GetSku(), Quantity: int64(l.GetQuantity())})
		}
	}
	var accepted *commerce.ScannedPayment
	for i, p := range recs.Payments {
		m.AuthorizeCalls += int(p.Calls)
		if p.Accepted && (accepted == nil || p.PaymentID == order.PaymentID(id)) {
			accepted = &recs.Payments[i]
		}
	}
	m.PaymentCalled = len(recs.Payments) > 0
	if accepted != nil {
		m.Authorized = true
		m.PaymentID, m.PaymentAmount, m.PaymentCurrency = accepted.PaymentID, accepted.Amount, accepted.Currency
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
