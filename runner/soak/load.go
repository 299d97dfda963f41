package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// ClientEvent is one call the client made and what it was told: the
// client's own log, which the checker holds against the stores.
type ClientEvent struct {
	Seq int64 `json:"seq"`
	// SentAtUnixMs and AtUnixMs bound the call: answers to overlapping
	// calls may come in either order.
	SentAtUnixMs int64  `json:"sentAtUnixMs"`
	AtUnixMs     int64  `json:"atUnixMs"`
	Op           string `json:"op"` // start, get, continue, rebuild
	API          string `json:"api"`
	Key          string `json:"key,omitempty"`
	// Body names the start request's body (cart/method/address), so a
	// reused key with a different body is visible.
	Body        string `json:"body,omitempty"`
	Attempt     int    `json:"attempt"`
	OrderID     string `json:"orderId,omitempty"`
	HTTPStatus  int    `json:"httpStatus"`
	Code        string `json:"code,omitempty"`
	Reason      string `json:"reason,omitempty"`
	OrderStatus string `json:"orderStatus,omitempty"`
	Err         string `json:"err,omitempty"`
	// Final: an answer the client stops retrying on (201, 200 or a 4xx).
	Final bool `json:"final"`
}

// clientLog is the concurrent client log plus the running counters the
// progress line prints.
type clientLog struct {
	mu     sync.Mutex
	events []ClientEvent
	seq    atomic.Int64
	// acks: idempotency key → order id, for every 201/200 to a start.
	acks map[string]string
	// live: acknowledged orders, for continue, rebuild and relocation.
	live   []string
	errs   map[string]int
	starts int
	// unanswered: keys that got no final answer before the deadline.
	unanswered []string
	// storeUnavailable: when each STORE_UNAVAILABLE answer came.
	storeUnavailable []time.Time
}

func newClientLog() *clientLog {
	return &clientLog{acks: map[string]string{}, errs: map[string]int{}}
}

func (l *clientLog) add(e ClientEvent) ClientEvent {
	e.Seq = l.seq.Add(1)
	e.AtUnixMs = time.Now().UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	if e.Op == "start" {
		l.starts++
		if e.HTTPStatus == 200 || e.HTTPStatus == 201 {
			if _, seen := l.acks[e.Key]; !seen && e.OrderID != "" {
				l.live = append(l.live, e.OrderID)
			}
			l.acks[e.Key] = e.OrderID
		}
	}
	if code := errCode(e); code != "" {
		l.errs[code]++
	}
	if e.Reason == "STORE_UNAVAILABLE" {
		l.storeUnavailable = append(l.storeUnavailable, time.Now())
	}
	return e
}

// errorsSentBetween counts the calls sent between from and to that were
// answered 5xx or not at all.
func (l *clientLog) errorsSentBetween(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.SentAtUnixMs >= from.UnixMilli() && e.SentAtUnixMs <= to.UnixMilli() && (e.Err != "" || e.HTTPStatus >= 500) {
			n++
		}
	}
	return n
}

// errCode is how an error answer is counted: transport, or status and
// reason (or code).
func errCode(e ClientEvent) string {
	switch {
	case e.Err != "":
		return "transport"
	case e.HTTPStatus >= 400:
		r := e.Reason
		if r == "" {
			r = e.Code
		}
		return fmt.Sprintf("%d %s", e.HTTPStatus, r)
	}
	return ""
}

func (l *clientLog) randomLive(r *rand.Rand) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.live) == 0 {
		return ""
	}
	// Recent orders are the likeliest to be still running.
	n := min(len(l.live), 50)
	return l.live[len(l.live)-1-r.IntN(n)]
}

func (l *clientLog) snapshot() (starts, acks int, errs map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs = make(map[string]int, len(l.errs))
	for k, v := range l.errs {
		errs[k] = v
	}
	return l.starts, len(l.acks), errs
}

func (l *clientLog) storeUnavailableBetween(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.storeUnavailable {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// firstCreatedAfter is, by API, when its first start sent at or after t
// was answered 201.
func (l *clientLog) firstCreatedAfter(t time.Time) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := t.UnixMilli()
	out := map[string]time.Time{}
	for _, e := range l.events {
		if e.Op != "start" || e.HTTPStatus != 201 || e.SentAtUnixMs < from {
			continue
		}
		if at, ok := out[e.API]; !ok || e.AtUnixMs < at.UnixMilli() {
			out[e.API] = time.UnixMilli(e.AtUnixMs)
		}
	}
	return out
}

func (l *clientLog) ackedOrders() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, id := range l.acks {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// load drives the mixed load with bounded concurrency.
type load struct {
	apis    []*client.API
	names   []string
	ids     seedIDs
	log     *clientLog
	runID   string
	keySeq  atomic.Int64
	retryBy time.Time // no retry after this
}

func (ld *load) key() string {
	return fmt.Sprintf("soak-%s-%d", ld.runID, ld.keySeq.Add(1))
}

// body picks a start body: carts whose stock runs out, with plenty, and
// without any; approving and declining methods.
func (ld *load) body(r *rand.Rand) *contracts.StartOrderReq {
	cart := ld.ids.CartLimited
	switch p := r.IntN(100); {
	case p < 10:
		cart = ld.ids.CartNoStock
	case p < 40:
		cart = ld.ids.CartAmple
	}
	method := ld.ids.MethodOK
	if r.IntN(100) < 15 {
		method = ld.ids.MethodDeclined
	}
	return &contracts.StartOrderReq{CartId: cart, ShippingAddressId: "addr-soak", PaymentMethodId: method}
}

func bodyName(req *contracts.StartOrderReq) string {
	return req.CartId + "/" + req.PaymentMethodId + "/" + req.ShippingAddressId
}

// run runs workers until stop is closed; each finishes its current key.
func (ld *load) run(ctx context.Context, workers int, stop <-chan struct{}, seed uint64) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed^0x5eed, uint64(w)+1))
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				ld.iteration(ctx, r)
			}
		}()
	}
	wg.Wait()
}

func (ld *load) iteration(ctx context.Context, r *rand.Rand) {
	api := r.IntN(len(ld.apis))
	switch p := r.IntN(100); {
	case p < 10:
		// The same key at once to both APIs.
		key, req := ld.key(), ld.body(r)
		req.IdempotencyKey = key
		var wg sync.WaitGroup
		for i := range ld.apis {
			wg.Add(1)
			go func() { defer wg.Done(); ld.startUntilFinal(ctx, i, req) }()
		}
		wg.Wait()
	case p < 16:
		// A reused key with a different body: 422 expected.
		key, req := ld.key(), ld.body(r)
		req.IdempotencyKey = key
		if id := ld.startUntilFinal(ctx, api, req); id != "" {
			other := &contracts.StartOrderReq{CartId: req.CartId, ShippingAddressId: "addr-soak-other", PaymentMethodId: req.PaymentMethodId, IdempotencyKey: key}
			ld.startUntilFinal(ctx, 1-api%2, other)
		}
	case p < 30:
		if id := ld.log.randomLive(r); id != "" {
			if r.IntN(2) == 0 {
				ld.call(ctx, "continue", api, id)
			} else {
				ld.call(ctx, "rebuild", api, id)
			}
		}
	default:
		req := ld.body(r)
		req.IdempotencyKey = ld.key()
		if id := ld.startUntilFinal(ctx, api, req); id != "" {
			// Watch it a little: the client's view of its statuses.
			for range 3 {
				time.Sleep(time.Duration(50+r.IntN(150)) * time.Millisecond)
				if st := ld.call(ctx, "get", r.IntN(len(ld.apis)), id); isTerminal(st) {
					break
				}
			}
		}
	}
}

func isTerminal(s string) bool {
	return s == contracts.OrderStatus_Confirmed.String() || s == contracts.OrderStatus_Failed.String()
}

// startUntilFinal sends the start until it gets a final answer (201, 200,
// a 4xx) or the retry deadline passes, alternating APIs after a failure.
// It returns the acknowledged order id, if any.
func (ld *load) startUntilFinal(ctx context.Context, api int, req *contracts.StartOrderReq) string {
	wait := retry.Backoff(100*time.Millisecond, 2*time.Second)
	for attempt := 1; ; attempt++ {
		e := ld.startAttempt(ctx, ld.apis[api], ld.names[api], req, attempt, 15*time.Second)
		if e.Final {
			return e.OrderID
		}
		if time.Now().After(ld.retryBy) || ctx.Err() != nil {
			ld.log.mu.Lock()
			ld.log.unanswered = append(ld.log.unanswered, req.IdempotencyKey)
			ld.log.mu.Unlock()
			return ""
		}
		time.Sleep(wait.NextBackOff())
		api = (api + 1) % len(ld.apis)
	}
}

// startAttempt sends the start once through api, logs it and returns
// what it was told.
func (ld *load) startAttempt(ctx context.Context, api *client.API, name string, req *contracts.StartOrderReq, attempt int, timeout time.Duration) ClientEvent {
	sent := time.Now().UnixMilli()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	res, rep, err := api.StartOrder(cctx, req)
	cancel()
	e := ClientEvent{SentAtUnixMs: sent, Op: "start", API: name, Key: req.IdempotencyKey, Body: bodyName(req), Attempt: attempt, HTTPStatus: rep.Status}
	fill(&e, rep, err)
	if res != nil {
		e.OrderID = res.GetOrderId()
		e.OrderStatus = res.GetState().GetStatus().String()
	}
	e.Final = err == nil && (rep.Status == 200 || rep.Status == 201 || (rep.Status >= 400 && rep.Status < 500))
	return ld.log.add(e)
}

// call is one GET, continue or rebuild; it returns the status answered.
func (ld *load) call(ctx context.Context, op string, api int, id string) string {
	sent := time.Now().UnixMilli()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var st *contracts.OrderState
	var rep client.Reply
	var err error
	switch op {
	case "get":
		st, rep, err = ld.apis[api].GetOrder(cctx, id)
	case "continue":
		st, rep, err = ld.apis[api].Continue(cctx, id)
	default:
		st, rep, err = ld.apis[api].Rebuild(cctx, id)
	}
	e := ClientEvent{SentAtUnixMs: sent, Op: op, API: ld.names[api], OrderID: id, HTTPStatus: rep.Status, Attempt: 1}
	fill(&e, rep, err)
	if st != nil {
		e.OrderStatus = st.GetStatus().String()
	}
	e.Final = err == nil && rep.Status > 0 && rep.Status < 500
	ld.log.add(e)
	return e.OrderStatus
}

func fill(e *ClientEvent, rep client.Reply, err error) {
	if err != nil {
		e.Err = err.Error()
		if errors.Is(err, client.ErrProtocol) {
			e.Err = "protocol: " + e.Err
		}
	}
	if rep.Error != nil {
		e.Code, e.Reason = rep.Error.Code, rep.Error.Reason
	}
}

// reasonFromBetween counts the answers from api with error reason
// reason to calls sent between from and to.
func (l *clientLog) reasonFromBetween(api, reason string, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.API == api && e.Reason == reason && e.SentAtUnixMs >= from.UnixMilli() && e.SentAtUnixMs <= to.UnixMilli() {
			n++
		}
	}
	return n
}
