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
	Start   time.Duration // POST sent
	// StartLat is the POST /orders latency (201 received).
	StartLat time.Duration
	// E2E is POST sent → terminal status first seen by a GET.
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
				r := l.one(ctx, n, start)
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

func (l *load) one(ctx context.Context, n int64, phaseStart time.Time) orderResult {
	path := l.pathOf(n)
	api := int(n % int64(len(l.cfg.APIs)))
	base := l.cfg.APIs[api]
	body := startBody{ShippingAddressID: "addr-bench", IdempotencyKey: fmt.Sprintf("bench-%s-%d", l.cfg.RunID, n)}
	switch path {
	case pathInventory:
		body.CartID, body.PaymentMethodID = l.cfg.IDs.CartNoStock, l.cfg.IDs.MethodOK
	case pathPayment:
		body.CartID, body.PaymentMethodID = l.cfg.IDs.CartOK, l.cfg.IDs.MethodDeclined
	default:
		body.CartID, body.PaymentMethodID = l.cfg.IDs.CartOK, l.cfg.IDs.MethodOK
	}
	b, _ := json.Marshal(body)
	t0 := time.Now()
	r := orderResult{Path: path, API: api, Start: t0.Sub(phaseStart)}
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
	limit := t0.Add(l.cfg.PollTimeout)
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
		wait := min(left, client.MaxWait).Milliseconds()
		code, h, rep, err := l.do(ctx, http.MethodGet, fmt.Sprintf("%s/orders/%s?waitFor=terminal&timeoutMs=%d", base, id, wait), nil)
		if ctx.Err() != nil {
			r.Err = ctx.Err().Error()
			return r
		}
		switch w := h.Get(client.HeaderWait); {
		case err != nil || code != http.StatusOK:
			// A transient miss is retried, after a pause, until the
			// order's time is up.
			r.Waits++
			pause = true
			continue
		case w == client.WaitReached || w == client.WaitTimeout:
			r.Waits++
			pause = false
		default:
			// An API without the wait answered a plain GET: poll it.
			r.Polls++
			pause = true
		}
		r.Status = rep.State.Status
	}
	r.E2E = time.Since(t0)
	return r
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
