package edge

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Admission control (issue 26, point 1). Each public order route belongs
// to one route kind, and each kind has a fixed in-flight budget: a request
// is admitted only if its kind has a free slot at the moment it arrives
// (try-acquire, no queue, no wait), and holds the slot until its handler
// returns. Everything else is answered at once 503 UNAVAILABLE, reason
// OVERLOADED, with a jittered Retry-After of 1–3 s (httpError's mapping of
// ErrOverloaded). The check is the public engine's first middleware: a shed
// request costs no request id lookup beyond its header, no span, no body
// read and no store call, so that shedding stays cheap exactly when the
// process is busiest.
//
// The rule behind fixed budgets: a process that has N requests of a kind
// in flight serves each of them in about N / throughput (Little's law), so
// a budget bounds the latency of what is admitted instead of letting a
// burst queue up in goroutines, Redis pools and grain mailboxes until
// every request misses its deadline. Waits (GET ?waitFor=terminal) hold
// their slot for up to MaxWaitMs but cost no store connection while they
// wait, so they get a budget of their own, and waiting clients never
// crowd out starts. /healthz, /readyz, unknown routes, wrong methods
// (405) and the whole admin listener are never shed: a probe or an
// operator must get through an overload, and a request no handler takes
// costs nothing worth a slot.

// RouteKind names an admission budget; it is the LabelRouteKind of the
// shed metrics.
type RouteKind string

const (
	// RouteKindStart is POST /orders.
	RouteKindStart RouteKind = "start"
	// RouteKindCommand is POST /orders/{id}/continue and
	// /rebuild-projection: grain calls on an existing order.
	RouteKindCommand RouteKind = "command"
	// RouteKindRead is GET /orders/{id} without waitFor: one read-model
	// read.
	RouteKindRead RouteKind = "read"
	// RouteKindWait is GET /orders/{id}?waitFor=...: a bounded wait.
	RouteKindWait RouteKind = "wait"
)

// routeKinds lists the kinds in their index order (budgets, metrics).
var routeKinds = [...]RouteKind{RouteKindStart, RouteKindCommand, RouteKindRead, RouteKindWait}

const (
	kindStart = iota
	kindCommand
	kindRead
	kindWait
	numKinds
)

// Admission is the in-flight budget of each route kind of one API process.
// Zero takes the kind's default (DefaultAdmission); a negative budget
// turns admission off for the kind (unbounded).
type Admission struct {
	Starts   int
	Commands int
	Reads    int
	Waits    int
}

// DefaultAdmission suits one API process on a 2-core machine whose
// workflow members confirm a few hundred orders a second: about 250
// starts/s per API at 100–150 ms each is 25–40 in flight. 64 leaves room
// for a closed loop of 64 clients (the bench's) that happens to land on
// one API, and still keeps a burst's admitted starts at a few hundred
// milliseconds, far under the request timeout and the lease. Commands share the owners' mailboxes with the starts'
// continuations, so they get fewer. A read is one Redis round trip; a
// wait holds no connection at all while it waits.
var DefaultAdmission = Admission{Starts: 64, Commands: 16, Reads: 128, Waits: 512}

func (a Admission) limits() [numKinds]int64 {
	pick := func(v, def int) int64 {
		switch {
		case v == 0:
			return int64(def)
		case v < 0:
			return -1
		}
		return int64(v)
	}
	d := DefaultAdmission
	return [numKinds]int64{
		kindStart:   pick(a.Starts, d.Starts),
		kindCommand: pick(a.Commands, d.Commands),
		kindRead:    pick(a.Reads, d.Reads),
		kindWait:    pick(a.Waits, d.Waits),
	}
}

// ErrOverloaded: this API process has no room for the request right now
// (its route kind's in-flight budget is spent); nothing was done.
var ErrOverloaded = errkind.New(errkind.Overloaded, "edge: overloaded")

// budget is one route kind's in-flight count, bounded by limit (-1:
// unbounded).
type budget struct {
	limit int64
	n     atomic.Int64
}

// tryAcquire takes a slot if one is free; it never waits. The
// compare-and-swap loop keeps the count at or below limit at every
// instant, so the budget is never exceeded, not even briefly.
func (b *budget) tryAcquire() bool {
	if b.limit < 0 {
		b.n.Add(1)
		return true
	}
	for {
		n := b.n.Load()
		if n >= b.limit {
			return false
		}
		if b.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (b *budget) release() { b.n.Add(-1) }

// admission holds the process's budgets.
type admission struct {
	budgets [numKinds]budget
	// lastLog is when a shed was last logged (unix nanoseconds): at most
	// one line a second, so that shedding does not turn into logging.
	lastLog atomic.Int64
	shedLog [numKinds]atomic.Int64 // sheds since the last line
}

func newAdmission(a Admission) *admission {
	ad := &admission{}
	for i, l := range a.limits() {
		ad.budgets[i].limit = l
	}
	return ad
}

// InFlight returns the requests of kind k in flight now, for tests and
// metrics.
func (s *Server) InFlight(k RouteKind) int {
	for i, rk := range routeKinds {
		if rk == k {
			return int(s.admission.budgets[i].n.Load())
		}
	}
	return 0
}

// routeKindOf tells a request's route kind from gin's matched route
// template, -1 for a route that is never shed. A request that matched no
// route, by path (404) or by method (405), has no template and so is
// never shed: a wrong method on an order path is not a read.
func routeKindOf(c *gin.Context) int {
	r := c.Request
	switch c.FullPath() {
	case "/orders":
		if r.Method == http.MethodPost {
			return kindStart
		}
	case "/orders/:orderId":
		if r.URL.RawQuery != "" && r.URL.Query().Has(QueryWaitFor) {
			return kindWait
		}
		return kindRead
	case "/orders/:orderId/continue", "/orders/:orderId/rebuild-projection":
		return kindCommand
	}
	return -1
}

// admit is the public engine's first middleware (see the block comment
// above).
func (s *Server) admit(c *gin.Context) {
	k := routeKindOf(c)
	if k < 0 {
		c.Next()
		return
	}
	b := &s.admission.budgets[k]
	if b.tryAcquire() {
		defer b.release()
		c.Next()
		return
	}
	s.shed(c, k)
	c.Abort()
}

// shed answers a request its budget has no room for, through httpError
// like every other error reply, and counts it: in the shed metrics, in the
// HTTP request metrics under its route, and by reason (writeError). It
// writes no access log line; one summary line a second at most says that
// the process sheds.
func (s *Server) shed(c *gin.Context, k int) {
	start := time.Now()
	w := c.Writer
	// Every reply echoes a request id; a shed one keeps the client's or
	// gets a fresh one, without a context of its own.
	id := c.Request.Header.Get(HeaderRequestID)
	if !saneRequestID(id) {
		id = uuid.NewString()
	}
	w.Header().Set(HeaderRequestID, id)
	status, body := httpError(ErrOverloaded)
	s.writeError(w, status, body)
	d := time.Since(start)
	s.metrics.shedAnswer(k, d)
	s.metrics.observe(c.FullPath(), c.Request.Method, status, d)
	s.admission.shedLog[k].Add(1)
	s.logShedding(start)
}

// logShedding writes at most one line a second saying how many requests
// of each kind were shed since the previous line.
func (s *Server) logShedding(now time.Time) {
	last := s.admission.lastLog.Load()
	if now.UnixNano()-last < int64(time.Second) || !s.admission.lastLog.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	attrs := make([]any, 0, numKinds)
	for i, rk := range routeKinds {
		attrs = append(attrs, slog.Int64(string(rk), s.admission.shedLog[i].Swap(0)))
	}
	s.log.Warn("overloaded: shedding requests beyond the in-flight budgets", slog.Group("shed", attrs...))
}
