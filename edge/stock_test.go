package edge

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// newStockEnv is an admin server with the stock report mounted over a
// real commerce store holding the demo seed, at a fixed ledger clock.
func newStockEnv(t *testing.T, clock time.Time) (*env, *commerce.Redis) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	cs, err := commerce.NewRedis(commerce.Config{Client: c, Now: func() time.Time { return clock }})
	require.NoError(t, err)
	require.NoError(t, cs.ApplySeed(t.Context(), commerce.DemoSeed()))
	e := newEnv(t, withAdmin(), func(cfg *Config) { cfg.Mounts = append(cfg.Mounts, StockAdmin{Ledger: cs.Ledger()}) })
	return e, cs
}

func decodeStock(t *testing.T, w *http.Response, body []byte) StockReply {
	t.Helper()
	require.Equal(t, http.StatusOK, w.StatusCode, string(body))
	var rep StockReply
	require.NoError(t, json.Unmarshal(body, &rep))
	return rep
}

func TestAdminStock_AvailableAndLatestMovements(t *testing.T) {
	clock := time.UnixMilli(1_790_000_000_123)
	e, cs := newStockEnv(t, clock)
	ctx := t.Context()
	inv := cs.Inventory()
	res, err := inv.Reserve(ctx, &contracts.ReserveInventoryReq{OrderId: "ord-1", ReservationId: "rsv-ord-1",
		Lines: []*contracts.OrderLine{{Sku: commerce.DemoSKUShirt, Quantity: 2}, {Sku: commerce.DemoSKUMug, Quantity: 1}}})
	require.NoError(t, err)
	require.True(t, res.GetAccepted())
	rel, err := inv.Release(ctx, &contracts.ReleaseInventoryReq{OrderId: "ord-1", ReservationId: "rsv-ord-1"})
	require.NoError(t, err)
	require.True(t, rel.GetReleased())
	_, err = inv.Reserve(ctx, &contracts.ReserveInventoryReq{OrderId: "ord-2", ReservationId: "rsv-ord-2",
		Lines: []*contracts.OrderLine{{Sku: commerce.DemoSKUShirt, Quantity: 5}}})
	require.NoError(t, err)

	w := e.admin(http.MethodGet, "/admin/stock/"+commerce.DemoSKUShirt+"?limit=2", "")
	rep := decodeStock(t, w.Result(), w.Body.Bytes())
	require.Equal(t, commerce.DemoSKUShirt, rep.SKU)
	require.EqualValues(t, 1_000_000-5, rep.Available)
	require.Len(t, rep.Movements, 2, "the limit")
	require.Equal(t, StockMovement{ID: rep.Movements[0].ID, Kind: commerce.MovementReserve, Delta: -5, Available: 1_000_000 - 5,
		ReservationID: "rsv-ord-2", OrderID: "ord-2", AtUnixMs: clock.UnixMilli()}, rep.Movements[0], "newest first")
	require.Equal(t, commerce.MovementRelease, rep.Movements[1].Kind)
	require.EqualValues(t, 2, rep.Movements[1].Delta)

	// The default limit shows the whole short ledger: initial stock plus
	// the movements is the available stock.
	w = e.admin(http.MethodGet, "/admin/stock/"+commerce.DemoSKUShirt, "")
	rep = decodeStock(t, w.Result(), w.Body.Bytes())
	require.Len(t, rep.Movements, 4, "seed, reserve, release, reserve")
	seed := rep.Movements[len(rep.Movements)-1]
	require.Equal(t, commerce.MovementSeed, seed.Kind)
	sum := int64(0)
	for _, m := range rep.Movements[:len(rep.Movements)-1] {
		sum += m.Delta
	}
	require.Equal(t, rep.Available, seed.Delta+sum, "initial stock + movements = available stock")

	// A refusal shows on the short SKU, moving nothing.
	_, err = inv.Reserve(ctx, &contracts.ReserveInventoryReq{OrderId: "ord-3", ReservationId: "rsv-ord-3",
		Lines: []*contracts.OrderLine{{Sku: commerce.DemoSKUSoldOut, Quantity: 1}}})
	require.NoError(t, err)
	w = e.admin(http.MethodGet, "/admin/stock/"+commerce.DemoSKUSoldOut+"?limit=1", "")
	rep = decodeStock(t, w.Result(), w.Body.Bytes())
	require.Zero(t, rep.Available)
	require.Equal(t, StockMovement{ID: rep.Movements[0].ID, Kind: commerce.MovementRefuse, Requested: 1,
		ReservationID: "rsv-ord-3", OrderID: "ord-3", AtUnixMs: clock.UnixMilli()}, rep.Movements[0])
}

func TestAdminStock_Refusals(t *testing.T) {
	e, _ := newStockEnv(t, time.UnixMilli(1))
	w := e.admin(http.MethodGet, "/admin/stock/sku-never-stocked", "")
	require.Equal(t, http.StatusNotFound, w.Code, w.Body.String())
	ae := decodeError(t, w)
	require.Equal(t, CodeNotFound, ae.Code)
	require.Equal(t, "sku not found: it was never stocked", ae.Message, "a SKU, not an order")

	for _, q := range []string{"0", "-1", "x", "201"} {
		w = e.admin(http.MethodGet, "/admin/stock/"+commerce.DemoSKUMug+"?limit="+q, "")
		require.Equal(t, http.StatusBadRequest, w.Code, q)
		got := decodeError(t, w)
		require.Equal(t, CodeInvalidArgument, got.Code, q)
		require.Equal(t, "limit", got.Field, q)
	}
	w = e.admin(http.MethodGet, "/admin/stock/"+commerce.DemoSKUMug+"?limit=200", "")
	require.Equal(t, http.StatusOK, w.Code, "the maximum is allowed")

	w = serve(e.srv.AdminHandler(), http.MethodGet, "/admin/stock/"+commerce.DemoSKUMug, "")
	require.Equal(t, http.StatusUnauthorized, w.Code, "behind the admin token")
	w = e.do(http.MethodGet, "/admin/stock/"+commerce.DemoSKUMug, "")
	require.Equal(t, http.StatusNotFound, w.Code, "never on the public handler")

	plain := newEnv(t, withAdmin())
	w = plain.admin(http.MethodGet, "/admin/stock/"+commerce.DemoSKUMug, "")
	require.Equal(t, http.StatusNotFound, w.Code, "not mounted, no route")
}
