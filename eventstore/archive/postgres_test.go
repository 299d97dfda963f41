package archive_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/eventstore/eventstoretest"
	"github.com/shoppingmall-go/shoppingmall/runner/pgserver"
	"github.com/shoppingmall-go/shoppingmall/runner/pgserver/pgtest"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, s *pgserver.Server, cfg archive.Config) *archive.Postgres {
	t.Helper()
	cfg.URL = s.URL()
	a, err := archive.Open(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

// record is a finished order of three events whose bodies keep their
// spacing, key order and non-ASCII text: the archive must give them back
// byte for byte.
func record(id, final string) archive.Record {
	evs := []eventstore.Envelope{
		{EventID: id + "-e1", EventType: "OrderStartedEvent", Version: 1, SourceCommandID: "start-" + id, CreatedAtUnixMs: 1_700_000_000_001,
			Data: []byte(`{"orderId":"` + id + `",  "lines":[{"sku":"SKU-1","quantity":2}], "note":"Grüße"}`), Schema: 1, FenceGeneration: 1, FenceEpoch: 1},
		{EventID: id + "-e2", EventType: "InventoryReservedEvent", Version: 2, SourceCommandID: "rsv-" + id, CreatedAtUnixMs: 1_700_000_000_002,
			Data: []byte(`{"z":1,"a":2}`), Schema: 1, FenceGeneration: 1, FenceEpoch: 1},
		{EventID: id + "-e3", EventType: "OrderConfirmedEvent", Version: 3, SourceCommandID: "pay-" + id, CreatedAtUnixMs: 1_700_000_000_003,
			Data: []byte(`{}`), Schema: 2, FenceGeneration: 2, FenceEpoch: 1},
	}
	return archive.Record{OrderID: id, Status: "Confirmed", Generation: 2, TerminalAtUnixMs: 1_700_000_000_003,
		FinalState: []byte(final), Events: evs}
}

func rows(t *testing.T, s *pgserver.Server, id string) int {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), s.URL())
	require.NoError(t, err)
	defer c.Close(context.Background())
	var n int
	require.NoError(t, c.QueryRow(ctxT(t), "SELECT count(*) FROM archived_orders WHERE order_id = $1", id).Scan(&n))
	return n
}

// One server for the suite's plain cases, each on orders of its own.
func TestArchive(t *testing.T) {
	s := pgtest.Start(t)
	a := open(t, s, archive.Config{})

	t.Run("GetReturnsExactlyWhatPutWrote", func(t *testing.T) {
		want := record("o-exact", "final-state-bytes\x00\xff")
		require.NoError(t, a.Put(ctxT(t), want))
		got, err := a.Get(ctxT(t), "o-exact")
		require.NoError(t, err)
		for i := range want.Events {
			want.Events[i].OrderID = "o-exact"
		}
		require.Equal(t, want, got)
		require.EqualValues(t, 3, got.Version())
	})

	t.Run("APutIsIdempotentAndAnotherHistoryIsRefused", func(t *testing.T) {
		r := record("o-idem", "final")
		require.NoError(t, a.Put(ctxT(t), r))
		require.NoError(t, a.Put(ctxT(t), record("o-idem", "final")), "the same record again")
		other := record("o-idem", "another final state")
		require.ErrorIs(t, a.Put(ctxT(t), other), archive.ErrConflict)
		shorter := record("o-idem", "final")
		shorter.Events = shorter.Events[:2]
		require.ErrorIs(t, a.Put(ctxT(t), shorter), archive.ErrConflict)
		require.Equal(t, 1, rows(t, s, "o-idem"))
		got, err := a.Get(ctxT(t), "o-idem")
		require.NoError(t, err)
		require.Equal(t, "final", string(got.FinalState), "the first record stands")
	})

	t.Run("AMissingOrderIsNotFound", func(t *testing.T) {
		_, err := a.Get(ctxT(t), "o-never")
		require.ErrorIs(t, err, archive.ErrNotFound)
	})

	t.Run("AMalformedRecordIsRefusedBeforeAnythingIsSent", func(t *testing.T) {
		for name, mutate := range map[string]func(*archive.Record){
			"no id":           func(r *archive.Record) { r.OrderID = "" },
			"no status":       func(r *archive.Record) { r.Status = "" },
			"no time":         func(r *archive.Record) { r.TerminalAtUnixMs = 0 },
			"no final state":  func(r *archive.Record) { r.FinalState = nil },
			"no events":       func(r *archive.Record) { r.Events = nil },
			"a version gap":   func(r *archive.Record) { r.Events[1].Version = 3 },
			"another order's": func(r *archive.Record) { r.Events[0].OrderID = "o-other" },
			"a body not text": func(r *archive.Record) { r.Events[2].Data = []byte{0xff, 0xfe} },
		} {
			r := record("o-bad", "final")
			mutate(&r)
			require.ErrorIs(t, a.Put(ctxT(t), r), archive.ErrInvalidArgument, name)
		}
		require.Zero(t, rows(t, s, "o-bad"))
		_, err := a.Get(ctxT(t), "")
		require.ErrorIs(t, err, archive.ErrInvalidArgument)
	})

	// Many writers of one order at once, half with one history and half
	// with another: one row, and exactly the writers of its history are
	// told nil.
	t.Run("ConcurrentPutsOfOneOrderLeaveOneRow", func(t *testing.T) {
		const writers = 32
		errs := make([]error, writers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = a.Put(ctxT(t), record("o-race", fmt.Sprintf("final-%d", i%2)))
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, 1, rows(t, s, "o-race"))
		got, err := a.Get(ctxT(t), "o-race")
		require.NoError(t, err)
		for i, err := range errs {
			if fmt.Sprintf("final-%d", i%2) == string(got.FinalState) {
				require.NoError(t, err, "writer %d wrote the stored history", i)
			} else {
				require.ErrorIs(t, err, archive.ErrConflict, "writer %d wrote another history", i)
			}
		}
	})

	t.Run("ProcessesOpeningAtOnceApplyTheMigrationsOnce", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := archive.Open(ctxT(t), archive.Config{URL: s.URL(), MaxConns: 2})
				if err == nil {
					p.Close()
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, archive.SchemaVersion())
	})
}

// The read contract every tier of the event store holds to, on the
// archive: a stream written as a finished order's record.
func TestArchiveReadContract(t *testing.T) {
	a := open(t, pgtest.Start(t), archive.Config{})
	eventstoretest.RunReadContract(t, func(*testing.T) eventstoretest.Tier {
		return eventstoretest.Tier{
			Write: func(t *testing.T, orderID string, evs []eventstore.Envelope) {
				require.NoError(t, a.Put(ctxT(t), archive.Record{OrderID: orderID, Status: "Confirmed", Generation: 1,
					TerminalAtUnixMs: 1_700_000_000_003, FinalState: []byte("final"), Events: evs}))
			},
			Load: a.Load,
		}
	})
}

func TestOpenRefusesWhatItCannotUse(t *testing.T) {
	_, err := archive.Open(ctxT(t), archive.Config{})
	require.ErrorIs(t, err, archive.ErrConfig)
	_, err = archive.Open(ctxT(t), archive.Config{URL: "postgres://a b"})
	require.ErrorIs(t, err, archive.ErrConfig)
	// Nothing listens on port 1.
	_, err = archive.Open(ctxT(t), archive.Config{URL: "postgres://x@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"})
	require.ErrorIs(t, err, archive.ErrUnavailable)
}

// A server stalled mid-write (SIGSTOP to it and every backend) answers
// ErrUnavailable within the call's timeout, not never; SIGKILLed and
// restarted, a retried write of the same record completes, with one row.
func TestAStalledThenKilledArchiveIsRiddenOutByARetry(t *testing.T) {
	s := pgtest.Start(t)
	a := open(t, s, archive.Config{CallTimeout: time.Second, MaxConns: 2})
	require.NoError(t, a.Put(ctxT(t), record("o-before", "final")), "the pool holds an open connection")

	require.NoError(t, s.Pause())
	began := time.Now()
	err := a.Put(ctxT(t), record("o-stall", "final"))
	require.ErrorIs(t, err, archive.ErrUnavailable)
	require.Less(t, time.Since(began), 10*time.Second, "bounded by the call's timeout")

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(ctxT(t)))
	require.Eventually(t, func() bool { return a.Put(ctxT(t), record("o-stall", "final")) == nil },
		30*time.Second, 50*time.Millisecond, "the retried write completes once the archive is back")
	require.Equal(t, 1, rows(t, s, "o-stall"))
	got, err := a.Get(ctxT(t), "o-before")
	require.NoError(t, err, "what was archived before the stall is there")
	require.Equal(t, "final", string(got.FinalState))
}
