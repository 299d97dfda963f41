package readmodel_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T) (*readmodel.Redis, *redis.Client) {
	t.Helper()
	srv := redisserver.ForTest(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	return readmodel.NewRedis(readmodel.RedisConfig{Client: c}), c
}

func state(orderID string, updated int64) *contracts.OrderState {
	return &contracts.OrderState{OrderId: orderID, Status: contracts.OrderStatus_Created, UpdatedAtUnixMs: updated}
}

func mustPut(t *testing.T, s readmodel.Store, orderID string, version int64, st *contracts.OrderState, wantApplied bool) {
	t.Helper()
	applied, err := s.Put(ctxT(t), orderID, version, st)
	if err != nil {
		t.Fatalf("Put(%s, %d): %v", orderID, version, err)
	}
	if applied != wantApplied {
		t.Fatalf("Put(%s, %d) applied = %v, want %v", orderID, version, applied, wantApplied)
	}
}

func mustGet(t *testing.T, s readmodel.Store, orderID string) (*contracts.OrderState, int64) {
	t.Helper()
	st, v, err := s.Get(ctxT(t), orderID)
	if err != nil {
		t.Fatalf("Get(%s): %v", orderID, err)
	}
	return st, v
}

func TestGetUnknownIsNotFound(t *testing.T) {
	s, _ := setup(t)
	_, _, err := s.Get(ctxT(t), "nobody")
	if !errors.Is(err, readmodel.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestPutGetRoundTripsEveryField(t *testing.T) {
	s, c := setup(t)
	full := &contracts.OrderState{
		OrderId:           "o-full",
		Status:            contracts.OrderStatus_Failed,
		ShippingAddressId: proto.String("addr-1"),
		ReservationId:     proto.String("res-1"),
		PaymentId:         proto.String("pay-1"),
		Amount:            proto.Int64(1<<62 + 7), // beyond float64 precision
		Currency:          proto.String("EUR"),
		Reason:            proto.String("PAYMENT_DECLINED"),
		UpdatedAtUnixMs:   1_700_000_000_123,
	}
	mustPut(t, s, "o-full", 7, full, true)
	got, v := mustGet(t, s, "o-full")
	if v != 7 || !proto.Equal(got, full) {
		t.Fatalf("Get = %v @%d, want %v @7", got, v, full)
	}

	// Unset optional fields stay unset, and zero-valued ones stay set.
	sparse := &contracts.OrderState{OrderId: "o-sparse", Status: contracts.OrderStatus_Created, Amount: proto.Int64(0)}
	mustPut(t, s, "o-sparse", 1, sparse, true)
	got, _ = mustGet(t, s, "o-sparse")
	if got.ShippingAddressId != nil || got.Reason != nil || got.Amount == nil || *got.Amount != 0 {
		t.Fatalf("sparse state came back as %v", got)
	}

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
}

func TestOlderVersionNeverOverwritesNewer(t *testing.T) {
	s, _ := setup(t)
	mustPut(t, s, "o1", 5, state("o1", 5), true)
	mustPut(t, s, "o1", 4, state("o1", 4), false)
	mustPut(t, s, "o1", 0, state("o1", 0), false)
	got, v := mustGet(t, s, "o1")
	if v != 5 || got.UpdatedAtUnixMs != 5 {
		t.Fatalf("after older puts Get = %v @%d, want the version 5 state", got, v)
	}
	mustPut(t, s, "o1", 6, state("o1", 6), true)
	if got, v := mustGet(t, s, "o1"); v != 6 || got.UpdatedAtUnixMs != 6 {
		t.Fatalf("Get = %v @%d, want the version 6 state", got, v)
	}
}

func TestEqualVersionOverwrites(t *testing.T) {
	s, _ := setup(t)
	mustPut(t, s, "o1", 3, state("o1", 100), true)
	repaired := state("o1", 200)
	repaired.Reason = proto.String("rebuilt")
	mustPut(t, s, "o1", 3, repaired, true)
	got, v := mustGet(t, s, "o1")
	if v != 3 || !proto.Equal(got, repaired) {
		t.Fatalf("Get = %v @%d, want the rebuilt state @3", got, v)
	}
}

func TestConcurrentWritersKeepTheMaxVersion(t *testing.T) {
	const (
		writers = 50
		puts    = 20
	)
	s, _ := setup(t)
	ctx := ctxT(t)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		maxV  int64
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			<-start
			for range puts {
				v := rng.Int64N(10_000)
				// The state carries its version so a torn write would show.
				if _, err := s.Put(ctx, "race", v, state("race", v)); err != nil {
					t.Errorf("writer %d: Put(%d): %v", w, v, err)
					return
				}
				mu.Lock()
				if v > maxV {
					maxV = v
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	got, v := mustGet(t, s, "race")
	if v != maxV || got.UpdatedAtUnixMs != maxV {
		t.Fatalf("after %d concurrent puts Get = state of %d @%d, want %d", writers*puts, got.UpdatedAtUnixMs, v, maxV)
	}
	// The record stays at the maxV: every lower version is refused now.
	mustPut(t, s, "race", maxV-1, state("race", maxV-1), false)
	t.Logf("final version %d", v)
}

func TestDelete(t *testing.T) {
	s, _ := setup(t)
	mustPut(t, s, "o1", 9, state("o1", 9), true)
	if err := s.Delete(ctxT(t), "o1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctxT(t), "o1"); !errors.Is(err, readmodel.ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctxT(t), "o1"); err != nil {
		t.Fatalf("Delete of an absent record: %v", err)
	}
	// With the record gone, a lower version is accepted again.
	mustPut(t, s, "o1", 1, state("o1", 1), true)
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
		mustPut(t, s, o, 3, state(o, 3), true)
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
	s := readmodel.NewRedis(readmodel.RedisConfig{Client: c, KeyPrefix: "x:rm:"})
	mustPut(t, s, "o1", 1, state("o1", 1), true)
	if n, err := c.Exists(ctxT(t), "x:rm:{o1}").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS x:rm:{o1} = %d, %v", n, err)
	}
	bad := readmodel.NewRedis(readmodel.RedisConfig{Client: c, KeyPrefix: "x{rm}:"})
	if _, _, err := bad.Get(ctxT(t), "o1"); err == nil {
		t.Fatal("a prefix with a hash tag was accepted")
	}
}

func TestUnavailable(t *testing.T) {
	srv := redisserver.ForTest(t)
	c := redis.NewClient(&redis.Options{Network: srv.Network(), Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	s := readmodel.NewRedis(readmodel.RedisConfig{Client: c})
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
