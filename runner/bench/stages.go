package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// Where inside the system the slowest orders spent their time. The
// order's own stream holds two clocks per event: createdAtUnixMs, read by
// the owner when it decided the event (before its append), and the entry
// id, Redis' clock when the append's script ran. With the generator's due
// time, its 201 and its terminal answer, they cut an order's life into
// legs without any tracing in the processes:
//
//	due ─ before the owner ─ start decided ─ start commit ─ start recorded ─ steps ─ terminal recorded ─ notice ─ client
//	                                                         └─ 201 back ─ client's 201
//
// "before the owner" is the generator's lag, the POST, the API's script,
// the hop and the cold activation; "start commit" is the start script's
// wait and run; "steps" are the module calls and their appends; "notice"
// is the terminal notice's way to the waiting GET. All processes run on
// one machine, so their wall clocks are one clock; entry ids and
// createdAtUnixMs have millisecond resolution, so a leg under 1 ms reads
// as 0 or 1.

// stageNames are the legs, in their order along an order's life.
var stageNames = []string{"beforeOwner", "startCommit", "steps", "notice", "startAck"}

// stageStats is how the slowest orders by one measure split their time.
type stageStats struct {
	// By is the measure they are the slowest by: "startOrder" or
	// "startToTerminal".
	By     string `json:"by"`
	Orders int    `json:"orders"`
	// Read is how many of them had a stream to read (a start that failed
	// has none).
	Read int `json:"read"`
	// MedianMs and MaxMs are each leg's median and largest over them;
	// Share is each leg's sum over the sum of their measure (start →
	// terminal is beforeOwner+startCommit+steps+notice; StartOrder is
	// beforeOwner+startCommit+startAck).
	MedianMs map[string]float64 `json:"medianMs"`
	MaxMs    map[string]float64 `json:"maxMs"`
	Share    map[string]float64 `json:"share"`
	Err      string             `json:"error,omitempty"`
}

// orderLegs is one order's legs, ms.
type orderLegs map[string]float64

// readStages reads the streams of the slowest tailShare of results by each
// of the two measures and splits their time into legs. phaseStart is the
// open loop's start on the wall clock (results' Start is from it).
func readStages(ctx context.Context, rdb redis.UniversalClient, results []orderResult, phaseStart time.Time) []stageStats {
	measures := []struct {
		by string
		of func(orderResult) time.Duration
	}{
		{"startOrder", func(r orderResult) time.Duration { return r.StartLat }},
		{"startToTerminal", func(r orderResult) time.Duration { return r.E2E }},
	}
	var done []orderResult
	for _, r := range results {
		if r.terminal() && r.OrderID != "" {
			done = append(done, r)
		}
	}
	var out []stageStats
	for _, m := range measures {
		slices.SortFunc(done, func(a, b orderResult) int { return -cmp.Compare(m.of(a), m.of(b)) })
		slow := done[:min(len(done), max(1, int(float64(len(results))*tailShare)))]
		st := stageStats{By: m.by, Orders: len(slow)}
		legs, err := orderStreamsLegs(ctx, rdb, slow, phaseStart)
		if err != nil {
			st.Err = err.Error()
		}
		st.Read = len(legs)
		st.MedianMs, st.MaxMs, st.Share = summarizeLegs(legs, m.by)
		out = append(out, st)
	}
	return out
}

// orderStreamsLegs reads each order's stream in one pipeline and returns
// the legs of every order whose stream holds a start and a terminal event.
func orderStreamsLegs(ctx context.Context, rdb redis.UniversalClient, rs []orderResult, phaseStart time.Time) ([]orderLegs, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(rs))
	for i, r := range rs {
		cmds[i] = pipe.XRange(ctx, eventstore.DefaultKeyPrefix+"{"+r.OrderID+"}:stream", "-", "+")
	}
	_, err := pipe.Exec(ctx)
	var out []orderLegs
	for i, r := range rs {
		msgs, cerr := cmds[i].Result()
		if cerr != nil {
			continue
		}
		if l, ok := legsOf(r, msgs, phaseStart); ok {
			out = append(out, l)
		}
	}
	return out, err
}

// legsOf cuts one order's life into legs from its stream's entries.
func legsOf(r orderResult, msgs []redis.XMessage, phaseStart time.Time) (orderLegs, bool) {
	if len(msgs) < 2 {
		return nil, false
	}
	due := phaseStart.Add(r.Start)
	at := func(m redis.XMessage) (time.Time, bool) {
		ms, _, _ := strings.Cut(m.ID, "-")
		n, err := strconv.ParseInt(ms, 10, 64)
		return time.UnixMilli(n), err == nil
	}
	decided, err := strconv.ParseInt(fmt.Sprint(msgs[0].Values["createdAtUnixMs"]), 10, 64)
	if err != nil {
		return nil, false
	}
	started, ok1 := at(msgs[0])
	terminal, ok2 := at(msgs[len(msgs)-1])
	if !ok1 || !ok2 {
		return nil, false
	}
	d := func(from, to time.Time) float64 { return ms(to.Sub(from)) }
	return orderLegs{
		"beforeOwner": d(due, time.UnixMilli(decided)),
		"startCommit": d(time.UnixMilli(decided), started),
		"steps":       d(started, terminal),
		"notice":      d(terminal, due.Add(r.E2E)),
		"startAck":    d(started, due.Add(r.StartLat)),
	}, true
}

// summarizeLegs gives each leg's median, largest and share of the
// measure's sum.
func summarizeLegs(legs []orderLegs, by string) (med, mx, share map[string]float64) {
	med, mx, share = map[string]float64{}, map[string]float64{}, map[string]float64{}
	if len(legs) == 0 {
		return med, mx, share
	}
	parts := []string{"beforeOwner", "startCommit", "steps", "notice"}
	if by == "startOrder" {
		parts = []string{"beforeOwner", "startCommit", "startAck"}
	}
	var total float64
	sums := map[string]float64{}
	for _, name := range stageNames {
		var xs []float64
		for _, l := range legs {
			xs = append(xs, l[name])
			sums[name] += max(0, l[name])
		}
		slices.Sort(xs)
		med[name] = xs[len(xs)/2]
		mx[name] = xs[len(xs)-1]
	}
	for _, p := range parts {
		total += sums[p]
	}
	if total > 0 {
		for _, p := range parts {
			share[p] = sums[p] / total
		}
	}
	return med, mx, share
}

// formatStages is one line of the terminal report.
func formatStages(s stageStats) string {
	if s.Read == 0 {
		return fmt.Sprintf("%d orders, no stream read %s", s.Orders, s.Err)
	}
	var parts []string
	for _, name := range stageNames {
		if s.By == "startOrder" && (name == "steps" || name == "notice") {
			continue
		}
		p := fmt.Sprintf("%s %.0f ms", name, s.MedianMs[name])
		if sh, ok := s.Share[name]; ok {
			p += fmt.Sprintf(" (%.0f%%)", 100*sh)
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("%d orders, medians: %s", s.Read, strings.Join(parts, ", "))
}
