package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// Order paths of the mix.
const (
	pathSuccess   = "success"
	pathInventory = "inventory-failure"
	pathPayment   = "payment-failure"
)

type loadConfig struct {
	APIs        []string
	Concurrency int
	// Poll is the pause before asking again after a failed wait, and the
	// GET interval against an API without the wait (an older binary).
	Poll time.Duration
	// PollTimeout bounds an order from its POST to its terminal status.
	PollTimeout  time.Duration
	RunID        string
	IDs          seedIDs
	InventoryPct int
	PaymentPct   int
}

// orderResult is one order as the load generator saw it. Times are from
// the start of the load phase.
type orderResult struct {
	OrderID string
	Path    string
	API     int
	// Start is when the order was due: its scheduled time in the open
	// loop, its POST in the closed loop.
	Start time.Duration
	// StartLag is how late the POST was sent after it was due (open loop;
	// 0 in the closed loop).
	StartLag time.Duration
	// StartLat is due → 201 Created received (the POST /orders latency,
	// plus the start lag in the open loop).
	StartLat time.Duration
	// E2E is due → terminal status first seen by a GET.
	E2E time.Duration
	// Waits counts the bounded waits (GET ?waitFor=terminal) the order
	// took; Polls the plain GETs, which only an API without the wait
	// (an older binary) makes necessary: 0 against this one.
	Waits  int
	Polls  int
	Status string
	Err    string
}

func (r orderResult) terminal() bool {
	return r.Err == "" && (r.Status == "Confirmed" || r.Status == "Failed")
}

type loadResult struct {
	Phase   string
	Results []orderResult
	// Elapsed is load start → last order finished.
	Elapsed time.Duration
	Waits   int64
	Polls   int64
}

func (l loadResult) errors() int {
	n := 0
	for _, r := range l.Results {
		if r.Err != "" {
			n++
		}
	}
	return n
}

func (l loadResult) firstError() string {
	for _, r := range l.Results {
		if r.Err != "" {
			return r.Err
		}
	}
	return ""
}

type load struct {
	cfg    loadConfig
	client *http.Client
	seq    atomic.Int64 // order number across phases: idempotency keys stay fresh
	// wait is what the APIs answered to the first GET ?waitFor=terminal
	// (waitUnknown until then): an API without the wait (an older binary)
	// is detected once and then polled with plain GETs.
	wait atomic.Int32
	// peer, when set, runs each order against a peer system instead of
	// the APIs (peers.go): the same mix, phases and latency method.
	peer func(ctx context.Context, l *load, n int64, phaseStart, scheduled time.Time) orderResult
}

// What the load knows of the APIs' bounded wait.
const (
	waitUnknown int32 = iota
	waitSupported
	waitUnsupported
)

// waitMode names the GET mode for the report.
func (l *load) waitMode() string {
	switch l.wait.Load() {
	case waitSupported:
		return "wait"
	case waitUnsupported:
		return "poll"
	}
	return "unknown"
}

func newLoad(cfg loadConfig) *load {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * cfg.Concurrency,
		MaxIdleConnsPerHost: 2 * cfg.Concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	// A wait is held up to client.MaxWait by the API itself.
	return &load{cfg: cfg, client: &http.Client{Transport: tr, Timeout: client.MaxWait + 10*time.Second}}
}

// pathOf spreads the failure paths evenly: 37 is coprime to 100, so every
// block of 100 consecutive orders holds exactly the configured percentages.
func (l *load) pathOf(n int64) string {
	k := int((n * 37) % 100)
	switch {
	case k < l.cfg.InventoryPct:
		return pathInventory
	case k < l.cfg.InventoryPct+l.cfg.PaymentPct:
		return pathPayment
	default:
		return pathSuccess
	}
}

// progress says whether a load phase reports its progress as it runs.
type progress bool

const (
	quiet          progress = false
	reportProgress progress = true
)

// run drives Concurrency workers, each with one order in flight: POST, then
// one bounded wait for the outcome (GET ?waitFor=terminal), repeated only
// if it times out. It stops starting orders
// after duration (when orders is 0) or after orders orders, and returns
// once every started order has finished.
func (l *load) run(ctx context.Context, phase string, duration time.Duration, orders int, report progress) loadResult {
	start := time.Now()
	var started, done, terminal, errs atomic.Int64
	var polls, waits atomic.Int64
	deadline := start.Add(duration)
	var mu sync.Mutex
	var all []orderResult
	var wg sync.WaitGroup
	for w := 0; w < l.cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []orderResult
			for ctx.Err() == nil {
				if orders > 0 {
					if started.Add(1) > int64(orders) {
						break
					}
				} else {
					if time.Now().After(deadline) {
						break
					}
					started.Add(1)
				}
				n := l.seq.Add(1)
				r := l.one(ctx, n, start, time.Time{})
				polls.Add(int64(r.Polls))
				waits.Add(int64(r.Waits))
				done.Add(1)
				if r.terminal() {
					terminal.Add(1)
				} else {
					errs.Add(1)
				}
				mine = append(mine, r)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if report == quiet {
			return
		}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-stopProgress:
				return
			case now := <-t.C:
				term := terminal.Load()
				st := started.Load()
				if orders > 0 && st > int64(orders) {
					st = int64(orders)
				}
				logf("%s %5.1fs started=%d terminal=%d (%d/s) in-flight=%d errors=%d",
					phase, now.Sub(start).Seconds(), st, term, term-last, st-done.Load(), errs.Load())
				last = term
			}
		}
	}()
	wg.Wait()
	close(stopProgress)
	<-progressDone
	return loadResult{Phase: phase, Results: all, Elapsed: time.Since(start), Polls: polls.Load(), Waits: waits.Load()}
}

type startBody struct {
	CartID            string `json:"cartId"`
	ShippingAddressID string `json:"shippingAddressId"`
	PaymentMethodID   string `json:"paymentMethodId"`
	IdempotencyKey    string `json:"idempotencyKey"`
}

// orderReply reads only what the load needs from StartOrderRes and
// GetOrderStateRes.
type orderReply struct {
	OrderID string `json:"orderId"`
	State   struct {
		OrderID string `json:"orderId"`
		Status  string `json:"status"`
	} `json:"state"`
}

// one runs order n: POST, then waits for its outcome. Latencies are taken
// from scheduled, the time the order was due to start (the open loop's
// timeline), or from the POST when scheduled is zero (the closed loop,
// where a start is never due before the worker is free).
func (l *load) one(ctx context.Context, n int64, phaseStart, scheduled time.Time) orderResult {
	if l.peer != nil {
		return l.peer(ctx, l, n, phaseStart, scheduled)
	}
	path, body := l.startRequest(n)
	api := int(n % int64(len(l.cfg.APIs)))
	base := l.cfg.APIs[api]
	b, _ := json.Marshal(body)
	sent := time.Now()
	t0 := scheduled
	if t0.IsZero() {
		t0 = sent
	}
	r := orderResult{Path: path, API: api, Start: t0.Sub(phaseStart), StartLag: sent.Sub(t0)}
	code, _, rep, err := l.do(ctx, http.MethodPost, base+"/orders", b)
	r.StartLat = time.Since(t0)
	if err != nil {
		r.Err = "POST /orders: " + err.Error()
		return r
	}
	if code != http.StatusCreated {
		r.Err = fmt.Sprintf("POST /orders: status %d", code)
		return r
	}
	r.Status = rep.State.Status
	id := rep.OrderID
	r.OrderID = id
	// The order's time runs from its POST: a start the generator sent
	// late is not cut short for it.
	limit := sent.Add(l.cfg.PollTimeout)
	pause := false
	for !r.terminal() {
		left := time.Until(limit)
		if left <= 0 {
			r.Err = fmt.Sprintf("order %s not terminal after %s (last %q)", id, l.cfg.PollTimeout, r.Status)
			return r
		}
		if pause {
			select {
			case <-ctx.Done():
				r.Err = ctx.Err().Error()
				return r
			case <-time.After(l.cfg.Poll):
			}
		}
		mode := l.wait.Load()
		url := base + "/orders/" + id
		if mode != waitUnsupported {
			url += fmt.Sprintf("?waitFor=terminal&timeoutMs=%d", min(left, client.MaxWait).Milliseconds())
		}
		code, h, rep, err := l.do(ctx, http.MethodGet, url, nil)
		if ctx.Err() != nil {
			r.Err = ctx.Err().Error()
			return r
		}
		w := h.Get(client.HeaderWait)
		waited := w == client.WaitReached || w == client.WaitTimeout
		switch {
		case mode == waitUnsupported:
			r.Polls++
			pause = true
			if err != nil || code != http.StatusOK {
				continue
			}
		case err == nil && waited && code == http.StatusOK:
			l.wait.CompareAndSwap(waitUnknown, waitSupported)
			r.Waits++
			pause = false
		case err == nil && !waited && (code == http.StatusOK || (code == http.StatusBadRequest && mode == waitUnknown)):
			// An API without the wait: an older one ignores the query
			// and answers plainly, a current one built without the
			// waiter refuses it (400 naming waitFor). Either way it is
			// polled from now on, and this GET counts as a poll.
			l.wait.CompareAndSwap(waitUnknown, waitUnsupported)
			r.Polls++
			pause = code == http.StatusOK
			if code != http.StatusOK {
				continue
			}
		default:
			// A transient miss is retried, after a pause, until the
			// order's time is up.
			r.Waits++
			pause = true
			continue
		}
		r.Status = rep.State.Status
	}
	r.E2E = time.Since(t0)
	return r
}

// startRequest is order n's path of the mix and its StartOrder body.
func (l *load) startRequest(n int64) (string, startBody) {
	path := l.pathOf(n)
	body := startBody{ShippingAddressID: "addr-bench", IdempotencyKey: fmt.Sprintf("bench-%s-%d", l.cfg.RunID, n)}
	switch path {
	case pathInventory:
		body.CartID, body.PaymentMethodID = l.cfg.IDs.CartNoStock, l.cfg.IDs.MethodOK
	case pathPayment:
		body.CartID, body.PaymentMethodID = l.cfg.IDs.CartOK, l.cfg.IDs.MethodDeclined
	default:
		body.CartID, body.PaymentMethodID = l.cfg.IDs.CartOK, l.cfg.IDs.MethodOK
	}
	return path, body
}

func (l *load) do(ctx context.Context, method, url string, body []byte) (int, http.Header, orderReply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, orderReply{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, nil, orderReply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, resp.Header, orderReply{}, err
	}
	var rep orderReply
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, &rep); err != nil {
			return resp.StatusCode, resp.Header, rep, fmt.Errorf("decode %s: %w", url, err)
		}
	}
	return resp.StatusCode, resp.Header, rep, nil
}
