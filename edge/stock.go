package edge

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// The stock report (GET /admin/stock/{sku}): a SKU's available stock and
// its latest ledger movements, for an operator auditing why stock moved.
// It only reads the ledger (commerce.StockLedger) and never reaches a
// grain. The API's wiring mounts it on the admin listener with -admin.

// StockLedger reads a SKU's stock and ledger (commerce.StockLedger).
type StockLedger interface {
	// StockReport returns the SKU's available stock and its latest limit
	// movements, newest first, read at one instant; an error wrapping
	// commerce.ErrNotFound for a SKU never stocked.
	StockReport(ctx context.Context, sku string, limit int) (commerce.StockReport, error)
}

// Limits of GET /admin/stock/{sku}?limit=N.
const (
	DefaultStockMovements = 20
	MaxStockMovements     = 200
)

// StockAdmin is the stock report's Mount.
type StockAdmin struct {
	Ledger StockLedger
}

// StockMovement is one ledger movement in the reply (commerce.Movement).
type StockMovement struct {
	ID            string `json:"id"`
	Kind          string `json:"kind"`
	Delta         int64  `json:"delta"`
	Available     int64  `json:"available"`
	Requested     int64  `json:"requested,omitempty"`
	ReservationID string `json:"reservationId,omitempty"`
	OrderID       string `json:"orderId,omitempty"`
	AtUnixMs      int64  `json:"atUnixMs"`
}

// StockReply is the reply of GET /admin/stock/{sku}. Movements are the
// latest, newest first; the first one's available is Available.
type StockReply struct {
	SKU       string          `json:"sku"`
	Available int64           `json:"available"`
	Movements []StockMovement `json:"movements"`
}

// Mount implements Mount.
func (a StockAdmin) Mount(r AdminRouter) {
	r.Handle(http.MethodGet, "/admin/stock/{sku}", func(w http.ResponseWriter, req *http.Request) {
		a.report(r, w, req)
	})
}

// report is GET /admin/stock/{sku}?limit=N (1..MaxStockMovements, default
// DefaultStockMovements). A SKU never stocked is 404 NOT_FOUND.
func (a StockAdmin) report(r AdminRouter, w http.ResponseWriter, req *http.Request) {
	sku := req.PathValue("sku")
	err := r.CheckID("sku", sku)
	limit := DefaultStockMovements
	if raw := req.URL.Query().Get("limit"); err == nil && raw != "" {
		n, perr := strconv.Atoi(raw)
		if perr != nil || n < 1 || n > MaxStockMovements {
			err = invalidField("limit", "must be an integer from 1 to %d", MaxStockMovements)
		}
		limit = n
	}
	if err != nil {
		r.Fail(w, req, err)
		return
	}
	ctx, cancel := r.Context(req)
	defer cancel()
	rep, err := a.Ledger.StockReport(ctx, sku, limit)
	if errkind.Of(err) == errkind.NotFound {
		err = fmt.Errorf("%w: %w", errUnknownSKU, err)
	}
	if err != nil {
		r.Fail(w, req, fmt.Errorf("stock of %s: %w", sku, err))
		return
	}
	out := StockReply{SKU: rep.SKU, Available: rep.Available, Movements: make([]StockMovement, 0, len(rep.Movements))}
	for _, m := range rep.Movements {
		out.Movements = append(out.Movements, StockMovement{ID: m.ID, Kind: m.Kind, Delta: m.Delta, Available: m.Available,
			Requested: m.Requested, ReservationID: m.ReservationID, OrderID: m.OrderID, AtUnixMs: m.At.UnixMilli()})
	}
	r.JSON(w, http.StatusOK, out)
}
