package readmodel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T) (*readmodel.Redis, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	return newRedis(t, readmodel.Config{Client: c}), c
}

// newRedis is NewRedis for a Config the test knows to be valid.
func newRedis(t *testing.T, cfg readmodel.Config) *readmodel.Redis {
	t.Helper()
	s, err := readmodel.NewRedis(cfg)
	require.NoError(t, err)
	return s
}

// The Store contract on a real redis-server, each subtest under a key
// prefix of its own.
func TestRedisContract(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	readmodeltest.RunContract(t, func(t *testing.T) readmodel.Store {
		return newRedis(t, readmodel.Config{Client: c, KeyPrefix: fmt.Sprintf("t%d:rm:", n.Add(1))})
	})
}

func state(orderID string, updated int64) *contracts.OrderState {
	return &contracts.OrderState{OrderId: orderID, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: updated}
}

// mustApply puts st at version and requires the store to take it.
func mustApply(t *testing.T, s readmodel.Store, orderID string, version int64, st *contracts.OrderState) {
	t.Helper()
	applied, err := s.Put(ctxT(t), orderID, version, st)
	require.NoError(t, err, "Put(%s, %d)", orderID, version)
	require.True(t, applied, "Put(%s, %d) must be applied", orderID, version)
}

// mustIgnore puts st at version and requires the store to keep what it
// has: the version guard refuses it.
func mustIgnore(t *testing.T, s readmodel.Store, orderID string, version int64, st *contracts.OrderState) {
	t.Helper()
	applied, err := s.Put(ctxT(t), orderID, version, st)
	require.NoError(t, err, "Put(%s, %d)", orderID, version)
	require.False(t, applied, "Put(%s, %d) must be ignored", orderID, version)
}

func mustGet(t *testing.T, s readmodel.Store, orderID string) (*contracts.OrderState, int64) {
	t.Helper()
	st, v, err := s.Get(ctxT(t), orderID)
	if err != nil {
		t.Fatalf("Get(%s): %v", orderID, err)
	}
	return st, v
}

// One hash per order at <prefix>{<orderId>}, beside the index's keys.
func TestRedisKeyLayout(t *testing.T) {
	s, c := setup(t)
	mustApply(t, s, "o-full", 7, state("o-full", 1))
	mustApply(t, s, "o-sparse", 1, state("o-sparse", 1))

	all, err := c.Keys(ctxT(t), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range all {
		// The active-order index has keys of its own.
		if !strings.HasPrefix(k, "sm:rm:active:{") {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if k != "sm:rm:{o-full}" && k != "sm:rm:{o-sparse}" {
			t.Fatalf("unexpected key %q (keys %v)", k, keys)
		}
	}
	if len(keys) != 2 {
		t.Fatalf("keys = %v, want one per order", keys)
	}
	rec, err := c.HGetAll(ctxT(t), "sm:rm:{o-full}").Result()
	require.NoError(t, err)
	require.Equal(t, "7", rec["version"])
	require.Len(t, rec, 2, "fields version and state: %v", rec)
}

func TestCorruptRecord(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	good, _ := proto.Marshal(state("o", 1))
	for name, write := range map[string]func(key string) error{
		"version not a number": func(k string) error { return c.HSet(ctx, k, "version", "seven", "state", good).Err() },
		"version missing":      func(k string) error { return c.HSet(ctx, k, "state", good).Err() },
		"state missing":        func(k string) error { return c.HSet(ctx, k, "version", "3").Err() },
		"state not protobuf":   func(k string) error { return c.HSet(ctx, k, "version", "3", "state", "\xff\xff\xff").Err() },
		"not a hash":           func(k string) error { return c.Set(ctx, k, "junk", 0).Err() },
	} {
		o := "c-" + strings.ReplaceAll(name, " ", "-")
		if err := write("sm:rm:{" + o + "}"); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.Get(ctx, o)
		if !errors.Is(err, readmodel.ErrCorrupt) {
			t.Fatalf("%s: Get err = %v, want ErrCorrupt", name, err)
		}
		t.Logf("%s: %v", name, err)
	}

	// A rebuild at the stored version repairs damaged fields.
	for _, o := range []string{"c-version-not-a-number", "c-state-not-protobuf", "c-state-missing"} {
		mustApply(t, s, o, 3, state(o, 3))
		if got, v := mustGet(t, s, o); v != 3 || got.OrderId != o {
			t.Fatalf("repaired %s = %v @%d", o, got, v)
		}
	}
}

func TestRefusesOrderIDsThatBreakTheHashTag(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	for _, o := range []string{"", "a{b", "a}b"} {
		if _, _, err := s.Get(ctx, o); !errors.Is(err, readmodel.ErrInvalidOrderID) {
			t.Fatalf("Get(%q): err = %v", o, err)
		}
		if _, err := s.Put(ctx, o, 1, state(o, 1)); !errors.Is(err, readmodel.ErrInvalidOrderID) {
			t.Fatalf("Put(%q): err = %v", o, err)
		}
		if err := s.Delete(ctx, o); !errors.Is(err, readmodel.ErrInvalidOrderID) {
			t.Fatalf("Delete(%q): err = %v", o, err)
		}
	}
	if n, _ := c.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("refused calls wrote %d keys", n)
	}
}

func TestCustomPrefix(t *testing.T) {
	_, c := setup(t)
	s := newRedis(t, readmodel.Config{Client: c, KeyPrefix: "x:rm:"})
	mustApply(t, s, "o1", 1, state("o1", 1))
	if n, err := c.Exists(ctxT(t), "x:rm:{o1}").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS x:rm:{o1} = %d, %v", n, err)
	}
}

func TestRedisConfigErrors(t *testing.T) {
	_, c := setup(t)
	for name, cfg := range map[string]readmodel.Config{
		"nil client":      {},
		"prefix with tag": {Client: c, KeyPrefix: "x{rm}:"},
	} {
		s, err := readmodel.NewRedis(cfg)
		require.ErrorIs(t, err, readmodel.ErrConfig, name)
		require.Nil(t, s, name)
		t.Logf("%s: %v", name, err)
	}
}

func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Network: srv.Network(), Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	s := newRedis(t, readmodel.Config{Client: c})
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	_, _, err := s.Get(ctx, "o1")
	if !errors.Is(err, readmodel.ErrUnavailable) {
		t.Fatalf("Get: err = %v, want ErrUnavailable", err)
	}
	_, err = s.Put(ctx, "o1", 1, state("o1", 1))
	if !errors.Is(err, readmodel.ErrUnavailable) {
		t.Fatalf("Put: err = %v, want ErrUnavailable", err)
	}
	if err := s.Delete(ctx, "o1"); !errors.Is(err, readmodel.ErrUnavailable) {
		t.Fatalf("Delete: err = %v, want ErrUnavailable", err)
	}
	t.Log(err)
}

// A record written by a newer build may carry a field this build's
// OrderState does not declare; the record is still read, the field
// ignored, so an API of the older build keeps serving GET /orders/{id}
// during a rolling upgrade. The state is protobuf's binary form, whose
// readers skip unknown fields by design: this holds the store to it.
func TestRedisRecordWithAFieldOfANewerBuildIsRead(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	st := state("o-newer", 7)
	raw, err := proto.Marshal(st)
	require.NoError(t, err)
	// Field 99, a varint: what a newer OrderState's extra field encodes to.
	raw = protowire.AppendVarint(protowire.AppendTag(raw, 99, protowire.VarintType), 1)
	require.NoError(t, c.HSet(ctx, readmodel.DefaultKeyPrefix+"{o-newer}", "version", 3, "state", raw).Err())
	got, v, err := s.Get(ctx, "o-newer")
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	require.Equal(t, st.GetStatus(), got.GetStatus())
	require.Equal(t, st.GetUpdatedAtUnixMs(), got.GetUpdatedAtUnixMs())
}
