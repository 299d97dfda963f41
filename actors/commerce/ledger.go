package commerce

import (
	"context"
	"time"
)

// Movement kinds: why a SKU's stock moved. They are part of the ledger's
// contract and never change meaning.
const (
	// MovementSeed: the stock was set (SetStock, ApplySeed); Delta is the
	// new quantity minus the old, so the first seed of a SKU is its
	// initial stock.
	MovementSeed = "seed"
	// MovementReserve: a reservation line took Delta (< 0) from stock.
	MovementReserve = "reserve"
	// MovementCompensate: a line held by a reservation that was then
	// refused (another of its SKUs was short) went back; Delta > 0.
	MovementCompensate = "compensate"
	// MovementRelease: a line of an accepted reservation went back on
	// Release; Delta > 0.
	MovementRelease = "release"
	// MovementRefuse: a reservation line found too little stock. Delta is
	// 0; Requested is what it asked for and Available what it found. It
	// moves nothing and is there so that a refusal can be audited.
	MovementRefuse = "refuse"
)

// Movement is one entry of a SKU's stock ledger.
type Movement struct {
	// ID orders the movements of one SKU (the ledger's own id).
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Delta is the change of available stock; Available the quantity
	// right after it.
	Delta     int64 `json:"delta"`
	Available int64 `json:"available"`
	// Requested is set on a refusal only.
	Requested     int64  `json:"requested,omitempty"`
	ReservationID string `json:"reservationId,omitempty"`
	OrderID       string `json:"orderId,omitempty"`
	// At is the store's clock (Config.Now) when the movement was made,
	// to the millisecond.
	At time.Time `json:"at"`
}

// StockReport is a SKU's available stock and its latest movements, read
// at one instant: the newest movement's Available is Available.
type StockReport struct {
	SKU       string
	Available int64
	// Movements are the latest ones, newest first.
	Movements []Movement
}

// StockAudit checks a SKU's whole ledger against its stock.
type StockAudit struct {
	SKU       string
	Available int64
	// Initial is the stock right after the oldest movement kept: the
	// initial stock (the first seed's Delta) until the ledger is trimmed
	// (Config.LedgerMaxLen). Sum is the sum of every later movement's
	// Delta. The ledger's invariant is Initial + Sum == Available: over
	// the kept movements, which a trimmed ledger starts at its oldest.
	Initial, Sum int64
	Movements    int
	// Refusals counts refuse movements; TransientRefusals those of them
	// that only another reservation's transient hold caused
	// (TransientRefusals the function).
	Refusals, TransientRefusals int
}

// Consistent reports whether the ledger explains the stock.
func (a StockAudit) Consistent() bool { return a.Initial+a.Sum == a.Available }

// MaxStockMovements bounds StockReport's limit.
const MaxStockMovements = 500

// StockLedger reads the inventory's per-SKU stock ledger: every change of
// a SKU's stock appends a movement in the same atomic step as the change,
// so the ledger explains the stock at every instant. A store may keep
// only the latest movements (on Redis, Config.LedgerMaxLen), dropping the
// oldest in the same step as an append; what is kept still explains the
// stock from its oldest movement on. It only reads.
type StockLedger interface {
	// StockReport returns the SKU's available stock and its latest limit
	// movements (1 <= limit <= MaxStockMovements, else ErrInvalidArgument).
	// A SKU that was never stocked (no SetStock or seed) is ErrNotFound.
	StockReport(ctx context.Context, sku string, limit int) (StockReport, error)
	// Movements returns every movement of the SKU the ledger keeps,
	// oldest first; none for an unknown SKU.
	Movements(ctx context.Context, sku string) ([]Movement, error)
	// Audit reads the whole ledger as kept and the stock at one instant
	// and sums it up. A SKU that was never stocked is ErrNotFound.
	Audit(ctx context.Context, sku string) (StockAudit, error)
}

// TransientRefusals counts the refusals of one SKU's ledger (its
// movements oldest first) that only transient holds explain: at the
// refusal, the stock found plus what reservations that were later
// compensated held on the SKU covered the request. Such a refusal is the
// price of reserving SKU by SKU instead of all at once: without the other
// order's partial hold, which it gave back because another of its SKUs
// was short, the refused line would have been taken.
func TransientRefusals(movements []Movement) int {
	compensated := map[string]bool{}
	for _, m := range movements {
		if m.Kind == MovementCompensate {
			compensated[m.ReservationID] = true
		}
	}
	var transient int64
	n := 0
	for _, m := range movements {
		switch {
		case !compensated[m.ReservationID]:
		case m.Kind == MovementReserve, m.Kind == MovementCompensate:
			transient -= m.Delta
		}
		if m.Kind == MovementRefuse && m.Available+transient >= m.Requested {
			n++
		}
	}
	return n
}
