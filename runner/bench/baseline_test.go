package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary doubles as the baseline wrapper, as the bench does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == wrapperArg {
		os.Exit(execFiltered(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestParseOptionsDefaultsAndBaseline(t *testing.T) {
	o, err := parseOptions(nil)
	require.NoError(t, err)
	require.True(t, o.openLoop)
	require.Zero(t, o.openLoopRate, "0: half the measured peak")
	require.Equal(t, 30*time.Second, o.openLoopDuration)
	require.Empty(t, o.baseline)

	o, err = parseOptions([]string{"-baseline", "a88de4b", "-open-loop=false", "-open-loop-rate", "120", "-open-loop-duration", "5s"})
	require.NoError(t, err)
	require.Equal(t, "a88de4b", o.baseline)
	require.False(t, o.openLoop)
	require.Equal(t, 120.0, o.openLoopRate)
	require.Equal(t, 5*time.Second, o.openLoopDuration)

	// Skipping the open loop makes its duration irrelevant.
	_, err = parseOptions([]string{"-open-loop=false", "-open-loop-duration", "0s"})
	require.NoError(t, err)

	for _, bad := range [][]string{
		{"-open-loop-rate", "-1"},
		{"-open-loop-duration", "0s"},
		{"-open-loop-max-inflight", "0"},
		// An empty BENCH_BASELINE in a hand-written command line.
		{"-baseline", "-duration", "5s"},
		{"-api-bin", "x"},
		{"-concurrency", "0"},
		{"extra"},
	} {
		_, err := parseOptions(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = parseOptions([]string{"-no-such-flag"})
	require.ErrorContains(t, err, "no-such-flag")
}

func TestFindMains(t *testing.T) {
	api, wf, err := findMains([]string{"README.md", "edge/cmd/commerce-api/main.go", "actors/cmd/order-workflow/main.go", "runner/client/cmd/shoppingmall-client/main.go"})
	require.NoError(t, err)
	require.Equal(t, "edge/cmd/commerce-api", api)
	require.Equal(t, "actors/cmd/order-workflow", wf)

	// A layout of another commit is found by the mains' names.
	api, wf, err = findMains([]string{"cmd/commerce-api/main.go", "cmd/commerce-api/flags.go", "workflow/cmd/order-workflow/main.go"})
	require.NoError(t, err)
	require.Equal(t, "cmd/commerce-api", api)
	require.Equal(t, "workflow/cmd/order-workflow", wf)

	_, _, err = findMains([]string{"cmd/commerce-api/main.go"})
	require.ErrorContains(t, err, "no cmd/order-workflow/main.go")
	_, _, err = findMains([]string{"a/cmd/commerce-api/main.go", "b/cmd/commerce-api/main.go", "cmd/order-workflow/main.go"})
	require.ErrorContains(t, err, "more than one cmd/commerce-api")
	// Not fooled by a prefix of the name.
	_, _, err = findMains([]string{"cmd/commerce-api-old/main.go", "cmd/order-workflow/main.go"})
	require.Error(t, err)
}

// The flags a binary accepts are read from what package flag prints for
// -h, booleans included.
func TestAcceptedFlagsFromUsage(t *testing.T) {
	fs := flag.NewFlagSet("commerce-api", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.String("node", "api-a", "node name")
	fs.Int("automanaged-port", 6331, "this member's automanaged port")
	fs.Bool("self-check", false, "enable the runner-only /self-check/ hooks")
	fs.Duration("request-timeout", 10*time.Second, "bound of one HTTP request\nover two lines -not-a-flag")
	require.ErrorIs(t, fs.Parse([]string{"-h"}), flag.ErrHelp)
	got := acceptedFlags("commerce-api: flag: help requested\n" + out.String())
	require.Equal(t, map[string]bool{"node": true, "automanaged-port": true, "self-check": true, "request-timeout": true}, got)
}

// localcluster's arguments for an API, as a binary from before the admin
// listener sees them after the wrapper.
func TestFilterArgsDropsUnknownFlagsWithTheirValues(t *testing.T) {
	accepted := map[string]bool{"node": true, "redis": true, "http": true, "request-timeout": true, "seeds": true, "admin": true}
	args := []string{"-node", "api-a", "-redis", "redis://127.0.0.1:1/0", "-http", "127.0.0.1:2", "-request-timeout", "10s",
		"-admin-http", "127.0.0.1:3", "-seeds", "127.0.0.1:4,127.0.0.1:5", "-self-check", "-admin", "--ops-http=127.0.0.1:6", "-port", "0"}
	kept, dropped := filterArgs(args, accepted)
	require.Equal(t, []string{"-node", "api-a", "-redis", "redis://127.0.0.1:1/0", "-http", "127.0.0.1:2", "-request-timeout", "10s",
		"-seeds", "127.0.0.1:4,127.0.0.1:5", "-admin"}, kept)
	require.Equal(t, []string{"-admin-http", "127.0.0.1:3", "-self-check", "--ops-http=127.0.0.1:6", "-port", "0"}, dropped)

	kept, dropped = filterArgs([]string{"-node", "x", "--", "-anything"}, accepted)
	require.Equal(t, []string{"-node", "x", "--", "-anything"}, kept)
	require.Empty(t, dropped)
}

// End to end: the script localcluster would start runs this binary as the
// wrapper, which replaces itself (same PID) with the real binary, minus
// the flags that one does not accept.
func TestWrapperScriptExecsTheBinaryWithItsFlagsOnly(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	out := filepath.Join(dir, "it's out")
	// The "binary" prints its PID and arguments.
	bin := filepath.Join(dir, "old binary")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho $$ \"$@\" > "+shellQuote(out)+"\n"), 0o755))
	wrapper := bin + ".wrapper"
	require.NoError(t, os.WriteFile(wrapper, []byte(wrapperScript(self, bin, map[string]bool{"node": true, "http": true})), 0o755))

	cmd := exec.Command(wrapper, "-node", "api-a", "-admin-http", "127.0.0.1:3", "-http", "127.0.0.1:2")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	f := strings.Fields(string(b))
	require.Equal(t, []string{"-node", "api-a", "-http", "127.0.0.1:2"}, f[1:])
	require.Equal(t, strconv.Itoa(cmd.ProcessState.Pid()), f[0], "the binary runs under the PID localcluster started")
	require.Contains(t, stderr.String(), "dropped: -admin-http 127.0.0.1:3")

	// The report names what was dropped, once per binary, from the logs.
	logA, logB := filepath.Join(dir, "api-a.log"), filepath.Join(dir, "api-b.log")
	require.NoError(t, os.WriteFile(logA, []byte("starting\n"+stderr.String()), 0o644))
	require.NoError(t, os.WriteFile(logB, []byte(strings.ReplaceAll(stderr.String(), "127.0.0.1:3", "127.0.0.1:7")), 0o644))
	require.Equal(t, []string{"baseline old binary does not accept -admin-http: the wrapper dropped it"},
		droppedFlags([]string{logA, logB, filepath.Join(dir, "missing.log")}))
}

// A binary from before /metrics reports its round trips in its stats file
// on SIGUSR1: the bench waits for a dump newer than its request and reads
// it as it reads a scrape.
func TestStatsDumpFallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-a.json")
	write := func(at time.Time, rt map[string]int64) {
		b, err := json.Marshal(statsDump{PID: os.Getpid(), RedisRoundTrips: rt, WrittenAtUnixNano: at.UnixNano()})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
	// A stale dump is there already.
	write(time.Now().Add(-time.Minute), map[string]int64{"total": 1})
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	fresh := map[string]int64{"total": 90, "commands": 130, "pipelines": 20, "connSetup": 4, "evalsha": 50, "hmget": 30, "xadd": 50}
	go func() {
		<-usr1
		time.Sleep(50 * time.Millisecond)
		write(time.Now(), fresh)
	}()
	st, err := signalDump(context.Background(), os.Getpid(), path)
	require.NoError(t, err)
	require.Equal(t, fresh, st.RedisRoundTrips)

	// Before and after dumps give per-order figures like two scrapes.
	before := snap{Metrics: map[string]scraped{"api-a": scrapedFromDump(map[string]int64{"total": 10, "hmget": 10})}, Dumped: []string{"api-a"}}
	after := snap{Metrics: map[string]scraped{"api-a": scrapedFromDump(map[string]int64{"total": 40, "hmget": 40, "connSetup": 9})}, Dumped: []string{"api-a"}}
	var res loadResult
	for range 10 {
		res.Results = append(res.Results, orderResult{Path: pathSuccess, Status: "Confirmed"})
	}
	res.Polls = 30
	rep := buildReport(options{concurrency: 1, duration: time.Second}, res, before, after)
	require.Equal(t, 3.0, rep.ClientRoundTrips.PerOrder)
	require.Equal(t, 3.0, rep.ClientRoundTrips.APIPollPerOrder)
	require.Equal(t, map[string]float64{dumpStore: 3}, rep.ClientRoundTrips.ByStore)
	require.Contains(t, rep.ClientRoundTrips.Source, "-stats-file")
	require.Equal(t, 1.0, rep.ClientRoundTrips.APIPerPoll)
}

func TestStatsDumpWithoutAFreshFileFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.json")
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := signalDump(ctx, os.Getpid(), path)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// git archive pads its tar past the end marker; extraction reads it all,
// or git would block on a full pipe forever.
func TestUntarAllReadsThePaddingSoTheWriterFinishes(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "edge/", Typeflag: tar.TypeDir, Mode: 0o755}))
	body := []byte("package main\n")
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "edge/cmd/commerce-api/main.go", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}))
	_, err := tw.Write(body)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	buf.Write(make([]byte, 64<<10))

	dir := t.TempDir()
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		_, err := pw.Write(buf.Bytes())
		pw.CloseWithError(err)
		written <- err
	}()
	require.NoError(t, untarAll(pr, dir))
	select {
	case err := <-written:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the writer is still blocked on the padding")
	}
	got, err := os.ReadFile(filepath.Join(dir, "edge", "cmd", "commerce-api", "main.go"))
	require.NoError(t, err)
	require.Equal(t, body, got)

	// A path leaving the directory is refused.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}))
	require.NoError(t, tw.Close())
	require.ErrorContains(t, untarAll(&buf, t.TempDir()), "leaves the directory")
}

func TestStatsPath(t *testing.T) {
	require.Empty(t, statsPath("", "api-a"))
	require.Equal(t, "/x/stats/api-a.json", statsPath("/x/stats/{node}.json", "api-a"))
}

func TestCompareRatiosAndMissingFigures(t *testing.T) {
	base, cur := &report{}, &report{}
	base.Target.Label, cur.Target.Label = "baseline abc", "working tree"
	base.Throughput.OrdersPerSec, cur.Throughput.OrdersPerSec = 100, 150
	base.CPUPerOrderMs = map[string]float64{"api-a": 1, "api-b": 1, "workflow-a": 2, "redis-server": 1, runnerCPU: 9}
	cur.CPUPerOrderMs = map[string]float64{"api-a": 0.5, "api-b": 0.5, "workflow-a": 2, "redis-server": 1, runnerCPU: 9}
	cur.ClientRoundTrips.ByNode = map[string]map[string]float64{"api-a": {"total": 1}}
	cur.ClientRoundTrips.PerOrder = 12
	base.GetMode, cur.GetMode = "poll", "wait"
	cur.OpenLoop = &openLoopStats{RatePerSec: 50}
	c := compare(base, cur)
	rows := map[string]compareRow{}
	for _, r := range c.Rows {
		rows[r.Metric] = r
	}
	require.InDelta(t, 1.5, *rows["throughput (closed loop)"].Ratio, 1e-9)
	cpu := rows["CPU per order, all processes incl. Redis"]
	require.Equal(t, 5.0, *cpu.Baseline, "the load generator is left out")
	require.InDelta(t, 0.8, *cpu.Ratio, 1e-9)
	require.InDelta(t, 0.5, *rows["  API processes"].Ratio, 1e-9)
	require.Nil(t, rows["Redis round trips per order (client side)"].Baseline, "no /metrics, no dump: n/a")
	require.Nil(t, rows["Redis round trips per order (client side)"].Ratio)
	require.Nil(t, rows["open loop rate"].Ratio)
	require.Contains(t, strings.Join(c.Notes, "\n"), "baseline poll, current wait")
	var out bytes.Buffer
	printComparison(&out, c)
	require.Contains(t, out.String(), "working tree vs baseline abc")
	require.Regexp(t, `throughput \(closed loop\) \(orders/s\)\s+100\.00\s+150\.00\s+1\.500`, out.String())
}

// Both orders: a figure that is r·p in the first pass and r/p in the
// reversed one combines to r, with position p; a figure either pass
// lacks has neither.
func TestBothOrdersCancelsThePosition(t *testing.T) {
	pass := func(cpuRatio float64, withOpenLoop bool) comparison {
		base, cur := &report{}, &report{}
		base.Target.Label, cur.Target.Label = "baseline abc", "working tree"
		base.Throughput.OrdersPerSec, cur.Throughput.OrdersPerSec = 100, 100
		base.CPUPerOrderMs = map[string]float64{"api-a": 1}
		cur.CPUPerOrderMs = map[string]float64{"api-a": cpuRatio}
		if withOpenLoop {
			base.OpenLoop, cur.OpenLoop = &openLoopStats{RatePerSec: 50}, &openLoopStats{RatePerSec: 50}
		}
		return compare(base, cur)
	}
	// True ratio 0.9, the second run costing 1.1 times as much.
	b := bothOrders(pass(0.9*1.1, true), pass(0.9/1.1, false))
	rows := map[string]bothOrdersRow{}
	for _, r := range b.Rows {
		rows[r.Metric] = r
	}
	cpu := rows["CPU per order, all processes incl. Redis"]
	require.InDelta(t, 0.99, *cpu.BaselineFirst, 1e-9)
	require.InDelta(t, 0.9/1.1, *cpu.CurrentFirst, 1e-9)
	require.InDelta(t, 0.9, *cpu.Ratio, 1e-9)
	require.InDelta(t, 1.1, *cpu.Position, 1e-9)
	require.True(t, cpu.LowerIsBetter)
	require.InDelta(t, 1.0, *rows["throughput (closed loop)"].Ratio, 1e-9)
	ol := rows["open loop rate"]
	require.NotNil(t, ol.BaselineFirst)
	require.Nil(t, ol.CurrentFirst, "the reversed pass had no open loop")
	require.Nil(t, ol.Ratio)
	require.Nil(t, ol.Position)
	var out bytes.Buffer
	printBothOrders(&out, b)
	require.Regexp(t, `CPU per order, all processes incl\. Redis \(ms\)\s+0\.990\s+0\.818\s+0\.900\s+1\.100`, out.String())
}

func TestBothOrdersNeedsABaseline(t *testing.T) {
	_, err := parseOptions([]string{"-both-orders"})
	require.ErrorContains(t, err, "-both-orders needs -baseline")
	_, err = parseOptions([]string{"-both-orders", "-baseline", "HEAD"})
	require.NoError(t, err)
}
