package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// The metrics the bench reads, as docs/observability.md lists them: what an
// operator's scraper reads, not a protocol of the bench's own.
const (
	metricRedisRoundTrips = "shoppingmall_redis_round_trips_total"
	metricRedisCommands   = "shoppingmall_redis_commands_total"
	metricRedisPipelines  = "shoppingmall_redis_pipelines_total"
	metricGrainsHosted    = "shoppingmall_grains_hosted"
	labelStore            = "store"
	labelCommand          = "command"
)

// scraped is one /metrics scrape, by metric family name.
type scraped map[string]*dto.MetricFamily

var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// scrapeMetrics GETs base/metrics in the text format, as a Prometheus
// server would.
func scrapeMetrics(ctx context.Context, base string) (scraped, error) {
	if base == "" {
		return nil, fmt.Errorf("no metrics address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: status %d", base, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	return scraped(mfs), nil
}

// sum adds the values of the samples of name whose labels include every
// pair of match (nil: all of them); an absent family sums to 0.
func (s scraped) sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, m := range s[name].GetMetric() {
		if hasLabels(m, match) {
			total += value(m)
		}
	}
	return total
}

// by sums the samples of name by the value of label.
func (s scraped) by(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range s[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out[lp.GetValue()] += value(m)
			}
		}
	}
	return out
}

func hasLabels(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		ok := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// cpuSeconds is user+system CPU time of pid (0: the bench itself) as the
// OS counts it, so it needs nothing from the process: a binary of any
// commit can be measured.
func cpuSeconds(pid int) (float64, error) {
	var p procfs.Proc
	var err error
	if pid == 0 {
		p, err = procfs.Self()
	} else {
		p, err = procfs.NewProc(pid)
	}
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// clockTicks is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on
// every Linux platform (procfs divides by the same constant).
const clockTicks = 100

// systemCPUSeconds is cpuSeconds of a measured process (a node, a
// redis-server, restate-server) plus the CPU of the children it has
// waited for, which it also returns apart. redis-server forks to rewrite
// its append-only file and to save snapshots; with the AOF on, a 20 s
// closed loop at about 1,000 orders/s ran three such children of one to
// four seconds each: work the store does for its orders, which the
// parent's own times leave out. A child counts in the phase in which its
// parent reaped it. Not for the bench itself: its children are the
// nodes of earlier clusters.
func systemCPUSeconds(pid int) (total, children float64, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, 0, err
	}
	children = float64(st.CUTime+st.CSTime) / clockTicks
	return st.CPUTime() + children, children, nil
}

// ioSyscalls is pid's count of read- and write-family system calls
// (syscr + syscw) as the kernel counts them.
func ioSyscalls(pid int) (uint64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	io, err := p.IO()
	if err != nil {
		return 0, err
	}
	return io.SyscR + io.SyscW, nil
}

// machineCPU is the machine's CPU time in seconds, summed over its CPUs.
type machineCPU struct {
	Total, Steal float64
}

func machineTimes() (machineCPU, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return machineCPU{}, err
	}
	st, err := fs.Stat()
	if err != nil {
		return machineCPU{}, err
	}
	c := st.CPUTotal
	return machineCPU{
		Total: c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal,
		Steal: c.Steal,
	}, nil
}

type steal struct {
	Seconds float64 `json:"seconds"`
	Share   float64 `json:"share"`
}

// stealBetween is the steal from a to b; nil when either read failed.
func stealBetween(a, b machineCPU) *steal {
	if a.Total == 0 || b.Total <= a.Total {
		return nil
	}
	d := b.Steal - a.Steal
	return &steal{Seconds: d, Share: d / (b.Total - a.Total)}
}
