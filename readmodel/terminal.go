package readmodel

import (
	"strconv"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// Terminal notices: how a process learns that an order's record turned
// terminal without reading the store in a loop.
//
// The notify side is in the writes themselves. Every write of this store
// that stores a terminal record (Confirmed or Failed) — Put, and the
// projected append (RedisCommitter) — announces the order id in the same
// atomic step, after the record is written: on Redis an SPUBLISH of the
// order id and the record on the order's own channel (OrderChannel)
// inside the write's script. A write the version guard refuses announces
// nothing, and a write of a non-terminal record announces nothing.
//
// The subscribe side is a TerminalWatcher: one per process, which
// subscribes to the channels of the orders it has waiters for and fans
// the notices out in memory to them.

// terminalChannelSuffix follows the key prefix in the channel's name.
const terminalChannelSuffix = "terminal"

// TerminalChannel is the Pub/Sub channel on which builds before the
// order channels (OrderChannel) announced every terminal record of the
// store under key prefix (empty: DefaultKeyPrefix); each message names
// one order and carries the record's state as written (noticeMessage).
// TerminalFeed still listens on it, for a rolling upgrade's older
// workflows. Channels are not keys, so it shares the prefix without
// meeting a record.
func TerminalChannel(prefix string) string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return prefix + terminalChannelSuffix
}

// TerminalWatcher wakes the waiters of an order when its record may have
// turned terminal. A wake is a hint to read the record again (Store.Get),
// never a state: the record is the truth.
//
// A waiter must register, then read, then wait: Watch, Get, and only if
// the record is not terminal yet, wait for a wake and Get again. A
// terminal write that lands after Watch returned wakes the waiter, so
// nothing falls between the read and the wait.
//
// Implementations are safe for concurrent use; Watch and the stop
// function never touch the store (no read, no write).
type TerminalWatcher interface {
	// Watch registers a waiter for orderID and returns its wake channel
	// and the function that unregisters it, which the waiter must call
	// when it stops waiting (calling it again does nothing).
	//
	// The contract of the wake channel:
	//
	//   - At least once: every terminal write of orderID that lands after
	//     Watch returned, up to stop, is followed by a wake. Where the
	//     notices travel over a connection that can drop (Redis Pub/Sub
	//     is at most once: a notice published while the subscriber is
	//     disconnected is gone), the watcher makes up for it: each time
	//     its subscription is (re)established it wakes every registered
	//     waiter once, and those re-read. So a terminal write made while
	//     the watcher was disconnected is seen at the re-read that
	//     follows the reconnect.
	//   - Ordered after the write: when a wake that a write caused
	//     arrives, a Get returns that write's record or a newer one.
	//   - Spurious wakes are allowed: a reconnect, a repeated terminal
	//     write (a rebuild at the same version), or another waiter's
	//     write sharing a notice may wake a waiter whose record did not
	//     change. The waiter re-reads and, if it is not terminal, waits
	//     again.
	//   - Coalesced: the channel holds at most one pending wake, and a
	//     wake never blocks the watcher. Several wakes before the waiter
	//     reads are one; the re-read covers them all.
	//   - No ordering between orders, and nothing is ever closed: after
	//     stop the channel gets no more wakes.
	Watch(orderID string) (wake <-chan struct{}, stop func())
}

// TerminalRecordWatcher is a TerminalWatcher whose notices carry the
// record they announce, so that a waiter woken by one has its answer
// without reading the store again.
type TerminalRecordWatcher interface {
	TerminalWatcher
	// WatchRecord is Watch (same wake channel, same contract, same stop)
	// with record besides: after a wake it returns the terminal state the
	// latest notice of orderID carried since the watch began, and true.
	// That state is the record a terminal write stored, and a terminal
	// record is final, so it may be answered as read. It returns false
	// when no notice carried one (the wake came from a resubscription, or
	// from a writer that sends a bare order id): the waiter then reads
	// the record, as with Watch. record never touches the store.
	WatchRecord(orderID string) (wake <-chan struct{}, record func() (*contracts.OrderState, bool), stop func())
}

// StartTracker is a TerminalRecordWatcher that vouches for orders its
// process saw start, so that a wait right after a start need not read the
// record to learn what the process already knows: the order is not
// terminal, or the notice that made it terminal has come.
//
// It holds because notices are ordered after the writes they announce and
// the subscription is in force: a start recorded after Track returned
// makes the order non-terminal at a moment after Track, so its terminal
// write, if any, lands later and its notice reaches the tracker. A lost
// subscription voids every vouch (its notices may be gone), and a vouch
// is kept only for a bounded time; either way Known answers false and the
// waiter reads, as with WatchRecord alone.
//
// Implementations are safe for concurrent use; nothing here touches a
// store.
type StartTracker interface {
	TerminalRecordWatcher
	// Track begins tracking orderID before a call that may record its
	// start, and returns what the caller calls once that call has
	// recorded it (and never otherwise: a start found already recorded
	// may be of an order that turned terminal before Track). Until then,
	// and when the tracker's subscription is not in force at Track, the
	// order is not vouched for.
	Track(orderID string) (recorded func())
	// Known is called by a waiter after WatchRecord registered it. It
	// returns the terminal record a notice carried since Track, and true;
	// or nil and true when orderID's start was recorded after Track and
	// no notice has come since (the order is not terminal, and a terminal
	// write wakes the waiter); or false when the tracker cannot vouch for
	// it, and the waiter reads the record.
	Known(orderID string) (record *contracts.OrderState, known bool)
}

// noticeMarker starts a notice that carries the record. A bare order id
// (the earlier form, still accepted) never starts with it.
const noticeMarker = "\x00"

// noticeMessage is the Pub/Sub message announcing orderID's terminal
// record: the marker, the id's length, ':', the id, then the state as
// stored (protobuf binary), so that a waiter can answer from the notice
// instead of reading the record again.
func noticeMessage(orderID string, state []byte) string {
	return noticeMarker + strconv.Itoa(len(orderID)) + ":" + orderID + string(state)
}

// parseNotice splits a notice into its order id and the state it carries
// (nil: none, a bare order id).
func parseNotice(payload string) (orderID string, state []byte) {
	rest, ok := strings.CutPrefix(payload, noticeMarker)
	if !ok {
		return payload, nil
	}
	n, rest, ok := strings.Cut(rest, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return "", nil
	}
	return rest[:size], []byte(rest[size:])
}
