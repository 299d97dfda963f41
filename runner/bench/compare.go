package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// comparison is a baseline run beside the working tree's, figure by
// figure, with current/baseline ratios.
type comparison struct {
	Baseline string       `json:"baseline"`
	Current  string       `json:"current"`
	Rows     []compareRow `json:"rows"`
	// Goals judge the working tree against the baseline (issue 58).
	Goals []peerGoal `json:"goals,omitempty"`
	Notes []string   `json:"notes,omitempty"`
}

// compareRow holds one figure of each run; a nil figure is one the run
// could not measure (no /metrics, no open loop), and then there is no
// ratio.
type compareRow struct {
	Metric   string   `json:"metric"`
	Unit     string   `json:"unit"`
	Baseline *float64 `json:"baseline"`
	Current  *float64 `json:"current"`
	// Ratio is current / baseline.
	Ratio *float64 `json:"ratio"`
	// LowerIsBetter says how to read the ratio.
	LowerIsBetter bool `json:"lowerIsBetter"`
}

func some(v float64) *float64 { return &v }

// ioTotal is I/O system calls per order summed over every process the
// cluster runs (the load generator is not one of them).
func ioTotal(r *report) float64 {
	var t float64
	for _, v := range r.IOSyscallsPerOrder {
		t += v
	}
	return t
}

// cpuTotal is CPU per order summed over every process the cluster runs,
// Redis included, the load generator excluded; with it, the API's and
// the workflow's shares.
func cpuTotal(r *report) (total, api, workflow float64) {
	for n, v := range r.CPUPerOrderMs {
		switch {
		case n == runnerCPU:
			continue
		case strings.HasPrefix(n, "api"):
			api += v
		case strings.HasPrefix(n, "workflow"):
			workflow += v
		}
		total += v
	}
	return total, api, workflow
}

func compare(base, cur *report) comparison {
	c := comparison{Baseline: base.Target.Label, Current: cur.Target.Label}
	add := func(metric, unit string, lower bool, get func(r *report) *float64) {
		row := compareRow{Metric: metric, Unit: unit, LowerIsBetter: lower, Baseline: get(base), Current: get(cur)}
		if row.Baseline != nil && row.Current != nil && *row.Baseline != 0 {
			row.Ratio = some(*row.Current / *row.Baseline)
		}
		c.Rows = append(c.Rows, row)
	}
	cpu := func(pick func(total, api, wf float64) float64) func(r *report) *float64 {
		return func(r *report) *float64 {
			if len(r.CPUPerOrderMs) == 0 {
				return nil
			}
			t, a, w := cpuTotal(r)
			return some(pick(t, a, w))
		}
	}
	openLoop := func(get func(ol *openLoopStats) float64) func(r *report) *float64 {
		return func(r *report) *float64 {
			if r.OpenLoop == nil {
				return nil
			}
			return some(get(r.OpenLoop))
		}
	}
	add("throughput (closed loop)", "orders/s", false, func(r *report) *float64 { return some(r.Throughput.OrdersPerSec) })
	add("CPU per order, all processes incl. Redis", "ms", true, cpu(func(t, _, _ float64) float64 { return t }))
	add("  API processes", "ms", true, cpu(func(_, a, _ float64) float64 { return a }))
	add("  workflow processes", "ms", true, cpu(func(_, _, w float64) float64 { return w }))
	add("  redis-server", "ms", true, func(r *report) *float64 {
		if v, ok := r.CPUPerOrderMs["redis-server"]; ok {
			return some(v)
		}
		return nil
	})
	add("Redis round trips per order (client side)", "", true, func(r *report) *float64 {
		if len(r.ClientRoundTrips.ByNode) == 0 {
			return nil
		}
		return some(r.ClientRoundTrips.PerOrder)
	})
	add("I/O syscalls per order, all processes", "", true, func(r *report) *float64 {
		if len(r.IOSyscallsPerOrder) == 0 {
			return nil
		}
		return some(ioTotal(r))
	})
	add("Redis commands per order (server side)", "", true, func(r *report) *float64 { return some(r.RedisCommands.PerOrder) })
	add("  for the orders (WAIT and background apart)", "", true, func(r *report) *float64 {
		if r.Background == nil {
			return nil
		}
		return some(r.RedisCommands.ForOrdersPerOrder)
	})
	add("Redis time per order", "µs", true, func(r *report) *float64 { return some(r.RedisCommands.UsecPerOrder) })
	add("GET requests per order (waits + polls)", "", true, func(r *report) *float64 { return some(r.Waits.PerOrder + r.Polls.PerOrder) })
	add("closed loop StartOrder p99", "ms", true, func(r *report) *float64 { return some(r.StartOrderMs.P99) })
	add("closed loop start -> terminal p99", "ms", true, func(r *report) *float64 { return some(r.StartToTerminalMs.P99) })
	add("open loop rate", "orders/s", false, openLoop(func(ol *openLoopStats) float64 { return ol.RatePerSec }))
	add("open loop StartOrder p99", "ms", true, openLoop(func(ol *openLoopStats) float64 { return ol.StartOrderMs.P99 }))
	add("open loop StartOrder p99.9", "ms", true, openLoop(func(ol *openLoopStats) float64 { return ol.StartOrderMs.P999 }))
	add("open loop start -> terminal p99", "ms", true, openLoop(func(ol *openLoopStats) float64 { return ol.StartToTerminalMs.P99 }))
	add("open loop start -> terminal p99.9", "ms", true, openLoop(func(ol *openLoopStats) float64 { return ol.StartToTerminalMs.P999 }))
	add("CPU steal during the open loop", "%", true, openLoopSteal)
	add("CPU steal during the load (the hypervisor's share)", "%", true, closedLoopSteal)
	add("ceiling (Redis alone)", "orders/s", false, func(r *report) *float64 {
		if r.Ceiling.Orders == 0 {
			return nil
		}
		return some(r.Ceiling.OrdersPerSec)
	})
	c.Notes = append(c.Notes,
		"both runs on this machine one after the other, each with its own cluster and Redis; ratio = current / baseline",
		"n/a: the run could not measure it (a binary without /metrics or -stats-file has no client-side round trips)")
	if base.GetMode != cur.GetMode {
		c.Notes = append(c.Notes, fmt.Sprintf("outcomes awaited differently: baseline %s, current %s (GET requests and API CPU differ for that reason too)",
			base.GetMode, cur.GetMode))
	}
	c.Goals = compareGoals(base, cur)
	return c
}

func printComparison(w io.Writer, c comparison) {
	rows := make([][]string, 0, len(c.Rows))
	for _, r := range c.Rows {
		rows = append(rows, []string{rowName(r.Metric, r.Unit), figure(r.Baseline, "%.2f"), figure(r.Current, "%.2f"), figure(r.Ratio, "%.3f")})
	}
	notes := append([]string(nil), c.Notes...)
	for _, g := range c.Goals {
		notes = append(notes, fmt.Sprintf("goal: %s: %s [%s]", g.Goal, goalFigure(g), g.Verdict))
	}
	printTable(w, fmt.Sprintf("ShoppingMall bench: %s vs %s", c.Current, c.Baseline),
		[]string{c.Baseline, c.Current, "current/baseline"}, rows, notes)
}

// printTable prints a titled table of figures with its notes.
func printTable(w io.Writer, title string, header []string, rows [][]string, notes []string) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "=== %s ===\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\t%s\t\n", strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(r, "\t"))
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
	fmt.Fprintln(w)
}

func rowName(metric, unit string) string {
	if unit == "" {
		return metric
	}
	return metric + " (" + unit + ")"
}

// figure formats v, or n/a for a figure the run could not measure.
func figure(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}

// bothOrdersComparison is a change benched in both orders: the first pass
// ran the baseline first, the reversed pass the working tree first.
//
// With a position effect p (the run made second scores p times what it
// would have scored first) and a true ratio r, the first pass measures
// r·p and the reversed pass r/p: their geometric mean is r, and the square
// root of their quotient is p.
type bothOrdersComparison struct {
	Baseline string          `json:"baseline"`
	Current  string          `json:"current"`
	Rows     []bothOrdersRow `json:"rows"`
	Notes    []string        `json:"notes,omitempty"`
}

type bothOrdersRow struct {
	Metric string `json:"metric"`
	Unit   string `json:"unit"`
	// BaselineFirst and CurrentFirst are current/baseline in each pass.
	BaselineFirst *float64 `json:"baselineFirst"`
	CurrentFirst  *float64 `json:"currentFirst"`
	// Ratio is their geometric mean, the position effect cancelled.
	Ratio *float64 `json:"ratio"`
	// Position is what being measured second multiplied the figure by.
	Position      *float64 `json:"position"`
	LowerIsBetter bool     `json:"lowerIsBetter"`
}

// bothOrders combines the two passes row by row (the rows of compare come
// in one fixed order); a figure either pass could not measure has no
// combined ratio.
func bothOrders(first, reversed comparison) bothOrdersComparison {
	b := bothOrdersComparison{Baseline: first.Baseline, Current: first.Current}
	for i, r := range first.Rows {
		row := bothOrdersRow{Metric: r.Metric, Unit: r.Unit, LowerIsBetter: r.LowerIsBetter, BaselineFirst: r.Ratio}
		if i < len(reversed.Rows) && reversed.Rows[i].Metric == r.Metric {
			row.CurrentFirst = reversed.Rows[i].Ratio
		}
		if a, c := row.BaselineFirst, row.CurrentFirst; a != nil && c != nil && *a > 0 && *c > 0 {
			row.Ratio = some(math.Sqrt(*a * *c))
			row.Position = some(math.Sqrt(*a / *c))
		}
		b.Rows = append(b.Rows, row)
	}
	b.Notes = append(b.Notes,
		"four runs on this machine one after the other: baseline, working tree, working tree, baseline; ratio = current / baseline",
		"combined = geometric mean of the two passes' ratios; position = what being measured second multiplied a figure by (1 = no effect)")
	return b
}

func printBothOrders(w io.Writer, b bothOrdersComparison) {
	rows := make([][]string, 0, len(b.Rows))
	for _, r := range b.Rows {
		rows = append(rows, []string{rowName(r.Metric, r.Unit), figure(r.BaselineFirst, "%.3f"), figure(r.CurrentFirst, "%.3f"),
			figure(r.Ratio, "%.3f"), figure(r.Position, "%.3f")})
	}
	printTable(w, fmt.Sprintf("ShoppingMall bench, both orders: %s vs %s", b.Current, b.Baseline),
		[]string{"baseline first", "working tree first", "combined", "position"}, rows, b.Notes)
}

// closedLoopSteal is the closed loop's steal in percent; nil without one.
func closedLoopSteal(r *report) *float64 {
	if r.Steal == nil {
		return nil
	}
	return some(100 * r.Steal.Share)
}

// openLoopSteal is the open loop's steal in percent; nil without one.
func openLoopSteal(r *report) *float64 {
	if r.OpenLoop == nil || r.OpenLoop.Steal == nil {
		return nil
	}
	return some(100 * r.OpenLoop.Steal.Share)
}
