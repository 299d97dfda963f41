package placement

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// A held creation names one identity and is claimed once: a resend after
// the first resolution (a dead letter, a Retry) must find the record as
// that resolution left it, not claim a lock its commit already ended.
func TestHeldCreationIsClaimedOnceForItsIdentity(t *testing.T) {
	ctx := WithHeldCreation(context.Background(), "order", "o-1", "tok")
	_, ok := heldToken(ctx, "order", "o-2")
	require.False(t, ok, "another identity")
	_, ok = heldToken(ctx, "other", "o-1")
	require.False(t, ok, "another kind")
	token, ok := heldToken(ctx, "order", "o-1")
	require.True(t, ok)
	require.Equal(t, "tok", token)
	_, ok = heldToken(ctx, "order", "o-1")
	require.False(t, ok, "claimed once")
	_, ok = heldToken(context.Background(), "order", "o-1")
	require.False(t, ok)
	_, ok = heldToken(WithHeldCreation(context.Background(), "order", "o-1", ""), "order", "o-1")
	require.False(t, ok, "no token, no claim")
}

// A resolution that claimed a held lock gives it back when it cannot go
// on: here the lookup never saw its first topology before the caller's
// deadline. The next creator acquires at once, at generation 1, instead
// of waiting for the lock to expire.
func TestHeldCreationIsGivenBackWhenTheLookupIsNotReady(t *testing.T) {
	s := newStore(t)
	l := New(Config{Store: s, Logger: quietLog()})
	const kind = "order"
	// The lock as the edge's script leaves it (location.Creation is
	// BeginCreate's acquisition of a Missing identity).
	took, _, _, err := s.BeginCreate(ctx(t), kind, "o-1", "held", time.Minute)
	require.NoError(t, err)
	require.True(t, took)

	short, cancel := context.WithTimeout(WithHeldCreation(ctx(t), kind, "o-1", "held"), 20*time.Millisecond)
	defer cancel()
	_, err = l.Resolve(short, kind, "o-1")
	require.True(t, errors.Is(err, location.ErrTimeout), "%v", err)

	acquired, next, _, err := s.BeginCreate(ctx(t), kind, "o-1", "next", time.Minute)
	require.NoError(t, err)
	require.True(t, acquired, "the held lock was given back")
	require.EqualValues(t, 1, next, "no generation used up")
}
