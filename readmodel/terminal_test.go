package readmodel_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/readmodel/readmodeltest"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// tLogger logs to t.Log.
func tLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newFeed opens a feed on s and closes it when the test ends.
func newFeed(t *testing.T, s *readmodel.Redis) *readmodel.TerminalFeed {
	t.Helper()
	f := s.NewTerminalFeed()
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	return f
}

// The TerminalWatcher contract on a real redis-server: each subtest's
// stores under prefixes of their own, with a feed of their own.
func TestRedisTerminalContract(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	readmodeltest.RunTerminalContract(t, func(t *testing.T) readmodeltest.Watched {
		i := n.Add(1)
		p := newProjected(t, c, fmt.Sprintf("t%d:es:", i), fmt.Sprintf("t%d:rm:", i))
		rm := p.ReadModel.(*readmodel.Redis)
		return readmodeltest.Watched{ReadModel: rm, Watcher: newFeed(t, rm), Append: p.Append, Events: p.Events}
	})
}

func TestTerminalChannelIsUnderTheKeyPrefix(t *testing.T) {
	require.Equal(t, "sm:rm:terminal", readmodel.TerminalChannel(""))
	require.Equal(t, "x:rm:terminal", readmodel.TerminalChannel("x:rm:"))
	_, c := setup(t)
	f := newFeed(t, newRedis(t, readmodel.Config{Client: c, KeyPrefix: "x:rm:"}))
	require.Equal(t, "x:rm:terminal", f.Channel())
}

// Exactly the applied writes of a terminal record publish, once each,
// the order id: not a non-terminal one, not one the version guard
// refuses, not a refused append.
func TestTerminalNoticesOnlyForTerminalWrites(t *testing.T) {
	_, c := setup(t)
	p := newProjected(t, c, "", "")
	ctx := ctxT(t)
	sub := c.Subscribe(ctx, readmodel.TerminalChannel(""))
	defer sub.Close()
	_, err := sub.Receive(ctx) // the subscription is in force from here
	require.NoError(t, err)

	put := func(id string, v int64, st contracts.OrderStatus) bool {
		applied, err := p.ReadModel.Put(ctx, id, v, &contracts.OrderState{OrderId: id, Status: st})
		require.NoError(t, err)
		return applied
	}
	require.True(t, put("p1", 1, contracts.OrderStatus_Created))
	require.True(t, put("p1", 2, contracts.OrderStatus_InventoryReserved))
	require.True(t, put("p1", 5, contracts.OrderStatus_Confirmed)) // notice: p1
	require.False(t, put("p1", 4, contracts.OrderStatus_Failed))   // refused: none
	require.True(t, put("p1", 5, contracts.OrderStatus_Confirmed)) // equal version rewrites: p1 again

	ev := func(orderID, id string) []eventstore.Envelope {
		return []eventstore.Envelope{{EventID: id, OrderID: orderID, EventType: "X", SourceCommandID: "cmd-" + id, CreatedAtUnixMs: 1, Data: []byte("{}")}}
	}
	st := func(id string, s contracts.OrderStatus) *contracts.OrderState {
		return &contracts.OrderState{OrderId: id, Status: s}
	}
	fa, _, err := p.Events.Open(ctx, "a1", 1)
	require.NoError(t, err)
	_, err = p.Append.AppendProjected(ctx, "a1", 0, fa, ev("a1", "e1"), st("a1", contracts.OrderStatus_Created))
	require.NoError(t, err)
	_, err = p.Append.AppendProjected(ctx, "a1", 0, fa, ev("a1", "e2"), st("a1", contracts.OrderStatus_Failed))
	require.ErrorIs(t, err, eventstore.ErrVersionConflict, "a refused append announces nothing")
	_, err = p.Append.AppendProjected(ctx, "a1", 1, fa, ev("a1", "e2"), st("a1", contracts.OrderStatus_Failed)) // notice: a1
	require.NoError(t, err)

	require.True(t, put("b1", 9, contracts.OrderStatus_Confirmed)) // notice: b1
	fb, _, err := p.Events.Open(ctx, "b1", 1)
	require.NoError(t, err)
	_, err = p.Append.AppendProjected(ctx, "b1", 0, fb, ev("b1", "x"), st("b1", contracts.OrderStatus_Confirmed))
	require.NoError(t, err, "the guard keeps b1's newer record: the append stands, the record is not written, nothing is announced")

	// The end marker: everything published before it has arrived.
	require.NoError(t, c.Publish(ctx, readmodel.TerminalChannel(""), "end").Err())
	var got []string
	var carried []contracts.OrderStatus
	for {
		m, err := sub.ReceiveMessage(ctx)
		require.NoError(t, err)
		if m.Payload == "end" {
			break
		}
		id, raw := readmodel.ParseNotice(m.Payload)
		got = append(got, id)
		// Each notice carries the record it announces, as stored.
		st := &contracts.OrderState{}
		require.NoError(t, proto.Unmarshal(raw, st), "notice of %s", id)
		require.Equal(t, id, st.GetOrderId())
		carried = append(carried, st.GetStatus())
	}
	require.Equal(t, []string{"p1", "p1", "a1", "b1"}, got)
	require.Equal(t, []contracts.OrderStatus{contracts.OrderStatus_Confirmed, contracts.OrderStatus_Confirmed,
		contracts.OrderStatus_Failed, contracts.OrderStatus_Confirmed}, carried)
}

// A notice in the earlier form, a bare order id, still wakes; one in the
// current form names its order whatever bytes its state holds.
func TestNoticeForms(t *testing.T) {
	id, raw := readmodel.ParseNotice("ord-1")
	require.Equal(t, "ord-1", id)
	require.Nil(t, raw)
	st, err := proto.Marshal(&contracts.OrderState{OrderId: "a:b", Status: contracts.OrderStatus_Failed})
	require.NoError(t, err)
	id, raw = readmodel.ParseNotice("\x003:a:b" + string(st))
	require.Equal(t, "a:b", id)
	require.Equal(t, st, raw)
	id, _ = readmodel.ParseNotice("\x00" + "99:short")
	require.Empty(t, id, "a damaged notice names no order")
}

// WatchRecord hands a waiter the terminal record its wake announced, so
// it needs no read; a wake without one (a notice in the earlier form)
// says so, and the waiter reads.
func TestFeedHandsOverTheNoticedRecord(t *testing.T) {
	_, c := setup(t)
	p := newProjected(t, c, "", "")
	rm := p.ReadModel.(*readmodel.Redis)
	f := newFeed(t, rm)
	ctx := ctxT(t)
	require.Eventually(t, func() bool { return f.Subscriptions() > 0 }, 10*time.Second, 5*time.Millisecond)

	wake, record, stop := f.WatchRecord("r1")
	defer stop()
	_, ok := record()
	require.False(t, ok, "nothing noticed yet")
	applied, err := rm.Put(ctx, "r1", 1, &contracts.OrderState{OrderId: "r1", Status: contracts.OrderStatus_Created})
	require.NoError(t, err)
	require.True(t, applied)
	applied, err = rm.Put(ctx, "r1", 2, &contracts.OrderState{OrderId: "r1", Status: contracts.OrderStatus_Failed, Reason: proto.String("declined"), UpdatedAtUnixMs: 42})
	require.NoError(t, err)
	require.True(t, applied)
	recv(t, wake, "the terminal put")
	st, ok := record()
	require.True(t, ok)
	require.Equal(t, contracts.OrderStatus_Failed, st.GetStatus())
	require.Equal(t, "declined", st.GetReason())
	require.EqualValues(t, 42, st.GetUpdatedAtUnixMs())

	wake2, record2, stop2 := f.WatchRecord("r2")
	defer stop2()
	require.NoError(t, c.Publish(ctx, readmodel.TerminalChannel(""), "r2").Err())
	recv(t, wake2, "a bare order id")
	_, ok = record2()
	require.False(t, ok, "a bare order id carries no record: the waiter reads")
}

// recv waits for one wake.
func recv(t *testing.T, wake <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-wake:
	case <-time.After(15 * time.Second):
		require.FailNow(t, "no wake: "+what)
	}
}

func requireStatus(t *testing.T, s readmodel.Store, orderID string, want contracts.OrderStatus) {
	t.Helper()
	st, _ := mustGet(t, s, orderID)
	require.Equal(t, want, st.GetStatus())
}

// A terminal record written while the subscription is down is never
// announced to this feed; the resubscription wakes every waiter, whose
// re-read finds it. The subscriber's connection is killed and the record
// written without a notice in one transaction, so the resubscription is
// the only thing that can wake the waiter.
func TestTerminalFeedWakesEveryWaiterWhenItResubscribes(t *testing.T) {
	_, c := setup(t)
	s := newRedis(t, readmodel.Config{Client: c, Logger: tLogger(t)})
	f := newFeed(t, s)
	require.Eventually(t, func() bool { return f.Subscriptions() == 1 }, 10*time.Second, 5*time.Millisecond)
	mustApply(t, s, "o1", 1, &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Created})
	mustApply(t, s, "o2", 1, &contracts.OrderState{OrderId: "o2", Status: contracts.OrderStatus_Created})
	wake1, stop1 := f.Watch("o1")
	defer stop1()
	wake2, stop2 := f.Watch("o2")
	defer stop2()
	requireStatus(t, s, "o1", contracts.OrderStatus_Created)

	terminal, err := proto.Marshal(&contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Confirmed})
	require.NoError(t, err)
	ctx := ctxT(t)
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ClientKillByFilter(ctx, "TYPE", "pubsub")
		p.HSet(ctx, "sm:rm:{o1}", "version", "2", "state", terminal)
		return nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, cmds[0].(*redis.IntCmd).Val(), "the feed's one subscriber connection was killed")

	recv(t, wake1, "o1's waiter after the resubscription")
	recv(t, wake2, "o2's waiter after the resubscription: every waiter re-reads")
	require.EqualValues(t, 2, f.Subscriptions())
	requireStatus(t, s, "o1", contracts.OrderStatus_Confirmed)
}

// A real Redis restart: the feed reconnects by itself, wakes its waiters
// to re-read, and hears the terminal writes made after the restart.
func TestTerminalFeedSurvivesARedisRestart(t *testing.T) {
	r := redistest.StartRestartable(t)
	c := r.Server().Client()
	t.Cleanup(func() { c.Close() })
	s := newRedis(t, readmodel.Config{Client: c, Logger: tLogger(t)})
	f := newFeed(t, s)
	require.Eventually(t, func() bool { return f.Subscriptions() == 1 }, 10*time.Second, 5*time.Millisecond)
	mustApply(t, s, "o1", 1, &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Created})
	wake, stop := f.Watch("o1")
	defer stop()
	requireStatus(t, s, "o1", contracts.OrderStatus_Created)

	r.Restart()
	recv(t, wake, "the resubscription after the restart")
	require.EqualValues(t, 2, f.Subscriptions())
	requireStatus(t, s, "o1", contracts.OrderStatus_Created) // persisted across the restart

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan readmodeltest.Awaited, 1)
	go func() {
		a, err := readmodeltest.AwaitTerminal(ctx, s, f, "o1")
		if err != nil {
			t.Error(err)
		}
		done <- a
	}()
	mustApply(t, s, "o1", 2, &contracts.OrderState{OrderId: "o1", Status: contracts.OrderStatus_Confirmed})
	a := <-done
	require.Equal(t, contracts.OrderStatus_Confirmed, a.State.GetStatus())
	recv(t, wake, "the first watch hears the write after the restart too")
}
