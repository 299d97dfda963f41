package edge

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// The bounded wait of GET /orders/{orderId}: a client that wants the
// outcome asks once instead of polling.
//
//	GET /orders/{orderId}?waitFor=terminal&timeoutMs=N     0 <= N <= MaxWaitMs
//
// It answers as soon as the read model shows the order terminal (Confirmed
// or Failed), or with the order's state when N milliseconds have passed;
// both are 200 GetOrderStateRes, told apart by the X-Wait header: reached
// (the state is terminal) or timeout (it is not: the time ran out, or the
// server began shutting down). An unknown order is the plain GET's 404 at
// once: the wait does not wait for an order to appear, since an order
// appears only through a POST the client has already had answered. Bad
// parameters are 400 INVALID_ARGUMENT naming the field (waitFor or
// timeoutMs); timeoutMs without waitFor is one, so that a typo is never a
// silent plain GET.
//
// Like the plain GET it reads the read model only and has no side effect:
// no grain call, no write. It holds no store connection while it waits: it
// registers with the process's TerminalWatcher (which subscribes to the
// order's notices on a connection shared by the whole process), reads
// once, and reads again only when woken by a notice that does not carry
// the terminal record itself (readmodel.TerminalRecordWatcher). A wait for
// an order whose start this process recorded does not even read once: the
// watcher vouches that it is not terminal, or hands over the record the
// owner's terminal notice carried (readmodel.StartTracker). So the usual
// wait, right after its POST, reads nothing and subscribes to nothing; any
// other reads once.
const (
	QueryWaitFor    = "waitFor"
	QueryTimeoutMs  = "timeoutMs"
	WaitForTerminal = "terminal"
	// MaxWaitMs bounds timeoutMs: 30 s.
	MaxWaitMs = 30_000
	// HeaderWait is set on every 200 of a wait: WaitReached or
	// WaitTimeout.
	HeaderWait  = "X-Wait"
	WaitReached = "reached"
	WaitTimeout = "timeout"
)

// TerminalWatcher wakes the waits of an order when its read-model record
// may have turned terminal (readmodel.TerminalWatcher: register, read,
// wait, re-read on each wake; wakes may be spurious, never lost).
type TerminalWatcher interface {
	// Watch registers a waiter for orderID; stop unregisters it. Neither
	// touches a store.
	Watch(orderID string) (wake <-chan struct{}, stop func())
}

// parseWait reads the wait parameters: ok=false for a plain GET.
func parseWait(r *http.Request) (timeout time.Duration, ok bool, err error) {
	q := r.URL.Query()
	waitFor, hasWait := q[QueryWaitFor]
	ms, hasTimeout := q[QueryTimeoutMs]
	switch {
	case !hasWait && !hasTimeout:
		return 0, false, nil
	case !hasWait:
		return 0, false, invalidField(QueryTimeoutMs, "is only allowed with %s=%s", QueryWaitFor, WaitForTerminal)
	case len(waitFor) != 1:
		return 0, false, invalidField(QueryWaitFor, "must be given once")
	case waitFor[0] != WaitForTerminal:
		return 0, false, invalidField(QueryWaitFor, "must be %q", WaitForTerminal)
	case !hasTimeout:
		return 0, false, invalidField(QueryTimeoutMs, "is required with %s=%s", QueryWaitFor, WaitForTerminal)
	case len(ms) != 1:
		return 0, false, invalidField(QueryTimeoutMs, "must be given once")
	}
	n, err := parseMillis(ms[0])
	if err != nil {
		return 0, false, err
	}
	return time.Duration(n) * time.Millisecond, true, nil
}

// parseMillis accepts decimal digits only (no sign, no spaces, no
// exponent) for a value in 0..MaxWaitMs.
func parseMillis(s string) (int, error) {
	bad := invalidField(QueryTimeoutMs, "must be an integer from 0 to %d (milliseconds)", MaxWaitMs)
	if s == "" || len(s) > len(strconv.Itoa(MaxWaitMs)) {
		return 0, bad
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, bad
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxWaitMs {
		return 0, bad
	}
	return n, nil
}

// waitOrder serves a wait (the block comment above): register, read, then
// wait for a wake, the deadline, the client leaving or the server
// stopping, re-reading on each wake. A read that fails mid-wait (a store
// blip, the record being rebuilt) is not the answer: the wait goes on and
// the read at its end decides.
func (s *Server) waitOrder(w http.ResponseWriter, r *http.Request, id string, timeout time.Duration) {
	if s.cfg.Terminal == nil {
		s.fail(w, r, invalidField(QueryWaitFor, "waiting is not enabled on this server"))
		return
	}
	var (
		wake   <-chan struct{}
		stop   func()
		record func() (*contracts.OrderState, bool)
	)
	if rw, ok := s.cfg.Terminal.(readmodel.TerminalRecordWatcher); ok {
		wake, record, stop = rw.WatchRecord(id)
	} else {
		wake, stop = s.cfg.Terminal.Watch(id)
	}
	defer stop()
	var (
		st    *contracts.OrderState
		known bool
	)
	if s.tracker != nil {
		st, known = s.tracker.Known(id)
	}
	if !known {
		var err error
		if st, err = s.readOrder(r, id); err != nil {
			s.fail(w, r, fmt.Errorf("read order %s: %w", id, err))
			return
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !readmodel.Terminal(st.GetStatus()) {
		select {
		case <-wake:
			if record != nil {
				// The notice carried the terminal record: that is the
				// answer, with no second read.
				if next, ok := record(); ok {
					st = next
					continue
				}
			}
			next, err := s.readOrder(r, id)
			if err != nil {
				s.log.DebugContext(r.Context(), "re-read of a waited order failed; waiting on", slog.String("order", id), slog.Any("error", err))
				continue
			}
			st = next
		case <-deadline.C:
			s.endWait(w, r, id, known)
			return
		case <-s.waits.stopping():
			s.endWait(w, r, id, known)
			return
		case <-r.Context().Done():
			s.fail(w, r, fmt.Errorf("wait for order %s: %w", id, r.Context().Err()))
			return
		}
	}
	s.answerWait(w, r, st, known)
}

// endWait answers a wait that ran out with the state read now.
func (s *Server) endWait(w http.ResponseWriter, r *http.Request, id string, vouched bool) {
	st, err := s.readOrder(r, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("read order %s: %w", id, err))
		return
	}
	s.answerWait(w, r, st, vouched)
}

// answerWait answers a wait with st; vouched says whether it skipped its
// first read (MetricWaits).
func (s *Server) answerWait(w http.ResponseWriter, r *http.Request, st *contracts.OrderState, vouched bool) {
	outcome := WaitTimeout
	reached := readmodel.Terminal(st.GetStatus())
	if reached {
		outcome = WaitReached
	}
	s.metrics.waited(reached, vouched)
	w.Header().Set(HeaderWait, outcome)
	s.writeMessage(w, r, http.StatusOK, &contracts.GetOrderStateRes{State: st})
}

// readOrder is one read-model read, bounded like any request's work.
func (s *Server) readOrder(r *http.Request, id string) (*contracts.OrderState, error) {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, _, err := s.cfg.ReadModel.Get(ctx, id)
	return st, err
}

// waitGate ends the waits in flight when the server starts shutting down,
// so that Shutdown does not sit out their timeouts: each answers at once
// with the order's state.
type waitGate struct {
	init, closed sync.Once
	ch           chan struct{}
}

func (g *waitGate) stopping() <-chan struct{} { return g.channel() }

func (g *waitGate) channel() chan struct{} {
	g.init.Do(func() { g.ch = make(chan struct{}) })
	return g.ch
}

// end is registered with the public http.Server's shutdown hooks.
func (g *waitGate) end() {
	ch := g.channel()
	g.closed.Do(func() { close(ch) })
}
