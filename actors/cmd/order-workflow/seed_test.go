package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// `order-workflow seed -demo` writes the demo catalogue into the Redis
// -redis names, so that an order on cart-demo-ok can start.
func TestSeedDemoWritesTheCatalogue(t *testing.T) {
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	require.NoError(t, runSeed([]string{"-redis", srv.URL(), "-demo", "-timeout", "10s"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "seeded 2 carts, 3 SKUs, 2 payment methods from the demo catalogue")

	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	store, err := commerce.NewRedis(commerce.Config{Client: c})
	require.NoError(t, err)
	cart, err := store.Carts().GetCart(context.Background(), commerce.DemoCartOK)
	require.NoError(t, err)
	require.Equal(t, commerce.DemoSeed().Carts[0].Amount, cart.Amount)
}

// -file applies a commerce.LoadSeed file; the URL may come from
// SHOPPINGMALL_REDIS, as the process's own flags do.
func TestSeedFileFromTheEnvironment(t *testing.T) {
	srv := redistest.Start(t)
	f := filepath.Join(t.TempDir(), "seed.json")
	require.NoError(t, os.WriteFile(f, []byte(`{"carts":[{"cartId":"cart-1","lines":[{"sku":"sku-1","quantity":1}],"amount":100,"currency":"EUR"}],"stock":{"sku-1":5},"paymentMethods":[{"methodId":"pm-1","approve":true}]}`), 0o600))
	t.Setenv("SHOPPINGMALL_REDIS", srv.URL())
	var out, errOut bytes.Buffer
	require.NoError(t, runSeed([]string{"-file", f}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "seeded 1 carts, 1 SKUs, 1 payment methods from "+f)

	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	store, err := commerce.NewRedis(commerce.Config{Client: c})
	require.NoError(t, err)
	_, err = store.Carts().GetCart(context.Background(), "cart-1")
	require.NoError(t, err)
}

// Exactly one of -demo and -file; an invalid seed fails at once rather
// than after the retry deadline.
func TestSeedRejectsBadInvocations(t *testing.T) {
	var out, errOut bytes.Buffer
	require.ErrorContains(t, runSeed(nil, &out, &errOut), "one of -demo and -file")
	require.ErrorContains(t, runSeed([]string{"-demo", "-file", "x.json"}, &out, &errOut), "one of -demo and -file")
	require.ErrorContains(t, runSeed([]string{"-demo", "extra"}, &out, &errOut), "unexpected arguments")

	f := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(f, []byte(`{"stock":{"sku-1":-1}}`), 0o600))
	err := runSeed([]string{"-file", f, "-redis", "redis://127.0.0.1:1/0"}, &out, &errOut)
	require.ErrorIs(t, err, commerce.ErrInvalidArgument)
}
