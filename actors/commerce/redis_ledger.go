package commerce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The stock ledger on Redis: one stream per SKU under the SKU's tag,
// appended by the same scripts that move the SKU's stock. Reads take the
// stock and the stream in one MULTI (one slot), so they see one instant.

// StockReport implements StockLedger.
func (r inventoryStore) StockReport(ctx context.Context, sku string, limit int) (StockReport, error) {
	if sku == "" {
		return StockReport{}, invalid("sku is empty")
	}
	if limit < 1 || limit > MaxStockMovements {
		return StockReport{}, invalid("limit %d, want 1..%d", limit, MaxStockMovements)
	}
	var stock *redis.StringCmd
	var entries *redis.XMessageSliceCmd
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		stock = p.Get(ctx, r.keys.stock(sku))
		entries = p.XRevRangeN(ctx, r.keys.ledger(sku), "+", "-", int64(limit))
		return nil
	})
	available, err := stockOf(sku, stock, err)
	if err != nil {
		return StockReport{}, err
	}
	ms, err := movements(sku, entries.Val())
	if err != nil {
		return StockReport{}, err
	}
	return StockReport{SKU: sku, Available: available, Movements: ms}, nil
}

// Movements implements StockLedger.
func (r inventoryStore) Movements(ctx context.Context, sku string) ([]Movement, error) {
	if sku == "" {
		return nil, invalid("sku is empty")
	}
	entries, err := r.client.XRange(ctx, r.keys.ledger(sku), "-", "+").Result()
	if err != nil {
		return nil, translate("read stock ledger", err)
	}
	return movements(sku, entries)
}

// Audit implements StockLedger.
func (r inventoryStore) Audit(ctx context.Context, sku string) (StockAudit, error) {
	if sku == "" {
		return StockAudit{}, invalid("sku is empty")
	}
	var stock *redis.StringCmd
	var entries *redis.XMessageSliceCmd
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		stock = p.Get(ctx, r.keys.stock(sku))
		entries = p.XRange(ctx, r.keys.ledger(sku), "-", "+")
		return nil
	})
	available, err := stockOf(sku, stock, err)
	if err != nil {
		return StockAudit{}, err
	}
	ms, err := movements(sku, entries.Val())
	if err != nil {
		return StockAudit{}, err
	}
	a := StockAudit{SKU: sku, Available: available, Movements: len(ms), TransientRefusals: TransientRefusals(ms)}
	for i, m := range ms {
		if i == 0 {
			// The stock right after the oldest movement kept: the initial
			// stock while the ledger starts at its first seed (whose Delta
			// it is), and the point the kept movements start from once
			// older ones were trimmed.
			a.Initial = m.Available
		} else {
			a.Sum += m.Delta
		}
		if m.Kind == MovementRefuse {
			a.Refusals++
		}
	}
	return a, nil
}

// stockOf reads the stock out of a MULTI's reply: a SKU without a stock
// key was never stocked.
func stockOf(sku string, stock *redis.StringCmd, err error) (int64, error) {
	if errors.Is(err, redis.Nil) || (err == nil && errors.Is(stock.Err(), redis.Nil)) {
		return 0, fmt.Errorf("%w: sku %q has never been stocked", ErrNotFound, sku)
	}
	if err != nil {
		return 0, translate("read stock ledger", err)
	}
	n, perr := strconv.ParseInt(stock.Val(), 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("%w: stock of %q is %q", ErrCorrupt, sku, stock.Val())
	}
	return n, nil
}

func movements(sku string, entries []redis.XMessage) ([]Movement, error) {
	out := make([]Movement, 0, len(entries))
	for _, e := range entries {
		m, err := movement(e)
		if err != nil {
			return nil, fmt.Errorf("%w: ledger of %q entry %s: %v", ErrCorrupt, sku, e.ID, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func movement(e redis.XMessage) (Movement, error) {
	str := func(f string) string { s, _ := e.Values[f].(string); return s }
	num := func(f string, required bool) (int64, error) {
		s := str(f)
		if s == "" && !required {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is %q", f, s)
		}
		return n, nil
	}
	m := Movement{ID: e.ID, Kind: str("kind"), ReservationID: str("reservationId"), OrderID: str("orderId")}
	var err error
	if m.Delta, err = num("delta", true); err != nil {
		return Movement{}, err
	}
	if m.Available, err = num("available", true); err != nil {
		return Movement{}, err
	}
	if m.Requested, err = num("requested", false); err != nil {
		return Movement{}, err
	}
	at, err := num("at", true)
	if err != nil {
		return Movement{}, err
	}
	m.At = time.UnixMilli(at)
	switch m.Kind {
	case MovementSeed, MovementReserve, MovementCompensate, MovementRelease, MovementRefuse:
	default:
		return Movement{}, fmt.Errorf("kind is %q", m.Kind)
	}
	return m, nil
}
