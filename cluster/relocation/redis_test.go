package relocation_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

func newStore(t *testing.T) (*relocation.Redis, *redis.Client, *redisserver.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := relocation.NewRedis(relocation.Config{Client: rdb})
	require.NoError(t, err)
	return s, rdb, srv
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// monitor streams the server's MONITOR feed, which lists commands in the
// order the server executed them; it is the only outside witness of which
// of several concurrent writes came first.
type monitor struct {
	conn  net.Conn
	lines *bufio.Reader
}

func startMonitor(t *testing.T, srv *redisserver.Server) *monitor {
	t.Helper()
	conn, err := net.Dial(srv.Network(), srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	m := &monitor{conn: conn, lines: bufio.NewReader(conn)}
	// The server switches the connection to monitoring before it answers,
	// so after +OK no later command can be missed.
	require.Equal(t, "+OK", m.next(t))
	return m
}

func (m *monitor) next(t *testing.T) string {
	t.Helper()
	require.NoError(t, m.conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := m.lines.ReadString('\n')
	require.NoError(t, err, "monitor feed")
	return strings.TrimRight(line, "\r\n")
}

// The first write the server executed is the one kept: MONITOR is the
// only outside witness of which of several concurrent writes came first.
func TestSaveFirstConcurrentFirstWriteWins(t *testing.T) {
	store, _, srv := newStore(t)
	ctx := testCtx(t)
	mon := startMonitor(t, srv)
	const writers = 20
	const orderID = "order-race"

	start := make(chan struct{})
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = store.SaveFirst(ctx, orderID, fmt.Appendf(nil, "envelope-%02d", i))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "writer %d: a losing SaveFirst is not an error", i)
	}

	// Collect the envelope of every write in execution order.
	marker := `"set" "sm:rel:envelope:{` + orderID + `}" "`
	var executed []string
	for len(executed) < writers {
		line := mon.next(t)
		if k := strings.Index(line, marker); k >= 0 {
			rest := line[k+len(marker):]
			require.True(t, strings.HasSuffix(rest, `" "nx"`), "the write must be conditional: %s", line)
			executed = append(executed, strings.TrimSuffix(rest, `" "nx"`))
		}
	}
	t.Logf("first executed write: %s", executed[0])

	got, err := store.LoadFirst(ctx, orderID)
	require.NoError(t, err)
	require.Equal(t, executed[0], string(got), "the first executed write must be the one kept")

	require.NoError(t, store.SaveFirst(ctx, orderID, []byte("late")))
	got, err = store.LoadFirst(ctx, orderID)
	require.NoError(t, err)
	require.Equal(t, executed[0], string(got))
}

func TestOpStateFinal(t *testing.T) {
	require.False(t, relocation.OpMoving.Final())
	require.False(t, relocation.OpTargetActivated.Final())
	require.True(t, relocation.OpCommitted.Final())
	require.True(t, relocation.OpAborted.Final())
	require.Equal(t, relocation.OpState("moving"), relocation.OpMoving)
	require.Equal(t, relocation.OpState("target-activated"), relocation.OpTargetActivated)
	require.Equal(t, relocation.OpState("committed"), relocation.OpCommitted)
	require.Equal(t, relocation.OpState("aborted"), relocation.OpAborted)
}

func TestKeysCarryHashTagAndPrefix(t *testing.T) {
	store, rdb, _ := newStore(t)
	ctx := testCtx(t)
	require.NoError(t, store.SaveFirst(ctx, "order-k", []byte("env")))
	require.NoError(t, store.PutOperation(ctx, relocation.Operation{
		ID: "op-k", OrderID: "order-k", State: relocation.OpMoving, StartedAtUnixMs: 5, UpdatedAtUnixMs: 5,
	}))

	var keys []string
	iter := rdb.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	require.NoError(t, iter.Err())
	t.Logf("keys: %v", keys)
	require.ElementsMatch(t, []string{
		"sm:rel:envelope:{order-k}",
		"sm:rel:op:{order-k}:op-k",
		"sm:rel:ops:{order-k}",
		"sm:rel:opid:{op-k}",
	}, keys)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "sm:rel:"), k)
		require.False(t, strings.HasPrefix(k, "sm:loc:"), "%s is in the Location Store keyspace", k)
		if strings.Contains(k, "order-k") {
			require.Equal(t, "order-k", eventstore.HashTag(k), "per-order key %s must hash by its order", k)
		}
	}
}

func TestCustomKeyPrefix(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := testCtx(t)
	store, err := relocation.NewRedis(relocation.Config{Client: rdb, KeyPrefix: "tenant1:rel:"})
	require.NoError(t, err)
	require.NoError(t, store.SaveFirst(ctx, "order-p", []byte("env")))
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{"tenant1:rel:envelope:{order-p}"}, keys)
}

// A wiring mistake is refused at construction: no client, a prefix
// inside the Location Store's keyspace, or one that would add a second
// hash tag.
func TestNewRedisRefusesBadConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	t.Cleanup(func() { _ = rdb.Close() })
	for name, cfg := range map[string]relocation.Config{
		"no client":           {},
		"location keyspace":   {Client: rdb, KeyPrefix: "sm:loc:"},
		"inside location's":   {Client: rdb, KeyPrefix: "sm:loc:rel:"},
		"prefix with a brace": {Client: rdb, KeyPrefix: "sm:{rel}:"},
	} {
		s, err := relocation.NewRedis(cfg)
		require.ErrorIs(t, err, relocation.ErrConfig, name)
		require.Nil(t, s, name)
	}
	s, err := relocation.NewRedis(relocation.Config{Client: rdb})
	require.NoError(t, err)
	require.NotNil(t, s)
}

// Refused writes store nothing at all, not even an id claim.
func TestRefusedWritesStoreNothing(t *testing.T) {
	store, rdb, _ := newStore(t)
	ctx := testCtx(t)
	for _, id := range []string{"", "a{b"} {
		require.ErrorIs(t, store.SaveFirst(ctx, id, []byte("e")), relocation.ErrInvalidID)
		require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: id, OrderID: "o", State: relocation.OpMoving}), relocation.ErrInvalidID)
		require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: id, State: relocation.OpMoving}), relocation.ErrInvalidID)
	}
	require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: "o", State: "paused"}), relocation.ErrInvalidArgument)
	require.ErrorIs(t, store.SaveFirst(ctx, "o", nil), relocation.ErrInvalidArgument)
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	require.Zero(t, n, "refused writes must store nothing")
}

func TestRedisFailureIsUnavailable(t *testing.T) {
	store, rdb, _ := newStore(t)
	ctx := testCtx(t)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := store.LoadFirst(cancelled, "order-c")
	require.ErrorIs(t, err, relocation.ErrUnavailable)
	require.ErrorIs(t, err, context.Canceled, "the cause stays in the chain")
	require.False(t, errors.Is(err, relocation.ErrNotFound))

	require.NoError(t, rdb.Close())
	require.ErrorIs(t, store.SaveFirst(ctx, "order-c", []byte("e")), relocation.ErrUnavailable)
	require.ErrorIs(t, store.PutOperation(ctx, relocation.Operation{ID: "op", OrderID: "order-c", State: relocation.OpMoving}), relocation.ErrUnavailable)
	_, err = store.Operations(ctx, "order-c")
	require.ErrorIs(t, err, relocation.ErrUnavailable)
}

// The first envelope rides in an order's unit of work (eventstore.Unit)
// as SaveFirst's write: the first committed unit's envelope is the one
// LoadFirst returns, a later one changes nothing, and an empty envelope
// is refused before anything is added.
func TestAddFirstEnvelopeRidesInTheOrdersUnit(t *testing.T) {
	s, rdb, _ := newStore(t)
	ctx := testCtx(t)
	es, err := eventstore.NewRedis(eventstore.Config{Client: rdb})
	require.NoError(t, err)
	f, _, err := es.Open(ctx, "o1", 1)
	require.NoError(t, err)
	for v, envelope := range []string{"first", "second"} {
		u := eventstore.NewUnit("o1", int64(v), f, []eventstore.Envelope{{EventID: envelope, OrderID: "o1", EventType: "X", CreatedAtUnixMs: 1, Data: []byte("{}")}})
		u.Project(eventstore.Projection{Key: "rm:{o1}", VersionField: "v", StateField: "s", State: []byte("s")})
		require.NoError(t, s.AddFirstEnvelope(u, []byte(envelope)))
		_, err := es.Commit(ctx, u)
		require.NoError(t, err)
		got, err := s.LoadFirst(ctx, "o1")
		require.NoError(t, err)
		require.Equal(t, "first", string(got))
	}
	require.ErrorIs(t, s.AddFirstEnvelope(eventstore.NewUnit("o1", 2, f, nil), nil), relocation.ErrInvalidArgument)
}
