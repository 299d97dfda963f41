package readmodel_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
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
// the order id on the order's own channel: not a non-terminal one, not
// one the version guard refuses, not a refused append.
func TestTerminalNoticesOnlyForTerminalWrites(t *testing.T) {
	_, c := setup(t)
	p := newProjected(t, c, "", "")
	ctx := ctxT(t)
	sub := c.SSubscribe(ctx, readmodel.OrderChannel("", "p1"), readmodel.OrderChannel("", "a1"), readmodel.OrderChannel("", "b1"))
	defer sub.Close()
	for range 3 {
		_, err := sub.Receive(ctx) // the subscriptions are in force from here
		require.NoError(t, err)
	}

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
	_, err = readmodeltest.Commit(ctx, p.Append, "a1", 0, fa, ev("a1", "e1"), st("a1", contracts.OrderStatus_Created))
	require.NoError(t, err)
	_, err = readmodeltest.Commit(ctx, p.Append, "a1", 0, fa, ev("a1", "e2"), st("a1", contracts.OrderStatus_Failed))
	require.ErrorIs(t, err, eventstore.ErrVersionConflict, "a refused append announces nothing")
	_, err = readmodeltest.Commit(ctx, p.Append, "a1", 1, fa, ev("a1", "e2"), st("a1", contracts.OrderStatus_Failed)) // notice: a1
	require.NoError(t, err)

	require.True(t, put("b1", 9, contracts.OrderStatus_Confirmed)) // notice: b1
	fb, _, err := p.Events.Open(ctx, "b1", 1)
	require.NoError(t, err)
	_, err = readmodeltest.Commit(ctx, p.Append, "b1", 0, fb, ev("b1", "x"), st("b1", contracts.OrderStatus_Confirmed))
	require.NoError(t, err, "the guard keeps b1's newer record: the append stands, the record is not written, nothing is announced")

	// The end marker: everything published before it has arrived.
	require.NoError(t, c.SPublish(ctx, readmodel.OrderChannel("", "b1"), "end").Err())
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
	require.EqualValues(t, 2, cmds[0].(*redis.IntCmd).Val(), "the feed's two subscriber connections were killed: the orders' channels' and the legacy channel's")

	recv(t, wake1, "o1's waiter after the resubscription")
	recv(t, wake2, "o2's waiter after the resubscription: every waiter re-reads")
	require.Eventually(t, func() bool { return f.Subscriptions() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the legacy channel is subscribed again too")
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
	require.Eventually(t, func() bool { return f.Subscriptions() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the legacy channel is subscribed again too")
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

// subscribedFeed is a store on a fresh redis-server with a feed whose
// subscription is in force, and the raw client.
func subscribedFeed(t *testing.T) (*readmodel.Redis, *readmodel.TerminalFeed, *redis.Client) {
	t.Helper()
	_, c := setup(t)
	s := newRedis(t, readmodel.Config{Client: c, Logger: tLogger(t)})
	f := newFeed(t, s)
	require.Eventually(t, func() bool { return f.Subscriptions() == 1 }, 10*time.Second, 5*time.Millisecond)
	return s, f, c
}

// linkedFeed is subscribedFeed told that the owners tell it of its
// starts' end (UseLinkNotices).
func linkedFeed(t *testing.T) (*readmodel.Redis, *readmodel.TerminalFeed, *redis.Client) {
	t.Helper()
	s, f, c := subscribedFeed(t)
	f.UseLinkNotices()
	return s, f, c
}

func orderState(id string, st contracts.OrderStatus, at int64) *contracts.OrderState {
	return &contracts.OrderState{OrderId: id, Status: st, UpdatedAtUnixMs: at}
}

// The feed vouches only for what it can know: a tracked order whose start
// was recorded is not terminal until its owner's notice comes over the
// link (Deliver), and that notice's record is then the answer, with no
// subscription of the order's channel; an untracked order, a start not
// (yet) recorded, and an order whose notice carried no record are not
// vouched for: their waiters subscribe and read.
func TestFeedVouchesForTheStartsItTracked(t *testing.T) {
	s, f, c := linkedFeed(t)
	ctx := ctxT(t)
	known := func(id string) bool { _, ok := f.Known(id); return ok }

	require.False(t, known("o1"), "never tracked")
	recorded := f.Track("o1")
	require.False(t, known("o1"), "tracked, its start not recorded yet")
	recorded()
	st, ok := f.Known("o1")
	require.True(t, ok)
	require.Nil(t, st, "recorded after Track, no notice: not terminal")

	subs := f.OrderSubscriptions()
	wake, stop := f.Watch("o1")
	defer stop()
	require.Equal(t, subs, f.OrderSubscriptions(), "a vouched wait subscribes to nothing")
	mustApply(t, s, "o1", 2, orderState("o1", contracts.OrderStatus_Confirmed, 7))
	f.Deliver(orderState("o1", contracts.OrderStatus_Confirmed, 7))
	recv(t, wake, "o1's owner's notice")
	st, ok = f.Known("o1")
	require.True(t, ok)
	require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
	require.EqualValues(t, 7, st.GetUpdatedAtUnixMs())

	// An order nobody tracked: its wait subscribes to its channel, and
	// its terminal write's notice is not kept.
	wake2, stop2 := f.Watch("o2")
	defer stop2()
	require.Equal(t, subs+1, f.OrderSubscriptions())
	mustApply(t, s, "o2", 1, orderState("o2", contracts.OrderStatus_Failed, 1))
	recv(t, wake2, "o2's terminal write")
	require.False(t, known("o2"))

	// A notice that came after Track is final, recorded start or not.
	_ = f.Track("o3")
	wake3, stop3 := f.Watch("o3")
	defer stop3()
	mustApply(t, s, "o3", 1, orderState("o3", contracts.OrderStatus_Failed, 1))
	recv(t, wake3, "o3's terminal write")
	st, ok = f.Known("o3")
	require.True(t, ok)
	require.Equal(t, contracts.OrderStatus_Failed, st.GetStatus())

	// A bare order id on the legacy channel says terminal without the
	// record: read.
	f.Track("o4")()
	wake4, stop4 := f.Watch("o4")
	defer stop4()
	require.NoError(t, c.Publish(ctx, readmodel.TerminalChannel(""), "o4").Err())
	recv(t, wake4, "o4's bare notice")
	require.False(t, known("o4"))

	// A feed the owners do not tell vouches for nothing.
	_, g, _ := subscribedFeed(t)
	g.Track("o5")()
	_, ok = g.Known("o5")
	require.False(t, ok, "no link notices")
}

// A vouch ends when its owner's notice may not come: the owner left
// before the end (a non-terminal Deliver), a link dropped (VoidVouches),
// the legacy channel's subscription was lost, or VouchFor passed. The
// waiters it covered are then covered by their order's subscription,
// whose confirmation wakes them to read; a terminal write after it
// reaches them on the order's channel.
func TestAVouchEndsWhenItsNoticeMayNotCome(t *testing.T) {
	s, f, c := linkedFeed(t)
	ctx := ctxT(t)
	known := func(id string) bool { _, ok := f.Known(id); return ok }
	ends := map[string]func(){
		"left":  func() { f.Deliver(orderState("left", contracts.OrderStatus_InventoryReserved, 1)) },
		"link":  f.VoidVouches,
		"fresh": func() {},
	}
	for _, id := range []string{"left", "link"} {
		f.Track(id)()
		wake, stop := f.Watch(id)
		defer stop()
		require.True(t, known(id))
		subs := f.OrderSubscriptions()
		ends[id]()
		require.False(t, known(id), "%s: the vouch ended", id)
		require.Equal(t, subs+1, f.OrderSubscriptions(), "%s: its waiter is covered by a subscription", id)
		recv(t, wake, id+": the subscription's confirmation")
		mustApply(t, s, id, 2, orderState(id, contracts.OrderStatus_Confirmed, 2))
		recv(t, wake, id+": the terminal write on the order's channel")
	}

	f.VouchFor = 200 * time.Millisecond
	f.Track("late")()
	wake, stop := f.Watch("late")
	defer stop()
	require.True(t, known("late"))
	recv(t, wake, "late: the subscription made when the vouch ran out")
	require.False(t, known("late"))
	mustApply(t, s, "late", 2, orderState("late", contracts.OrderStatus_Failed, 2))
	recv(t, wake, "late: the terminal write on the order's channel")

	f.VouchFor = readmodel.DefaultVouchFor
	f.Track("cut")()
	require.True(t, known("cut"))
	_, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.Subscriptions() == 2 }, 10*time.Second, 5*time.Millisecond)
	require.False(t, known("cut"), "an older workflow's notice may have been lost with the legacy subscription")
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// A vouch without a notice lasts VouchFor from its Track; a terminal
// notice's record is kept for one to two trackRetain periods (30 s).
func TestFeedVouchesForVouchForAndKeepsRecordsTwoPeriods(t *testing.T) {
	_, f, _ := linkedFeed(t)
	now := time.Unix(1_000, 0)
	readmodel.SetFeedClock(f, func() time.Time { return now })
	known := func(id string) bool { _, ok := f.Known(id); return ok }

	f.Track("a")()
	f.Track("b")()
	f.Deliver(orderState("b", contracts.OrderStatus_Confirmed, 1))
	now = now.Add(readmodel.DefaultVouchFor - time.Millisecond)
	require.True(t, known("a"))
	now = now.Add(time.Millisecond)
	require.False(t, known("a"), "VouchFor passed without a notice")
	require.True(t, known("b"), "its end is known")
	now = now.Add(30 * time.Second)
	f.Track("c")()
	require.True(t, known("b"), "b is in the previous period")
	now = now.Add(30 * time.Second)
	f.Track("d")()
	require.False(t, known("b"), "two periods on")
	require.True(t, known("d"))
}

// Many API requests at once: each tracks its order, records its start,
// registers and asks Known, while the orders it started turn terminal
// concurrently, before or after the waiter registers; every waiter gets its
// own order's record, from Known or from the wake.
func TestFeedTrackingUnderConcurrentStartsAndNotices(t *testing.T) {
	const orders = 64
	s, f, _ := linkedFeed(t)
	ctx := ctxT(t)
	id := func(i int) string { return fmt.Sprintf("c%d", i) }
	put := func(i int, v int64, st contracts.OrderStatus) error {
		_, err := s.Put(ctx, id(i), v, &contracts.OrderState{OrderId: id(i), Status: st, UpdatedAtUnixMs: int64(i)})
		return err
	}
	got := make(chan *contracts.OrderState, orders)
	// The workflow's Put may still be writing (the active-order index)
	// when its notice has already answered the waiter: the test waits for
	// every Put before its context is cancelled.
	var workflows sync.WaitGroup
	defer workflows.Wait()
	for i := range orders {
		started := make(chan struct{})
		go func() { // the request: start, then wait
			recorded := f.Track(id(i))
			if err := put(i, 1, contracts.OrderStatus_Created); err != nil {
				t.Error(err)
			}
			recorded()
			close(started)
			wake, record, stop := f.WatchRecord(id(i))
			defer stop()
			st, ok := f.Known(id(i))
			if !ok {
				got <- nil
				return
			}
			for st == nil {
				select {
				case <-wake:
					st, _ = record()
				case <-ctx.Done():
					got <- nil
					return
				}
			}
			got <- st
		}()
		workflows.Add(1)
		go func() { // the workflow: ends the order once it is started
			defer workflows.Done()
			<-started
			if err := put(i, 2, contracts.OrderStatus_Confirmed); err != nil {
				t.Error(err)
			}
			// The owner tells the starting process over the link.
			f.Deliver(orderState(id(i), contracts.OrderStatus_Confirmed, int64(i)))
		}()
	}
	seen := map[string]bool{}
	for range orders {
		select {
		case st := <-got:
			require.NotNil(t, st, "a tracked, recorded start is known, and its record comes")
			require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
			require.Equal(t, st.GetOrderId(), id(int(st.GetUpdatedAtUnixMs())))
			seen[st.GetOrderId()] = true
		case <-ctx.Done():
			require.FailNow(t, "a waiter was not answered")
		}
	}
	require.Len(t, seen, orders)
}

// A terminal notice from a newer build: a record with a field this build
// does not declare still hands over what it knows; one whose status this
// build does not know (a newer terminal status) still wakes the waiter,
// who then reads instead of trusting it. Neither is dropped or fatal.
func TestFeedReadsTheNoticesOfANewerBuild(t *testing.T) {
	_, c := setup(t)
	p := newProjected(t, c, "", "")
	f := newFeed(t, p.ReadModel.(*readmodel.Redis))
	ctx := ctxT(t)
	require.Eventually(t, func() bool { return f.Subscriptions() > 0 }, 10*time.Second, 5*time.Millisecond)
	notice := func(id string, st *contracts.OrderState) string {
		raw, err := proto.Marshal(st)
		require.NoError(t, err)
		// Field 99, a varint: what a newer OrderState's extra field encodes to.
		raw = protowire.AppendVarint(protowire.AppendTag(raw, 99, protowire.VarintType), 1)
		return fmt.Sprintf("\x00%d:%s%s", len(id), id, raw)
	}

	wake, record, stop := f.WatchRecord("n1")
	defer stop()
	require.NoError(t, c.Publish(ctx, readmodel.TerminalChannel(""), notice("n1",
		&contracts.OrderState{OrderId: "n1", Status: contracts.OrderStatus_Confirmed, UpdatedAtUnixMs: 7})).Err())
	recv(t, wake, "a notice with a newer field")
	st, ok := record()
	require.True(t, ok)
	require.Equal(t, contracts.OrderStatus_Confirmed, st.GetStatus())
	require.EqualValues(t, 7, st.GetUpdatedAtUnixMs())

	wake2, record2, stop2 := f.WatchRecord("n2")
	defer stop2()
	require.NoError(t, c.Publish(ctx, readmodel.TerminalChannel(""), notice("n2",
		&contracts.OrderState{OrderId: "n2", Status: contracts.OrderStatus(42)})).Err())
	recv(t, wake2, "a notice with a newer status")
	_, ok = record2()
	require.False(t, ok, "a status this build does not know is not taken as terminal: the waiter reads")
}
