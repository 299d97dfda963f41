package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
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
				SourceCommandID: e.SourceCommandID, CreatedAtUnixMs: e.CreatedAtUnixMs, Data: string(e.Data),
				FenceGeneration: e.FenceGeneration, FenceEpoch: e.FenceEpoch})
		}
		if st, v, err := rm.Get(ctx, id); err == nil && st != nil {
			raw, _ := contracts.MarshalJSON(st)
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
		mod, err := moduleRecord(ctx, rdb, id)
		if err != nil {
			return nil, nil, err
		}
		h.Modules[id] = mod
	}
	if len(locKind) == 0 {
		missing = append(missing, "no Location records found: ownership histories empty")
	}

	idem, err := scan(ctx, rdb, commerce.DefaultKeyPrefix+"idem:{*}")
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
		h.Idempotency[tagged(k)] = r
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

// moduleRecord reads an order's reservation and payment records.
func moduleRecord(ctx context.Context, rdb redis.UniversalClient, id string) (*check.ModuleRecord, error) {
	m := &check.ModuleRecord{}
	rsv, err := rdb.HGetAll(ctx, commerce.DefaultKeyPrefix+"reservation:{rsv-"+id+"}").Result()
	if err != nil {
		return nil, fmt.Errorf("reservation of %s: %w", id, err)
	}
	if a, ok := rsv["accepted"]; ok {
		m.Reservations = 1
		m.Reserved = a == "1"
		m.ReservationFailed = a == "0"
	}
	m.Released = rsv["released"] == "1"
	m.ReserveCalls, _ = strconv.Atoi(rsv["reserveCalls"])
	m.ReleaseCalls, _ = strconv.Atoi(rsv["releaseCalls"])
	if l := rsv["lines"]; l != "" {
		if err := json.Unmarshal([]byte(l), &m.Lines); err != nil {
			return nil, fmt.Errorf("reservation lines of %s: %w", id, err)
		}
	}
	pay, err := rdb.HGetAll(ctx, commerce.DefaultKeyPrefix+"payment:{pay-"+id+"}").Result()
	if err != nil {
		return nil, fmt.Errorf("payment of %s: %w", id, err)
	}
	if a, ok := pay["accepted"]; ok {
		m.Authorizations = 1
		m.Authorized = a == "1"
	}
	m.AuthorizeCalls, _ = strconv.Atoi(pay["calls"])
	m.PaymentCalled = m.AuthorizeCalls > 0 || m.Authorizations > 0
	return m, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
