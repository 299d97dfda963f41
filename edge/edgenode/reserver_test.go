package edgenode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// Where commerce and the Location Store share one server, the edge's
// reservation takes the minted order's creation lock in the same step,
// and giving back a refused start's mapping gives back its lock too, with
// no key left. Where they do not share it, the reservation is commerce's
// alone.
func TestLockingReserverTakesAndGivesBackTheCreationLock(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := node.OpenStores(ctx, node.RedisURLs{Default: srv.URL()}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	cart := commerce.Cart{CartID: "c-1", Lines: []*contracts.OrderLine{{Sku: "s", Quantity: 1}}, Amount: 100, Currency: "EUR"}
	require.NoError(t, st.Commerce.Carts().PutCart(ctx, cart))

	r := cartReserver(st, 30*time.Second)
	_, ok := r.(lockingReserver)
	require.True(t, ok, "one server: the locking reservation")
	res, err := r.ReserveForCart(ctx, "c-1", "k-1", commerce.Mapping{OrderID: "ord-1", Status: commerce.MappingPending, Fingerprint: "fp"})
	require.NoError(t, err)
	require.True(t, res.Created)
	require.NotEmpty(t, res.LockToken)
	rec, err := st.Location.Get(ctx, grain.KindName, "ord-1")
	require.NoError(t, err)
	require.Equal(t, location.Creating, rec.Status, "the minted order is locked for creation")
	acquired, _, _, err := st.Location.BeginCreate(ctx, grain.KindName, "ord-1", "another", time.Second)
	require.NoError(t, err)
	require.False(t, acquired, "nobody else may create it meanwhile")

	kept, err := r.Unreserve(ctx, "c-1", "k-1", res)
	require.NoError(t, err)
	require.False(t, kept)
	_, err = st.Commerce.Idempotency().Get(ctx, "k-1", "ord-1")
	require.ErrorIs(t, err, commerce.ErrNotFound, "the mapping is given back")
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	lock, _ := st.Locations.CreationFor(grain.KindName, "ord-1")
	require.Zero(t, c.Exists(ctx, lock.Record, lock.Lock).Val(), "and the lock, leaving no key")

	spelled, err := node.OpenStores(ctx, node.RedisURLs{Default: srv.URL(), Location: srv.URL() + "&client_name=loc"}, node.StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(spelled.Close)
	_, ok = cartReserver(spelled, 30*time.Second).(lockingReserver)
	require.True(t, ok, "the Location Store's URL spelled otherwise is the same server: the lock still rides along")
}
