package readmodel

import (
	"context"
	"errors"
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

// DefaultVouchFor is how long, from its Track, a tracked start is vouched
// for without its owner's notice (TerminalFeed.VouchFor's default): well
// above an order's usual start-to-end time, so that a wait seldom falls
// back to a subscription of its own, and short enough to bound the wait
// of one whose notice was lost.
const DefaultVouchFor = 5 * time.Second

// subscribeWait bounds how long Watch waits for an order's subscription
// to be confirmed before its waiter reads all the same (Redis not
// answering): the confirmation, when it comes, wakes it to read again.
const subscribeWait = time.Second

// TerminalFeed is the TerminalWatcher on Redis. A terminal write
// publishes its notice on the order's own shard channel (OrderChannel,
// SPUBLISH in the write's script), so a notice reaches only the processes
// that subscribed to that order: one whose waiters it cannot vouch for.
// The feed subscribes (SSUBSCRIBE) to an order's channel when its first
// waiter registers, and unsubscribes when its last one leaves, on one
// connection per Redis master, whatever the number of waiters; Watch
// returns once the subscription is confirmed, so the waiter's read comes
// after it.
//
// The orders this process started are told to it by their owner over the
// cluster link instead (Deliver, grain.NoticeTo): those waits subscribe
// to nothing and read nothing (StartTracker). The link's notice is at
// most once, so a vouch lasts VouchFor from its Track, and ends at once
// when the owner says it left before the end (a non-terminal Deliver) or
// the link may have dropped (VoidVouches); waiters still registered then
// are covered by a subscription, whose confirmation wakes them to read.
//
// The subscriptions are go-redis PubSubs, which reconnect and resubscribe
// by themselves after the connection drops (a Redis restart); each
// confirmation after the first wakes the order's waiters once
// (TerminalWatcher's at-least-once), since a notice published while
// disconnected is lost.
//
// The feed also listens on TerminalChannel, where builds before the
// order channels published every notice: a rolling upgrade's older
// workflows are still heard (docs/operations.md).
type TerminalFeed struct {
	ps      *redis.PubSub
	channel string
	prefix  string
	log     *slog.Logger
	done    chan struct{}
	shards  *shardConns
	// VouchFor is how long a tracked start is vouched for without its
	// owner's notice; set before the first Track (default
	// DefaultVouchFor).
	VouchFor time.Duration

	// subscribed counts the legacy channel's subscription confirmations:
	// 1 once the first is in force, +1 per resubscription after a
	// reconnect.
	subscribed atomic.Int64
	// delivered counts the notices handed over by Deliver; orderSubs the
	// order subscriptions sent (SSUBSCRIBE).
	delivered, orderSubs atomic.Int64
	// linked is set once the owners tell this process of its starts' end
	// (UseLinkNotices): only then does Track vouch.
	linked atomic.Bool

	mu      sync.Mutex
	waiters map[string]map[*feedWaiter]struct{}
	covers  map[string]*cover
	closed  bool
	starts  trackedStarts
	now     func() time.Time
}

// cover is how an order's waiters are sure to be woken: a vouch, whose
// expiry the timer watches, or a subscription to the order's channel.
// Confirmations of one channel come in the order its commands were sent,
// on one connection, so counting them tells which SSUBSCRIBE is in force.
type cover struct {
	// subscribed: an SSUBSCRIBE was sent and no SUNSUBSCRIBE after it.
	subscribed bool
	// expect counts the SSUBSCRIBEs sent, got their confirmations;
	// unsubs the SUNSUBSCRIBEs not confirmed yet.
	expect, got, unsubs int
	// ready is closed once the latest SSUBSCRIBE is confirmed.
	ready chan struct{}
	timer *time.Timer
}

// trackedStarts holds the orders a process saw start (StartTracker) in two
// generations: cur takes new ones; when it is trackRetain old it becomes
// prev and the old prev is dropped whole, so expiry costs no scan.
type trackedStarts struct {
	cur, prev map[string]*trackedStart
	since     time.Time
}

type trackedStart struct {
	since    time.Time
	recorded bool   // the start was recorded after Track
	voided   bool   // the owner left before the end, or the link may have dropped
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
	// asks.
	noticed atomic.Pointer[[]byte]
	// early: the waiter may have read before its order's subscription
	// was in force, so the confirmation wakes it.
	early bool
}

var _ StartTracker = (*TerminalFeed)(nil)

// NewTerminalFeed opens the feed on the store's client and returns at
// once: the legacy channel's subscription is established in the
// background, and the order subscriptions as waiters come. Close releases
// them.
func (r *Redis) NewTerminalFeed() *TerminalFeed {
	f := &TerminalFeed{
		channel:  TerminalChannel(r.keys.prefix),
		prefix:   r.keys.prefix,
		log:      r.log,
		done:     make(chan struct{}),
		waiters:  map[string]map[*feedWaiter]struct{}{},
		covers:   map[string]*cover{},
		now:      time.Now,
		VouchFor: DefaultVouchFor,
	}
	f.shards = newShardConns(r.client, r.log, f.onOrderChannel)
	// Without a reachable Redis the SUBSCRIBE fails here; PubSub keeps
	// the channel and subscribes when its receive loop connects.
	f.ps = r.client.Subscribe(context.Background(), f.channel)
	go f.run(f.ps.ChannelWithSubscriptions(redis.WithChannelSize(feedBuffer)))
	return f
}

// Channel is the legacy Pub/Sub channel the feed listens on.
func (f *TerminalFeed) Channel() string { return f.channel }

// Subscriptions is how many times the legacy channel's subscription was
// confirmed: 0 before the first, +1 after each reconnect.
func (f *TerminalFeed) Subscriptions() int64 { return f.subscribed.Load() }

// OrderSubscriptions is how many order subscriptions (SSUBSCRIBE) the
// feed sent: one per waited order it could not vouch for.
func (f *TerminalFeed) OrderSubscriptions() int64 { return f.orderSubs.Load() }

func (f *TerminalFeed) run(in <-chan any) {
	defer close(f.done)
	for m := range in {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" || m.Channel != f.channel {
				continue
			}
			n := f.subscribed.Add(1)
			woken := f.resubscribed(n > 1)
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

// onOrderChannel handles what an order channel's connection received.
func (f *TerminalFeed) onOrderChannel(m any) {
	switch m := m.(type) {
	case *redis.Subscription:
		id, ok := orderOfChannel(f.prefix, m.Channel)
		if !ok {
			return
		}
		switch m.Kind {
		case "ssubscribe":
			f.confirmed(id)
		case "sunsubscribe":
			f.unsubscribed(id)
		}
	case *redis.Message:
		if id, state := parseNotice(m.Payload); id != "" {
			f.wakeOrder(id, state)
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

// watch registers w and covers its order; when that takes a
// subscription, it returns once the subscription is confirmed, or after
// subscribeWait (the confirmation wakes w then).
func (f *TerminalFeed) watch(orderID string) (*feedWaiter, <-chan struct{}, func()) {
	w := &feedWaiter{wake: make(chan struct{}, 1)}
	var ready chan struct{}
	f.mu.Lock()
	if !f.closed {
		set := f.waiters[orderID]
		if set == nil {
			set = map[*feedWaiter]struct{}{}
			f.waiters[orderID] = set
		}
		set[w] = struct{}{}
		c := f.coverLocked(orderID)
		if c.subscribed && c.got < c.expect {
			ready = c.ready
		}
	}
	f.mu.Unlock()
	var once sync.Once
	stop := func() { once.Do(func() { f.remove(orderID, w) }) }
	if ready != nil {
		t := time.NewTimer(subscribeWait)
		select {
		case <-ready:
		case <-t.C:
			f.mu.Lock()
			w.early = true
			f.mu.Unlock()
		}
		t.Stop()
	}
	return w, w.wake, stop
}

// coverLocked returns orderID's cover, made sure of: the vouch while it
// lasts (its timer subscribes when it ends), else a subscription.
func (f *TerminalFeed) coverLocked(orderID string) *cover {
	c := f.covers[orderID]
	if c == nil {
		c = &cover{}
		f.covers[orderID] = c
	}
	if c.subscribed {
		return c
	}
	if left := f.vouchLeftLocked(orderID); left > 0 {
		if c.timer == nil {
			c.timer = time.AfterFunc(left, func() { f.vouchEnded(orderID) })
		}
		return c
	}
	f.subscribeLocked(orderID, c, false)
	return c
}

// subscribeLocked subscribes to orderID's channel; with wakeAll, the
// confirmation wakes every waiter registered now (they may have read
// before it).
func (f *TerminalFeed) subscribeLocked(orderID string, c *cover, wakeAll bool) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.subscribed = true
	c.expect++
	c.ready = make(chan struct{})
	if wakeAll {
		for w := range f.waiters[orderID] {
			w.early = true
		}
	}
	f.orderSubs.Add(1)
	f.shards.subscribe(OrderChannel(f.prefix, orderID))
}

// vouchEnded covers orderID's waiters, if it still has some, by a
// subscription once its vouch ran out.
func (f *TerminalFeed) vouchEnded(orderID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.covers[orderID]; c != nil && !c.subscribed {
		c.timer = nil
	}
	f.uncoverLocked(orderID)
}

// confirmed counts a confirmation of orderID's subscription: the latest
// SSUBSCRIBE's opens Watch's wait and wakes the waiters that did not
// wait for it; any later one is a resubscription after a reconnect, and
// wakes every waiter.
func (f *TerminalFeed) confirmed(orderID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.covers[orderID]
	if c == nil {
		return
	}
	c.got++
	if c.got < c.expect {
		return
	}
	resubscribed := c.got > c.expect
	if resubscribed {
		c.got = c.expect
	}
	if c.ready != nil {
		select {
		case <-c.ready:
		default:
			close(c.ready)
		}
	}
	for w := range f.waiters[orderID] {
		if resubscribed || w.early {
			w.early = false
			w.notify()
		}
	}
}

// unsubscribed counts a confirmed SUNSUBSCRIBE of orderID's channel; the
// cover goes once nothing of it is pending.
func (f *TerminalFeed) unsubscribed(orderID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.covers[orderID]
	if c == nil {
		return
	}
	c.unsubs--
	f.dropCoverLocked(orderID, c)
}

func (f *TerminalFeed) dropCoverLocked(orderID string, c *cover) {
	if len(f.waiters[orderID]) == 0 && !c.subscribed && c.unsubs <= 0 && c.timer == nil {
		delete(f.covers, orderID)
	}
}

func (f *TerminalFeed) remove(orderID string, w *feedWaiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.waiters[orderID]
	delete(set, w)
	if len(set) > 0 {
		return
	}
	delete(f.waiters, orderID)
	c := f.covers[orderID]
	if c == nil {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.subscribed && !f.closed {
		c.subscribed = false
		c.unsubs++
		f.shards.unsubscribe(OrderChannel(f.prefix, orderID))
	}
	f.dropCoverLocked(orderID, c)
}

// UseLinkNotices tells the feed that the owners of the orders this
// process starts tell it of their end (Deliver, grain.NoticeTo): from
// now on Track vouches for them. Without it, every wait is covered by a
// subscription.
func (f *TerminalFeed) UseLinkNotices() { f.linked.Store(true) }

// Track implements StartTracker.
func (f *TerminalFeed) Track(orderID string) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || !f.linked.Load() {
		return func() {}
	}
	// Only Track adds, so rotating here bounds the memory.
	t := &f.starts
	now := f.now()
	if t.cur == nil || now.Sub(t.since) >= trackRetain {
		t.prev, t.cur, t.since = t.cur, map[string]*trackedStart{}, now
	}
	e := &trackedStart{since: now}
	t.cur[orderID] = e
	return func() {
		// After VoidVouches e is in no generation any more, and marking
		// it changes nothing.
		f.mu.Lock()
		e.recorded = true
		f.mu.Unlock()
	}
}

// vouchLeftLocked is how much longer orderID is vouched for: 0 when it is
// not.
func (f *TerminalFeed) vouchLeftLocked(orderID string) time.Duration {
	e := f.starts.get(orderID)
	switch {
	case e == nil || e.voided:
		return 0
	case e.record != nil:
		// Its end is known: whoever waits answers at once.
		return f.VouchFor
	case !e.recorded:
		return 0
	}
	return max(e.since.Add(f.VouchFor).Sub(f.now()), 0)
}

// Known implements StartTracker.
func (f *TerminalFeed) Known(orderID string) (*contracts.OrderState, bool) {
	f.mu.Lock()
	known := f.vouchLeftLocked(orderID) > 0
	var record []byte
	if e := f.starts.get(orderID); known && e != nil {
		record = e.record
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

// Deliver hands the feed a notice that came by another path than Redis:
// the owner's, over the cluster link (grain.ServeNotices). A terminal
// state wakes the order's waiters with it as the record its notice
// carried, as a notice on the order's channel does. A state that is not
// terminal says that the owner that recorded the start left before the
// end: the order is no longer vouched for, and its waiters are covered by
// a subscription. It never blocks on Redis and reads nothing.
func (f *TerminalFeed) Deliver(st *contracts.OrderState) {
	id := st.GetOrderId()
	if id == "" {
		return
	}
	f.delivered.Add(1)
	if !Terminal(st.GetStatus()) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if e := f.starts.get(id); e != nil {
			e.voided = true
		}
		f.uncoverLocked(id)
		return
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
	if err != nil {
		return
	}
	f.wakeOrder(id, raw)
}

// Delivered is how many notices Deliver was handed.
func (f *TerminalFeed) Delivered() int64 { return f.delivered.Load() }

// VoidVouches ends every vouch: a notice of the owners' may have been
// lost (the link to a member dropped). The waiters the vouches covered
// are covered by subscriptions, whose confirmations wake them to read.
func (f *TerminalFeed) VoidVouches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.voidVouchesLocked()
}

func (f *TerminalFeed) voidVouchesLocked() {
	f.starts.reset()
	for id := range f.waiters {
		f.uncoverLocked(id)
	}
}

// uncoverLocked covers orderID's waiters, if it has some and they relied
// on its vouch, by a subscription whose confirmation wakes them.
func (f *TerminalFeed) uncoverLocked(orderID string) {
	c := f.covers[orderID]
	if f.closed || c == nil || c.subscribed || len(f.waiters[orderID]) == 0 {
		return
	}
	f.subscribeLocked(orderID, c, true)
}

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
			e.voided = true
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

// resubscribed wakes every waiter once the legacy channel's subscription
// is (re)established; after a reconnect it also ends every vouch, since
// an older workflow's notice published meanwhile is gone.
func (f *TerminalFeed) resubscribed(again bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if again {
		f.voidVouchesLocked()
	}
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

// Close ends the subscriptions and waits for their fan-out to stop.
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
	for _, c := range f.covers {
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	f.covers = map[string]*cover{}
	f.starts.reset()
	f.mu.Unlock()
	err := errors.Join(f.ps.Close(), f.shards.close())
	<-f.done
	return err
}
