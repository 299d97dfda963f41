package commerce_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

func cartFor(id string) commerce.Cart {
	return commerce.Cart{CartID: id, Lines: []*contracts.OrderLine{{Sku: "s", Quantity: 1}}, Amount: 100, Currency: "EUR"}
}

// A cart read with its key reservation is one round trip with both
// contracts: no cart reserves nothing; the first reservation wins and
// every later one gets its mapping.
func TestReserveForCart(t *testing.T) {
	c, cmds := countedClient(t)
	s := newRedis(t, commerce.Config{Client: c})
	ctx := t.Context()
	cand := func(id string) commerce.Mapping {
		return commerce.Mapping{OrderID: id, Status: commerce.MappingPending, Fingerprint: "fp"}
	}

	require.NoError(t, c.Ping(ctx).Err(), "the connection's handshake is not the step's")
	before := cmds.Load()
	_, err := s.ReserveForCart(ctx, "no-cart", "k", cand("o-1"))
	require.ErrorIs(t, err, commerce.ErrNotFound)
	require.EqualValues(t, 1, cmds.Load()-before, "one round trip")
	_, err = s.Idempotency().Get(ctx, "k", "o-1")
	require.ErrorIs(t, err, commerce.ErrNotFound, "no cart, no mapping")

	require.NoError(t, s.Carts().PutCart(ctx, cartFor("c-1")))
	before = cmds.Load()
	res, err := s.ReserveForCart(ctx, "c-1", "k", cand("o-1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, cmds.Load()-before, "one round trip")
	require.True(t, res.Created)
	require.Equal(t, cand("o-1"), res.Mapping)
	require.Equal(t, cartFor("c-1").CartID, res.Cart.CartID)
	require.Equal(t, cartFor("c-1").Amount, res.Cart.Amount)

	other := cand("o-1")
	other.Fingerprint = "another request"
	again, err := s.ReserveForCart(ctx, "c-1", "k", other)
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Equal(t, cand("o-1"), again.Mapping, "the first reservation wins")

	for _, bad := range []struct{ cart, key, order string }{{"", "k", "o"}, {"c-1", "", "o"}, {"c-1", "k", ""}} {
		_, err := s.ReserveForCart(ctx, bad.cart, bad.key, cand(bad.order))
		require.ErrorIs(t, err, commerce.ErrInvalidArgument, "%+v", bad)
	}
}

// A reservation that creates its mapping takes the creation lock it is
// given in the same round trip: the lock key set to the token with its
// TTL, the record marked. One that finds the mapping, or finds the
// lock's record already there, takes nothing.
func TestReserveForCartLockingTakesTheLockOnlyWithAMintedMapping(t *testing.T) {
	c, cmds := countedClient(t)
	s := newRedis(t, commerce.Config{Client: c})
	ctx := t.Context()
	require.NoError(t, s.Carts().PutCart(ctx, cartFor("c-1")))
	cand := func(id string) commerce.Mapping {
		return commerce.Mapping{OrderID: id, Status: commerce.MappingPending, Fingerprint: "fp"}
	}
	lock := func(id string) commerce.CreationLock {
		return commerce.CreationLock{Lock: "loc:" + id + ":lock", Record: "loc:" + id, Field: "status", Value: "Creating",
			Token: "tok-" + id, TTL: 5 * time.Second}
	}
	require.NoError(t, c.Ping(ctx).Err())

	before := cmds.Load()
	res, err := s.ReserveForCartLocking(ctx, "c-1", "k", cand("o-1"), lock("o-1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, cmds.Load()-before, "one round trip")
	require.True(t, res.Created)
	require.Equal(t, "tok-o-1", res.LockToken)
	require.Equal(t, "tok-o-1", c.Get(ctx, "loc:o-1:lock").Val())
	ttl := c.PTTL(ctx, "loc:o-1:lock").Val()
	require.True(t, ttl > 0 && ttl <= 5*time.Second, "the lock expires with its TTL: %v", ttl)
	require.Equal(t, "Creating", c.HGet(ctx, "loc:o-1", "status").Val())

	require.NoError(t, c.Del(ctx, "loc:o-1:lock", "loc:o-1").Err())
	retry := lock("o-1")
	retry.Token = "tok-retry"
	again, err := s.ReserveForCartLocking(ctx, "c-1", "k", cand("o-1"), retry)
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Empty(t, again.LockToken, "a found mapping takes no lock")
	require.Zero(t, c.Exists(ctx, "loc:o-1:lock", "loc:o-1").Val())

	require.NoError(t, c.HSet(ctx, "loc:o-3", "status", "Ready").Err())
	known, err := s.ReserveForCartLocking(ctx, "c-1", "k3", cand("o-3"), lock("o-3"))
	require.NoError(t, err)
	require.True(t, known.Created)
	require.Empty(t, known.LockToken, "a record that exists is not locked")
	require.Zero(t, c.Exists(ctx, "loc:o-3:lock").Val())
	require.Equal(t, "Ready", c.HGet(ctx, "loc:o-3", "status").Val())

	_, err = s.ReserveForCartLocking(ctx, "no-cart", "k4", cand("o-4"), lock("o-4"))
	require.ErrorIs(t, err, commerce.ErrNotFound)
	require.Zero(t, c.Exists(ctx, "loc:o-4:lock", "loc:o-4").Val(), "no cart, no lock")

	for _, bad := range []commerce.CreationLock{{}, {Lock: "l", Record: "r", Field: "f", Token: "t"}, {Lock: "l", Record: "r", Field: "f", TTL: time.Second}} {
		_, err := s.ReserveForCartLocking(ctx, "c-1", "k5", cand("o-5"), bad)
		require.ErrorIs(t, err, commerce.ErrInvalidArgument, "%+v", bad)
	}
}

// Of many concurrent reservations of one key exactly one creates the
// mapping, and all get the same one.
func TestReserveForCartRaceHasOneWinner(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	require.NoError(t, s.Carts().PutCart(ctx, cartFor("c-1")))
	results := race(t, func(i int) (commerce.CartReservation, error) {
		return s.ReserveForCart(ctx, "c-1", "race", commerce.Mapping{OrderID: "o-race", Fingerprint: fmt.Sprintf("fp-%d", i)})
	})
	winners := 0
	for i := range results {
		if results[i].Created {
			winners++
		}
		require.Equal(t, results[0].Mapping, results[i].Mapping)
	}
	require.Equal(t, 1, winners)
}

// Unreserve gives back only what its reservation created, while it is
// pending and the cart unchanged; otherwise the mapping stays.
func TestUnreserve(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	require.NoError(t, s.Carts().PutCart(ctx, cartFor("c-1")))
	reserve := func(key string) commerce.CartReservation {
		res, err := s.ReserveForCart(ctx, "c-1", key, commerce.Mapping{OrderID: "o-" + key, Fingerprint: "fp"})
		require.NoError(t, err)
		return res
	}
	mapped := func(key string) bool {
		_, err := s.Idempotency().Get(ctx, key, "o-"+key)
		return err == nil
	}

	res := reserve("a")
	kept, err := s.Unreserve(ctx, "c-1", "a", res)
	require.NoError(t, err)
	require.False(t, kept)
	require.False(t, mapped("a"), "given back")

	first := reserve("b")
	second := reserve("b")
	_, err = s.Unreserve(ctx, "c-1", "b", second)
	require.Error(t, err, "a reservation that found the mapping gives nothing back")
	require.True(t, mapped("b"))

	require.NoError(t, s.Idempotency().MarkStarted(ctx, "b", first.Mapping.OrderID))
	kept, err = s.Unreserve(ctx, "c-1", "b", first)
	require.NoError(t, err)
	require.True(t, kept, "a started mapping stays")

	res = reserve("c")
	changed := cartFor("c-1")
	changed.Amount = 200
	require.NoError(t, s.Carts().PutCart(ctx, changed))
	kept, err = s.Unreserve(ctx, "c-1", "c", res)
	require.NoError(t, err)
	require.True(t, kept, "the cart changed: a duplicate may have been accepted with it")
	require.True(t, mapped("c"))
}

// A Redis Cluster keeps the two round trips: the keys are in different
// slots.
func TestReserveForCartNeedsASingleServer(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = c.Close() })
	s := newRedis(t, commerce.Config{Client: c})
	require.False(t, s.SingleServer())
	_, err := s.ReserveForCart(t.Context(), "c", "k", commerce.Mapping{OrderID: "o"})
	require.ErrorIs(t, err, commerce.ErrConfig)
}

// Of many concurrent locking reservations of one key, each with its own
// token for the key's order, only the winner takes the creation lock.
func TestReserveForCartLockingRaceTakesOneLock(t *testing.T) {
	s, c := newStore(t)
	ctx := t.Context()
	require.NoError(t, s.Carts().PutCart(ctx, cartFor("c-1")))
	results := race(t, func(i int) (commerce.CartReservation, error) {
		const id = "o-race"
		return s.ReserveForCartLocking(ctx, "c-1", "race", commerce.Mapping{OrderID: id, Fingerprint: fmt.Sprintf("fp-%d", i)},
			commerce.CreationLock{Lock: "loc:" + id + ":lock", Record: "loc:" + id, Field: "status", Value: "Creating", Token: fmt.Sprintf("t-%d", i), TTL: 5 * time.Second})
	})
	locks := 0
	for i := range results {
		require.Equal(t, results[i].Created, results[i].LockToken != "", "a lock only with the mapping")
		if results[i].LockToken != "" {
			locks++
			require.Equal(t, results[i].LockToken, c.Get(ctx, "loc:"+results[i].Mapping.OrderID+":lock").Val())
		}
	}
	require.Equal(t, 1, locks)
	keys, err := c.Keys(ctx, "loc:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 2, "one lock and its record: %v", keys)
}

// race runs reserve(i) for 48 goroutines at once, requires every call to
// succeed and returns their results by i.
func race(t *testing.T, reserve func(i int) (commerce.CartReservation, error)) []commerce.CartReservation {
	t.Helper()
	const n = 48
	var wg sync.WaitGroup
	results := make([]commerce.CartReservation, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = reserve(i)
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "reservation %d", i)
	}
	return results
}
