package commerce_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// The crash points of the multi-SKU reservation protocol: a Reserve or
// Release that stops after any step (the test hook fails the call there,
// as a crashed caller would leave it) is finished by the next call with
// the same ReservationId, with the result, stock and ledger a call that
// never stopped would have left, and in between the ledger still explains
// the stock and the reservation reads as undecided.

var errCrash = errors.New("crashed here")

// crashAfter returns a hook that fails the n-th step (1-based) and
// records every step it saw.
func crashAfter(n int, seen *[]string) func(string) error {
	return func(step string) error {
		*seen = append(*seen, step)
		if len(*seen) == n {
			return errCrash
		}
		return nil
	}
}

type crashCase struct {
	name     string
	stock    map[string]int64
	lines    []*contracts.OrderLine
	accepted bool
	reason   string
	// movements each SKU has for the reservation once it is decided.
	kinds map[string][]string
	steps []string
}

var crashCases = []crashCase{
	{
		name:     "Accepted",
		stock:    map[string]int64{"a": 10, "b": 10, "c": 10},
		lines:    []*contracts.OrderLine{{Sku: "c", Quantity: 1}, {Sku: "a", Quantity: 3}, {Sku: "b", Quantity: 2}},
		accepted: true,
		kinds: map[string][]string{"a": {commerce.MovementReserve}, "b": {commerce.MovementReserve},
			"c": {commerce.MovementReserve}},
		steps: []string{"begin", "hold a", "hold b", "hold c"},
	},
	{
		name:   "RefusedOnTheMiddleSKU",
		stock:  map[string]int64{"a": 10, "b": 1, "c": 10},
		lines:  []*contracts.OrderLine{{Sku: "c", Quantity: 1}, {Sku: "a", Quantity: 3}, {Sku: "b", Quantity: 2}},
		reason: "insufficient stock for b: requested 2, available 1",
		kinds: map[string][]string{"a": {commerce.MovementReserve, commerce.MovementCompensate},
			"b": {commerce.MovementRefuse}, "c": nil},
		steps: []string{"begin", "hold a", "hold b", "compensating", "compensate a", "compensate b", "compensate c"},
	},
	{
		name:   "RefusedOnTheLastSKU",
		stock:  map[string]int64{"a": 10, "b": 10, "c": 0},
		lines:  []*contracts.OrderLine{{Sku: "c", Quantity: 1}, {Sku: "a", Quantity: 3}, {Sku: "b", Quantity: 2}},
		reason: "insufficient stock for c: requested 1, available 0",
		kinds: map[string][]string{"a": {commerce.MovementReserve, commerce.MovementCompensate},
			"b": {commerce.MovementReserve, commerce.MovementCompensate}, "c": {commerce.MovementRefuse}},
		steps: []string{"begin", "hold a", "hold b", "hold c", "compensating", "compensate a", "compensate b", "compensate c"},
	},
}

func TestReserve_EveryCrashPointIsFinishedByTheRetry(t *testing.T) {
	store := perSubtest(t)
	for _, c := range crashCases {
		// The run without a crash names the steps.
		t.Run(c.name+"/NoCrash", func(t *testing.T) {
			s := store(t)
			seedStock(t, s, c.stock)
			var seen []string
			commerce.SetStepHook(s, crashAfter(-1, &seen))
			res, err := s.Inventory().Reserve(t.Context(), crashReq(c.lines))
			require.NoError(t, err)
			require.Equal(t, c.accepted, res.GetAccepted())
			require.Equal(t, c.steps, seen, "the protocol's steps")
		})
		for k := 1; k <= len(c.steps); k++ {
			t.Run(fmt.Sprintf("%s/CrashAfter%d_%s", c.name, k, c.steps[k-1]), func(t *testing.T) {
				s := store(t)
				inv, led := s.Inventory(), s.Ledger()
				ctx := t.Context()
				seedStock(t, s, c.stock)
				var seen []string
				commerce.SetStepHook(s, crashAfter(k, &seen))
				_, err := inv.Reserve(ctx, crashReq(c.lines))
				require.ErrorIs(t, err, errCrash)
				commerce.SetStepHook(s, nil)

				// Halfway: undecided, and the ledger explains every unit.
				_, err = inv.Reservation(ctx, "res-x")
				require.ErrorIs(t, err, commerce.ErrNotFound, "an interrupted reservation has no result yet")
				requireLedgerExplainsStock(t, led, c.stock)
				rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-x", ReservationId: "res-x"})
				require.NoError(t, err)
				require.Equal(t, commerce.ReasonUnknownReservation, rel.GetReason(), "a release before the decision keeps today's contract")

				// The retry finishes it, with other lines even: the first
				// call's lines stand.
				res, err := inv.Reserve(ctx, crashReq([]*contracts.OrderLine{{Sku: "a", Quantity: 1}}))
				require.NoError(t, err)
				requireCrashResult(t, s, c, res)
				calls, err := inv.ReserveCalls(ctx, "res-x")
				require.NoError(t, err)
				require.EqualValues(t, 2, calls)
			})
		}
	}
}

func TestRelease_EveryCrashPointIsFinishedByTheRetry(t *testing.T) {
	store := perSubtest(t)
	c := crashCases[0]
	steps := []string{"begin release", "release a", "release b", "release c"}
	for k := 1; k <= len(steps); k++ {
		t.Run(fmt.Sprintf("CrashAfter%d_%s", k, steps[k-1]), func(t *testing.T) {
			s := store(t)
			inv, led := s.Inventory(), s.Ledger()
			ctx := t.Context()
			seedStock(t, s, c.stock)
			res, err := inv.Reserve(ctx, crashReq(c.lines))
			require.NoError(t, err)
			require.True(t, res.GetAccepted())

			var seen []string
			commerce.SetStepHook(s, crashAfter(k, &seen))
			_, err = inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-x", ReservationId: "res-x", Reason: "payment declined"})
			require.ErrorIs(t, err, errCrash)
			commerce.SetStepHook(s, nil)
			require.Equal(t, steps[:k], seen)
			requireLedgerExplainsStock(t, led, c.stock)
			rec, err := inv.Reservation(ctx, "res-x")
			require.NoError(t, err)
			require.Nil(t, rec.Release, "not released until every line is back")

			// A reserve in between still answers the first result.
			again, err := inv.Reserve(ctx, crashReq(c.lines))
			require.NoError(t, err)
			require.True(t, again.GetAccepted())

			rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "order-x", ReservationId: "res-x", Reason: "payment declined"})
			require.NoError(t, err)
			require.True(t, rel.GetReleased())
			for sku, n := range c.stock {
				require.Equal(t, n, stockOf(t, s, sku), "%s: all back, once", sku)
				require.Equal(t, []string{commerce.MovementReserve, commerce.MovementRelease}, kindsOf(t, led, sku, "res-x"), sku)
			}
			requireLedgerExplainsStock(t, led, c.stock)
			rec, err = inv.Reservation(ctx, "res-x")
			require.NoError(t, err)
			require.NotNil(t, rec.Release)
			require.EqualValues(t, 2, rec.ReleaseCalls)
		})
	}
}

// A second call that arrives while the first is stopped halfway (its
// caller crashed, or is just slow) finishes the reservation itself, and
// the first caller, resuming, agrees with it.
func TestReserve_ConcurrentCallFinishesAnInterruptedOne(t *testing.T) {
	store := perSubtest(t)
	for _, c := range crashCases[1:] {
		t.Run(c.name, func(t *testing.T) {
			s := store(t)
			ctx := t.Context()
			seedStock(t, s, c.stock)
			resumed := make(chan struct{})
			second := make(chan *contracts.ReserveInventoryRes, 1)
			hook := func(step string) error {
				if step == "hold a" {
					// Stop the first caller after its first hold, and let
					// a second caller run the whole protocol meanwhile.
					commerce.SetStepHook(s, nil)
					go func() {
						res, err := s.Inventory().Reserve(ctx, crashReq(c.lines))
						if err != nil {
							t.Error(err)
						}
						second <- res
						close(resumed)
					}()
					<-resumed
				}
				return nil
			}
			commerce.SetStepHook(s, hook)
			first, err := s.Inventory().Reserve(ctx, crashReq(c.lines))
			require.NoError(t, err)
			requireCrashResult(t, s, c, first)
			requireCrashResult(t, s, c, <-second)
		})
	}
}

func crashReq(lines []*contracts.OrderLine) *contracts.ReserveInventoryReq {
	return &contracts.ReserveInventoryReq{OrderId: "order-x", ReservationId: "res-x", Lines: lines}
}

func requireCrashResult(t *testing.T, s *commerce.Redis, c crashCase, res *contracts.ReserveInventoryRes) {
	t.Helper()
	require.Equal(t, c.accepted, res.GetAccepted())
	if !c.accepted {
		require.Equal(t, c.reason, res.GetReason())
	}
	led := s.Ledger()
	for sku, n := range c.stock {
		want := n
		if c.accepted {
			for _, l := range c.lines {
				if l.Sku == sku {
					want -= int64(l.Quantity)
				}
			}
		}
		require.Equal(t, want, stockOf(t, s, sku), "%s: all lines or none", sku)
		require.Equal(t, c.kinds[sku], kindsOf(t, led, sku, "res-x"), "%s: each movement once", sku)
	}
	requireLedgerExplainsStock(t, led, c.stock)
	rec, err := s.Inventory().Reservation(t.Context(), "res-x")
	require.NoError(t, err)
	require.Equal(t, c.accepted, rec.Reserve.GetAccepted())
}

func requireLedgerExplainsStock(t *testing.T, led commerce.StockLedger, skus map[string]int64) {
	t.Helper()
	for sku, initial := range skus {
		a, err := led.Audit(t.Context(), sku)
		require.NoError(t, err)
		require.True(t, a.Consistent(), "%s: %+v", sku, a)
		require.Equal(t, initial, a.Initial, sku)
	}
}

func kindsOf(t *testing.T, led commerce.StockLedger, sku, reservationID string) []string {
	t.Helper()
	ms, err := led.Movements(t.Context(), sku)
	require.NoError(t, err)
	var out []string
	for _, m := range ms {
		if m.ReservationID == reservationID {
			out = append(out, m.Kind)
			require.Equal(t, "order-x", m.OrderID)
		}
	}
	return out
}

func seedStock(t *testing.T, s *commerce.Redis, stock map[string]int64) {
	t.Helper()
	for sku, n := range stock {
		require.NoError(t, s.Inventory().SetStock(t.Context(), sku, n))
	}
}

func stockOf(t *testing.T, s *commerce.Redis, sku string) int64 {
	t.Helper()
	n, err := s.Inventory().Stock(t.Context(), sku)
	require.NoError(t, err)
	return n
}
