package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
)

// The overload burst is an open loop: starts are offered at burstRate
// whatever the cluster answers, which is what a flash sale's clients do
// and what a closed loop never shows. It is bounded on every side, so
// the soak cannot turn into a load test of the machine: in time (Hold,
// burstMinHold to burstMaxHold), in count (burstMax), in requests in
// flight (burstInFlight; an arrival over it is dropped, not queued) and
// in each request's wait (burstTimeout). It talks to the cluster's own
// loopback APIs only. burstRate is several times what the soak's
// cluster serves on the 2-core machine CI uses (it runs appendfsync
// always; the issue measured 480 orders/s without it).
const (
	burstRate     = 1000
	burstMax      = 6000
	burstInFlight = 800
	burstTimeout  = 15 * time.Second
	burstMinHold  = 5 * time.Second
	burstMaxHold  = 8 * time.Second
	// burstRetriers retry, closed loop, every key the burst left without
	// a final answer, so that each failed start is seen to complete with
	// the same key and body.
	burstRetriers = 16
)

// burstTally is what the burst's starts were told.
type burstTally struct {
	mu        sync.Mutex
	offered   int
	sent      int
	dropped   int
	answers   map[string]int
	latencies []time.Duration
	retry     []*contracts.StartOrderReq
}

func (b *burstTally) add(e ClientEvent, took time.Duration, req *contracts.StartOrderReq) {
	b.mu.Lock()
	defer b.mu.Unlock()
	class := errCode(e)
	if class == "" {
		class = fmt.Sprint(e.HTTPStatus)
	}
	b.answers[class]++
	b.latencies = append(b.latencies, took)
	if !e.Final {
		b.retry = append(b.retry, req)
	}
}

// burst offers starts at burstRate for ft.Hold through every API in
// turn, then hands the keys left without a final answer to retriers in
// the background (f.bg). It is effective when the cluster fell behind:
// an arrival found burstInFlight requests waiting, or a start was
// answered 5xx or not at all.
func (f *faulter) burst(ctx context.Context, ft Fault) Fault {
	note := func(format string, a ...any) { ft.Detail = append(ft.Detail, fmt.Sprintf(format, a...)) }
	ld := f.ld
	// One connection per request in flight, kept for the next arrival.
	tr := &http.Transport{MaxIdleConnsPerHost: burstInFlight, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: burstTimeout}
	var apis []*client.API
	for i, a := range ld.apis {
		if !loopback(a.BaseURL) {
			note("skipped: %s (%s) is not on loopback", ld.names[i], a.BaseURL)
			return ft
		}
		apis = append(apis, &client.API{BaseURL: a.BaseURL, HTTP: hc})
	}
	ft.Injected = true
	t := &burstTally{answers: map[string]int{}}
	r := rand.New(rand.NewPCG(f.seed, 0xb0257+uint64(ft.N)))
	slots := make(chan struct{}, burstInFlight)
	var wg sync.WaitGroup
	// Arrivals are due by the clock, not by ticks: a tick delayed on a
	// busy machine is made up at the next, so the rate is offered.
	ticker := time.NewTicker(10 * time.Millisecond)
	start := time.Now()
loop:
	for t.offered < burstMax {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
		}
		elapsed := min(time.Since(start), ft.Hold)
		due := min(int(elapsed.Seconds()*burstRate), burstMax)
		for ; t.offered < due; t.offered++ {
			select {
			case slots <- struct{}{}:
			default:
				t.dropped++
				continue
			}
			t.sent++
			api := t.sent % len(apis)
			req := ld.body(r)
			req.IdempotencyKey = ld.key()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				began := time.Now()
				e := ld.startAttempt(ctx, apis[api], ld.names[api], req, 1, burstTimeout)
				t.add(e, time.Since(began), req)
			}()
		}
		if elapsed >= ft.Hold {
			break
		}
	}
	ticker.Stop()
	offeredFor := time.Since(start)
	wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	note("offered %d starts in %s (%d/s), sent %d, dropped %d at %d in flight", t.offered, offeredFor.Round(time.Millisecond),
		int(float64(t.offered)/offeredFor.Seconds()), t.sent, t.dropped, burstInFlight)
	var classes []string
	failed := 0
	for _, k := range sortedKeys(t.answers) {
		classes = append(classes, fmt.Sprintf("%s=%d", k, t.answers[k]))
		if k == "transport" || strings.HasPrefix(k, "5") {
			failed += t.answers[k]
		}
	}
	note("answers %s", strings.Join(classes, " "))
	if len(t.latencies) > 0 {
		// Microseconds, 1 µs to an hour, 3 significant digits.
		h := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
		for _, d := range t.latencies {
			_ = h.RecordValue(min(max(d.Microseconds(), 1), h.HighestTrackableValue()))
		}
		q := func(p float64) time.Duration {
			return (time.Duration(h.ValueAtQuantile(p)) * time.Microsecond).Round(time.Millisecond)
		}
		note("latency p50 %s p99 %s max %s", q(50), q(99), q(100))
	}
	ft.Effective = t.dropped > 0 || failed > 0
	if len(t.retry) > 0 {
		note("%d keys without a final answer retried in the background", len(t.retry))
		f.retryBurst(ctx, ft.N, t.retry)
	}
	return ft
}

// retryBurst retries each key, same key and body, until it gets a final
// answer or the load's retry deadline passes, burstRetriers at a time.
func (f *faulter) retryBurst(ctx context.Context, n int, reqs []*contracts.StartOrderReq) {
	jobs := make(chan *contracts.StartOrderReq)
	var done sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		for w := range burstRetriers {
			done.Add(1)
			go func() {
				defer done.Done()
				for req := range jobs {
					if id := f.ld.startUntilFinal(ctx, w%len(f.ld.apis), req); id != "" {
						mu.Lock()
						ok++
						mu.Unlock()
					}
				}
			}()
		}
		for _, req := range reqs {
			jobs <- req
		}
		close(jobs)
		done.Wait()
		logf("FAULT #%d %s retries done: %d of %d keys acknowledged", n, faultOverload, ok, len(reqs))
	}()
}

// loopback reports whether a base URL names a loopback host.
func loopback(base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
