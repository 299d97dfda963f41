package commercetest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The stock ledger (commerce.StockLedger) next to the inventory it
// audits: a movement per SKU for every reservation, compensation and
// release, initial stock + movements = available stock at every instant,
// and, under contention for the last units, never oversold and every
// reservation holding all its lines or none.

// LedgeredInventory is an inventory with its stock ledger.
type LedgeredInventory interface {
	commerce.Inventory
	commerce.StockLedger
}

// RunStockLedgerContract runs the ledger's contract as subtests; newStore
// is called once per subtest and must return an inventory with no stock,
// no reservations and an empty ledger.
func RunStockLedgerContract(t *testing.T, newStore func(t *testing.T) LedgeredInventory) {
	t.Helper()
	run(t, newStore, []testCase[LedgeredInventory]{
		{"SeedIsTheInitialStock", testLedgerSeed},
		{"ReserveAndReleaseAppendOneMovementPerSKU", testLedgerReserveRelease},
		{"RefusedReservationMovesNothingNet", testLedgerRefused},
		{"ReportLatestFirstWithinLimit", testLedgerReport},
		{"ContendedLastUnitsNeverOversold", testLedgerContended},
	})
}

// audit checks the ledger's invariant for sku in both ways the ledger
// offers (Audit, and summing Movements against Stock) and that every
// movement's Available is the running sum and never negative.
func audit(t *testing.T, inv LedgeredInventory, sku string) commerce.StockAudit {
	t.Helper()
	ctx := ctxT(t)
	a, err := inv.Audit(ctx, sku)
	require.NoError(t, err)
	require.True(t, a.Consistent(), "%s: initial %d + movements %d != available %d", sku, a.Initial, a.Sum, a.Available)
	ms, err := inv.Movements(ctx, sku)
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	require.Equal(t, commerce.MovementSeed, ms[0].Kind, "%s: the ledger starts with the initial stock", sku)
	var running int64
	for i, m := range ms {
		running += m.Delta
		require.Equal(t, running, m.Available, "%s movement %d (%s): available is the running sum", sku, i, m.Kind)
		require.GreaterOrEqual(t, m.Available, int64(0), "%s movement %d: never oversold", sku, i)
		require.False(t, m.At.IsZero(), "%s movement %d has a time", sku, i)
	}
	require.Equal(t, stock(t, inv, sku), running, "%s: initial stock + movements = available stock", sku)
	return a
}

// byReservation is the net movement of each reservation on sku.
func byReservation(t *testing.T, inv LedgeredInventory, sku string) map[string]int64 {
	t.Helper()
	ms, err := inv.Movements(ctxT(t), sku)
	require.NoError(t, err)
	out := map[string]int64{}
	for _, m := range ms {
		if m.ReservationID != "" {
			out[m.ReservationID] += m.Delta
		}
	}
	return out
}

func movementsOf(t *testing.T, inv LedgeredInventory, sku, reservationID string) []commerce.Movement {
	t.Helper()
	ms, err := inv.Movements(ctxT(t), sku)
	require.NoError(t, err)
	var out []commerce.Movement
	for _, m := range ms {
		if m.ReservationID == reservationID {
			out = append(out, m)
		}
	}
	return out
}

func testLedgerSeed(t *testing.T, inv LedgeredInventory) {
	ctx := ctxT(t)
	_, err := inv.StockReport(ctx, "a", 10)
	require.ErrorIs(t, err, commerce.ErrNotFound, "a SKU never stocked")
	_, err = inv.Audit(ctx, "a")
	require.ErrorIs(t, err, commerce.ErrNotFound)
	ms, err := inv.Movements(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, ms)

	require.NoError(t, inv.SetStock(ctx, "a", 7))
	a := audit(t, inv, "a")
	require.EqualValues(t, 7, a.Initial)
	require.Zero(t, a.Sum)
	require.NoError(t, inv.SetStock(ctx, "a", 7))
	require.Equal(t, 1, audit(t, inv, "a").Movements, "setting the same stock again moves nothing")
	require.NoError(t, inv.SetStock(ctx, "a", 4))
	a = audit(t, inv, "a")
	require.EqualValues(t, 7, a.Initial)
	require.EqualValues(t, -3, a.Sum, "a later seed records its change")

	require.NoError(t, inv.SetStock(ctx, "zero", 0))
	a = audit(t, inv, "zero")
	require.Equal(t, 1, a.Movements, "a SKU stocked at 0 has its initial stock recorded")
	rep, err := inv.StockReport(ctx, "zero", 1)
	require.NoError(t, err)
	require.Zero(t, rep.Available)
}

func testLedgerReserveRelease(t *testing.T, inv LedgeredInventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	require.NoError(t, inv.SetStock(ctx, "b", 5))
	req := reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 3},
		&contracts.OrderLine{Sku: "b", Quantity: 2},
		&contracts.OrderLine{Sku: "a", Quantity: 1})
	for range 3 {
		res, err := inv.Reserve(ctx, req)
		require.NoError(t, err)
		require.True(t, res.GetAccepted())
	}
	for sku, q := range map[string]int64{"a": 4, "b": 2} {
		ms := movementsOf(t, inv, sku, "res-1")
		require.Len(t, ms, 1, "%s: one movement for the reservation, repeats add none", sku)
		require.Equal(t, commerce.MovementReserve, ms[0].Kind)
		require.Equal(t, -q, ms[0].Delta)
		require.Equal(t, "order-res-1", ms[0].OrderID)
		audit(t, inv, sku)
	}
	for range 2 {
		rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-res-1", ReservationId: "res-1", Reason: "payment failed"})
		require.NoError(t, err)
		require.True(t, rel.GetReleased())
	}
	for sku, q := range map[string]int64{"a": 4, "b": 2} {
		ms := movementsOf(t, inv, sku, "res-1")
		require.Len(t, ms, 2, "%s: reserve and release, the repeated release adds none", sku)
		require.Equal(t, commerce.MovementRelease, ms[1].Kind)
		require.Equal(t, q, ms[1].Delta)
		require.Equal(t, "order-res-1", ms[1].OrderID)
		require.Zero(t, byReservation(t, inv, sku)["res-1"])
		audit(t, inv, sku)
	}
	require.EqualValues(t, 10, stock(t, inv, "a"))
}

func testLedgerRefused(t *testing.T, inv LedgeredInventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	require.NoError(t, inv.SetStock(ctx, "b", 1))
	require.NoError(t, inv.SetStock(ctx, "c", 10))
	req := reserveReq("res-1",
		&contracts.OrderLine{Sku: "a", Quantity: 3},
		&contracts.OrderLine{Sku: "b", Quantity: 2},
		&contracts.OrderLine{Sku: "c", Quantity: 3})
	for range 2 {
		res, err := inv.Reserve(ctx, req)
		require.NoError(t, err)
		require.False(t, res.GetAccepted())
	}
	for _, sku := range []string{"a", "b", "c"} {
		require.Zero(t, byReservation(t, inv, sku)["res-1"], "%s: a refused reservation holds nothing", sku)
		for _, m := range movementsOf(t, inv, sku, "res-1") {
			require.Contains(t, []string{commerce.MovementReserve, commerce.MovementCompensate, commerce.MovementRefuse}, m.Kind)
		}
		audit(t, inv, sku)
	}
	refusals := movementsOf(t, inv, "b", "res-1")
	require.Len(t, refusals, 1, "the short SKU records the refusal once")
	require.Equal(t, commerce.MovementRefuse, refusals[0].Kind)
	require.Zero(t, refusals[0].Delta)
	require.EqualValues(t, 2, refusals[0].Requested)
	require.EqualValues(t, 1, refusals[0].Available)
	require.EqualValues(t, 10, stock(t, inv, "a"))
	require.EqualValues(t, 10, stock(t, inv, "c"))

	// A release of the refused reservation moves nothing either.
	_, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-res-1", ReservationId: "res-1"})
	require.NoError(t, err)
	for _, sku := range []string{"a", "b", "c"} {
		require.Zero(t, byReservation(t, inv, sku)["res-1"])
		audit(t, inv, sku)
	}
}

func testLedgerReport(t *testing.T, inv LedgeredInventory) {
	ctx := ctxT(t)
	require.NoError(t, inv.SetStock(ctx, "a", 10))
	for i := range 4 {
		res, err := inv.Reserve(ctx, reserveReq(fmt.Sprintf("res-%d", i), &contracts.OrderLine{Sku: "a", Quantity: int32(i + 1)}))
		require.NoError(t, err)
		require.True(t, res.GetAccepted())
	}
	rep, err := inv.StockReport(ctx, "a", 2)
	require.NoError(t, err)
	require.Equal(t, "a", rep.SKU)
	require.EqualValues(t, 0, rep.Available)
	require.Len(t, rep.Movements, 2)
	require.Equal(t, "res-3", rep.Movements[0].ReservationID, "newest first")
	require.Equal(t, "res-2", rep.Movements[1].ReservationID)
	require.Equal(t, rep.Available, rep.Movements[0].Available, "the report is one instant")

	rep, err = inv.StockReport(ctx, "a", commerce.MaxStockMovements)
	require.NoError(t, err)
	require.Len(t, rep.Movements, 5, "seed and four reservations")
	for _, limit := range []int{0, -1, commerce.MaxStockMovements + 1} {
		_, err = inv.StockReport(ctx, "a", limit)
		require.ErrorIs(t, err, commerce.ErrInvalidArgument, "limit %d", limit)
	}
	_, err = inv.StockReport(ctx, "", 1)
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
}

// testLedgerContended races many orders for the last units of several
// SKUs, a third of the accepted ones releasing again at once. Whatever the
// interleaving: every reservation holds all its lines or none, no stock
// goes below zero, stock = initial − lines of accepted reservations not
// released, and the ledger explains it. Refusals that only another
// order's transient partial hold caused are counted and logged.
func testLedgerContended(t *testing.T, inv LedgeredInventory) {
	ctx := ctxT(t)
	const (
		nSKU    = 4
		initial = 15
		orders  = 48
	)
	skus := make([]string, nSKU)
	for i := range skus {
		skus[i] = fmt.Sprintf("sku-%d", i)
		require.NoError(t, inv.SetStock(ctx, skus[i], initial))
	}
	rng := rand.New(rand.NewPCG(15, 2))
	reqs := make([]*contracts.ReserveInventoryReq, orders)
	for i := range reqs {
		perm := rng.Perm(nSKU)[:2+rng.IntN(nSKU-1)]
		sort.Ints(perm)
		var lines []*contracts.OrderLine
		for _, k := range perm {
			lines = append(lines, &contracts.OrderLine{Sku: skus[k], Quantity: int32(1 + rng.IntN(2))})
		}
		reqs[i] = reserveReq(fmt.Sprintf("res-%02d", i), lines...)
	}

	var mu sync.Mutex
	accepted, released := map[string]bool{}, map[string]bool{}
	parallel(orders, func(i int) {
		req := reqs[i]
		// Each order's Reserve is sent twice at once, as a retry racing
		// its first attempt would be.
		var res [2]*contracts.ReserveInventoryRes
		var errs [2]error
		parallel(2, func(j int) { res[j], errs[j] = inv.Reserve(ctx, req) })
		for j := range 2 {
			require.NoError(t, errs[j])
		}
		require.Equal(t, res[0].GetAccepted(), res[1].GetAccepted(), "%s: both calls answer the first result", req.ReservationId)
		require.Equal(t, res[0].GetReason(), res[1].GetReason())
		rel := false
		if res[0].GetAccepted() && i%3 == 0 {
			r, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: req.OrderId, ReservationId: req.ReservationId})
			require.NoError(t, err)
			require.True(t, r.GetReleased())
			rel = true
		}
		mu.Lock()
		accepted[req.ReservationId], released[req.ReservationId] = res[0].GetAccepted(), rel
		mu.Unlock()
	})

	want := map[string]int64{}
	for _, sku := range skus {
		want[sku] = initial
	}
	nets := map[string]map[string]int64{}
	for _, sku := range skus {
		nets[sku] = byReservation(t, inv, sku)
	}
	nAccepted, nRefused, transient := 0, 0, 0
	for _, req := range reqs {
		id := req.ReservationId
		kept := accepted[id] && !released[id]
		if accepted[id] {
			nAccepted++
		} else {
			nRefused++
		}
		lines := map[string]int64{}
		for _, l := range req.Lines {
			lines[l.Sku] += int64(l.Quantity)
		}
		for _, sku := range skus {
			wantNet := int64(0)
			if kept {
				wantNet = -lines[sku]
				want[sku] -= lines[sku]
			}
			require.Equal(t, wantNet, nets[sku][id], "%s on %s: all its lines or none (accepted %v, released %v)",
				id, sku, accepted[id], released[id])
		}
	}
	for _, sku := range skus {
		require.Equal(t, want[sku], stock(t, inv, sku), "%s: initial − lines of accepted reservations not released", sku)
		a := audit(t, inv, sku)
		transient += a.TransientRefusals
	}
	require.Positive(t, nAccepted, "some orders got their lines")
	require.Positive(t, nRefused, "the last units were contended")
	t.Logf("%d orders on %d SKUs of %d units: %d accepted, %d refused, %d refusals caused only by another order's transient partial hold",
		orders, nSKU, initial, nAccepted, nRefused, transient)
}
