package commerce

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

var _ RecordScan = (*Redis)(nil)

// scanPage is SCAN's COUNT hint and the size of each HGETALL pipeline.
const scanPage = 500

// RecordsByOrder implements RecordScan. Each record is read whole by one
// HGETALL, so it is one consistent version of that record; records are
// not read at one instant, which a checker run after the load has
// stopped does not need.
func (r *Redis) RecordsByOrder(ctx context.Context) (map[string]*OrderRecords, error) {
	out := map[string]*OrderRecords{}
	var mu sync.Mutex
	of := func(orderID string) *OrderRecords {
		o := out[orderID]
		if o == nil {
			o = &OrderRecords{}
			out[orderID] = o
		}
		return o
	}
	rsvPrefix, payPrefix := r.keys.reservation(""), r.keys.paymentRecord("")
	rsvPrefix, payPrefix = rsvPrefix[:len(rsvPrefix)-1], payPrefix[:len(payPrefix)-1]
	one := func(ctx context.Context, c redis.UniversalClient) error {
		err := scanHashes(ctx, c, globEscape(rsvPrefix)+"*}", func(key string, v map[string]string) error {
			rec, err := scannedReservation(strings.TrimSuffix(strings.TrimPrefix(key, rsvPrefix), "}"), key, v)
			if err != nil {
				return err
			}
			mu.Lock()
			o := of(v["orderId"])
			o.Reservations = append(o.Reservations, rec)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return err
		}
		return scanHashes(ctx, c, globEscape(payPrefix)+"*}", func(key string, v map[string]string) error {
			rec, err := scannedPayment(strings.TrimSuffix(strings.TrimPrefix(key, payPrefix), "}"), key, v)
			if err != nil {
				return err
			}
			mu.Lock()
			o := of(v["orderId"])
			o.Payments = append(o.Payments, rec)
			mu.Unlock()
			return nil
		})
	}
	var err error
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		// A SCAN reaches one node only.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return one(ctx, m) })
	} else {
		err = one(ctx, r.client)
	}
	if err != nil {
		return nil, err
	}
	for _, o := range out {
		sort.Slice(o.Reservations, func(i, j int) bool { return o.Reservations[i].ReservationID < o.Reservations[j].ReservationID })
		sort.Slice(o.Payments, func(i, j int) bool { return o.Payments[i].PaymentID < o.Payments[j].PaymentID })
	}
	return out, nil
}

// scanHashes calls fn with every hash matching pattern on c, a page of
// HGETALLs per round trip. A key deleted between SCAN and HGETALL reads
// empty and is skipped.
func scanHashes(ctx context.Context, c redis.UniversalClient, pattern string, fn func(key string, v map[string]string) error) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, scanPage).Result()
		if err != nil {
			return translate("scan module records", err)
		}
		if len(keys) > 0 {
			cmds := make([]*redis.MapStringStringCmd, len(keys))
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					cmds[i] = p.HGetAll(ctx, k)
				}
				return nil
			})
			if err != nil {
				return translate("read module records", err)
			}
			for i, k := range keys {
				if v := cmds[i].Val(); len(v) > 0 {
					if err := fn(k, v); err != nil {
						return err
					}
				}
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func scannedReservation(id, key string, v map[string]string) (ScannedReservation, error) {
	rec := ScannedReservation{ReservationID: id}
	switch a, ok := v["accepted"]; {
	case !ok:
	case a == "0" || a == "1":
		rec.Decided, rec.Accepted = true, a == "1"
	default:
		return ScannedReservation{}, fmt.Errorf("%w: reservation %q has accepted %q", ErrCorrupt, id, a)
	}
	rec.Released = rec.Accepted && v["released"] == "1"
	if raw := v["lines"]; raw != "" {
		lines, err := decodeLines(id, raw)
		if err != nil {
			return ScannedReservation{}, err
		}
		for _, l := range lines {
			rec.Lines = append(rec.Lines, &contracts.OrderLine{Sku: l.SKU, Quantity: int32(l.Quantity)})
		}
	}
	var err error
	if rec.ReserveCalls, err = counterField(v, key, "reserveCalls"); err != nil {
		return ScannedReservation{}, err
	}
	if rec.ReleaseCalls, err = counterField(v, key, "releaseCalls"); err != nil {
		return ScannedReservation{}, err
	}
	return rec, nil
}

func scannedPayment(id, key string, v map[string]string) (ScannedPayment, error) {
	rec := ScannedPayment{PaymentID: id, MethodID: v["methodId"], Currency: v["currency"]}
	switch a, ok := v["accepted"]; {
	case !ok:
	case a == "0" || a == "1":
		rec.Decided, rec.Accepted = true, a == "1"
	default:
		return ScannedPayment{}, fmt.Errorf("%w: payment %q has accepted %q", ErrCorrupt, id, a)
	}
	if raw, ok := v["amount"]; ok {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return ScannedPayment{}, fmt.Errorf("%w: payment %q amount is %q", ErrCorrupt, id, raw)
		}
		rec.Amount = n
	}
	var err error
	if rec.Calls, err = counterField(v, key, "calls"); err != nil {
		return ScannedPayment{}, err
	}
	return rec, nil
}

// globEscape quotes SCAN MATCH's special characters, so a key prefix
// matches only itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
