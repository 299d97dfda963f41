package readmodel

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// feedBuffer is how many notices the subscription buffers between the
// connection and the fan-out. The fan-out never blocks, so it only rides
// out scheduling hiccups; go-redis would drop a notice only after the
// buffer stayed full for a minute.
const feedBuffer = 1024

// trackRetain is how long the feed keeps an order it saw start
// (StartTracker): at least one period, at most two (the two generations
// of trackedStarts), which bounds the memory to the starts of two periods.
// A waiter that comes later reads, as without tracking. It is the longest
// wait the API allows (edge.MaxWaitMs), so that a client waiting again
// right after a wait that timed out is still vouched for.
const trackRetain = 30 * time.Second

// TerminalFeed is the TerminalWatcher on Redis: ONE Pub/Sub subscription
// to TerminalChannel per feed (a process opens one), whatever the number
// of waiters, fanned out in memory to the waiters registered per order
// id. A waiter holds no Redis connection and makes no Redis call.
//
// The subscription is go-redis's PubSub, which reconnects and
// resubscribes by itself after the connection drops (a Redis restart).
// Every subscription confirmation — the first and each one after a
// reconnect — wakes every registered waiter once (TerminalWatcher's
// at-least-once), since a notice published while disconnected is lost.
type TerminalFeed struct {
	ps      *redis.PubSub
	channel string
	log     *slog.Logger
	done    chan struct{}

	// subscribed counts subscription confirmations: 1 once the first
	// subscription is in force, +1 per resubscription after a reconnect.
	subscribed atomic.Int64
	// delivered counts the notices handed over by Deliver.
	delivered atomic.Int64

	mu      sync.Mutex
	waiters map[string]map[*feedWaiter]struct{}
	closed  bool
	starts  trackedStarts
	now     func() time.Time
}

// trackedStarts holds the orders a process saw start (StartTracker) in two
// generations: cur takes new ones; when it is trackRetain old it becomes
// prev and the old prev is dropped whole, so expiry costs no scan.
type trackedStarts struct {
	cur, prev map[string]*trackedStart
	since     time.Time
}

type trackedStart struct {
	recorded bool   // the start was recorded after Track
	record   []byte // the terminal notice's state, once one came
}

func (t *trackedStarts) get(orderID string) *trackedStart {
	if e := t.cur[orderID]; e != nil {
		return e
	}
	return t.prev[orderID]
}

func (t *trackedStarts) reset() { t.cur, t.prev = nil, nil }

type feedWaiter struct {
	wake chan struct{}
	// noticed is the state the latest notice for the waiter's order
	// carried, as stored (protobuf binary); decoded only if the waiter
	// asks, since most notices reach a process with no waiter for them.
	noticed atomic.Pointer[[]byte]
}

var _ StartTracker = (*TerminalFeed)(nil)

// NewTerminalFeed opens the subscription on the store's client and
// channel (TerminalChannel of its key prefix) and returns at once: the
// subscription is established in the background, and its confirmation
// wakes whoever registered before it. Close releases it.
func (r *Redis) NewTerminalFeed() *TerminalFeed {
	f := &TerminalFeed{
		channel: TerminalChannel(r.keys.prefix),
		log:     r.log,
		done:    make(chan struct{}),
		waiters: map[string]map[*feedWaiter]struct{}{},
		now:     time.Now,
	}
	// Without a reachable Redis the SUBSCRIBE fails here; PubSub keeps
	// the channel and subscribes when its receive loop connects.
	f.ps = r.client.Subscribe(context.Background(), f.channel)
	go f.run(f.ps.ChannelWithSubscriptions(redis.WithChannelSize(feedBuffer)))
	return f
}

// Channel is the Pub/Sub channel the feed listens on.
func (f *TerminalFeed) Channel() string { return f.channel }

// Subscriptions is how many times the subscription was confirmed: 0
// before the first, +1 after each reconnect.
func (f *TerminalFeed) Subscriptions() int64 { return f.subscribed.Load() }

func (f *TerminalFeed) run(in <-chan any) {
	defer close(f.done)
	for m := range in {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" || m.Channel != f.channel {
				continue
			}
			n := f.subscribed.Add(1)
			woken := f.resubscribed()
			if n > 1 {
				f.log.Info("terminal-notice subscription re-established; waiters re-read",
					slog.String("channel", f.channel), slog.Int("waiters", woken))
			}
		case *redis.Message:
			if m.Channel == f.channel {
				if id, state := parseNotice(m.Payload); id != "" {
					f.wakeOrder(id, state)
				}
			}
		}
	}
}

// Watch implements TerminalWatcher.
func (f *TerminalFeed) Watch(orderID string) (<-chan struct{}, func()) {
	_, wake, stop := f.watch(orderID)
	return wake, stop
}

// WatchRecord implements TerminalRecordWatcher.
func (f *TerminalFeed) WatchRecord(orderID string) (<-chan struct{}, func() (*contracts.OrderState, bool), func()) {
	w, wake, stop := f.watch(orderID)
	record := func() (*contracts.OrderState, bool) {
		raw := w.noticed.Load()
		if raw == nil {
			return nil, false
		}
		st := &contracts.OrderState{}
		if err := proto.Unmarshal(*raw, st); err != nil || !Terminal(st.GetStatus()) {
			// Not a record this store writes: the waiter reads instead.
			return nil, false
		}
		return st, true
	}
	return wake, record, stop
}

func (f *TerminalFeed) watch(orderID string) (*feedWaiter, <-chan struct{}, func()) {
	w := &feedWaiter{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	if !f.closed {
		set := f.waiters[orderID]
		if set == nil {
			set = map[*feedWaiter]struct{}{}
			f.waiters[orderID] = set
		}
		set[w] = struct{}{}
	}
	f.mu.Unlock()
	var once sync.Once
	return w, w.wake, func() { once.Do(func() { f.remove(orderID, w) }) }
}

func (f *TerminalFeed) remove(orderID string, w *feedWaiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.waiters[orderID]
	delete(set, w)
	if len(set) == 0 {
		delete(f.waiters, orderID)
	}
}

// Track implements StartTracker.
func (f *TerminalFeed) Track(orderID string) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.subscribed.Load() == 0 {
		return func() {}
	}
	// Only Track adds, so rotating here bounds the memory. A vouch does
	// not go stale with age (the subscription's being unbroken is what
	// makes it true), so rotation is about memory alone.
	t := &f.starts
	if now := f.now(); t.cur == nil || now.Sub(t.since) >= trackRetain {
		t.prev, t.cur, t.since = t.cur, map[string]*trackedStart{}, now
	}
	e := &trackedStart{}
	t.cur[orderID] = e
	return func() {
		// After a resubscription e is in no generation any more, and
		// marking it changes nothing.
		f.mu.Lock()
		e.recorded = true
		f.mu.Unlock()
	}
}

// Known implements StartTracker.
func (f *TerminalFeed) Known(orderID string) (*contracts.OrderState, bool) {
	f.mu.Lock()
	var (
		known  bool
		record []byte
	)
	if e := f.starts.get(orderID); e != nil {
		known, record = e.recorded || e.record != nil, e.record
	}
	f.mu.Unlock()
	if record == nil {
		return nil, known
	}
	st := &contracts.OrderState{}
	if err := proto.Unmarshal(record, st); err != nil || !Terminal(st.GetStatus()) {
		return nil, false
	}
	return st, true
}

// Deliver wakes the waiters of st's order with st as the record its
// notice carried, as a notice on the channel does: the way in of a notice
// that came by another path than Redis (the owner's over the cluster
// link, grain.ServeNotices). A state that is not terminal is no notice
// and is ignored. It never blocks and touches no store.
func (f *TerminalFeed) Deliver(st *contracts.OrderState) {
	if st.GetOrderId() == "" || !Terminal(st.GetStatus()) {
		return
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
	if err != nil {
		return
	}
	f.delivered.Add(1)
	f.wakeOrder(st.GetOrderId(), raw)
}

// Delivered is how many notices Deliver handed over.
func (f *TerminalFeed) Delivered() int64 { return f.delivered.Load() }

// Waiters is how many waiters are registered, over all orders.
func (f *TerminalFeed) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, set := range f.waiters {
		n += len(set)
	}
	return n
}

// wakeOrder wakes the waiters of orderID, leaving them the state the
// notice carried (nil: none; an earlier notice's stays).
func (f *TerminalFeed) wakeOrder(orderID string, state []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.starts.get(orderID); e != nil {
		if state == nil {
			// Terminal, with no record to answer from: no more vouching.
			delete(f.starts.cur, orderID)
			delete(f.starts.prev, orderID)
		} else {
			e.record = state
		}
	}
	for w := range f.waiters[orderID] {
		if state != nil {
			w.noticed.Store(&state)
		}
		w.notify()
	}
}

// resubscribed wakes every waiter and drops every vouch: a notice
// published while the subscription was down is gone.
func (f *TerminalFeed) resubscribed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts.reset()
	n := 0
	for _, set := range f.waiters {
		for w := range set {
			w.notify()
			n++
		}
	}
	return n
}

// notify leaves one pending wake; a pending one already covers this.
func (w *feedWaiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Close ends the subscription and waits for its fan-out to stop.
// Registered waiters are not woken: each one's own deadline ends its
// wait. Watch after Close registers nothing.
func (f *TerminalFeed) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.waiters = map[string]map[*feedWaiter]struct{}{}
	f.starts.reset()
	f.mu.Unlock()
	err := f.ps.Close()
	<-f.done
	return err
}
