package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestShareSpreadsARateOverOrders(t *testing.T) {
	for _, r := range []float64{0, 0.25, 1, 2.5, 7.2} {
		total := 0
		for k := int64(0); k < 1000; k++ {
			n := share(r, k)
			require.GreaterOrEqual(t, n, 0)
			total += n
		}
		require.InDelta(t, r*1000, float64(total), 1, "rate %v", r)
	}
}

func TestPathMixIsExactPerHundred(t *testing.T) {
	l := newLoad(loadConfig{APIs: []string{"a"}, Concurrency: 1, InventoryPct: 5, PaymentPct: 5})
	got := map[string]int{}
	for n := int64(1); n <= 100; n++ {
		got[l.pathOf(n)]++
	}
	require.Equal(t, map[string]int{pathSuccess: 90, pathInventory: 5, pathPayment: 5}, got)
}

func TestParseCommandstatsAndDeriveMix(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=30,usec=900,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hmget:calls=50,usec=100,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_xadd:calls=40,usec=80,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=4,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	cs := parseCommandstats(info)
	require.Equal(t, cmdStat{Calls: 30, Usec: 900}, cs["evalsha"])
	require.Equal(t, int64(4), cs["client|setinfo"].Calls)
	// Clients sent 30 HMGETs themselves; the other 20 and every XADD ran
	// inside scripts.
	m := deriveMix(map[string]int64{"evalsha": 30, "hmget": 50, "xadd": 40}, map[string]int64{"evalsha": 30, "hmget": 30}, 10)
	require.InDelta(t, 3.0, m.ScriptCalls, 1e-9)
	require.Equal(t, map[string]float64{"hmget": 3}, m.TopLevel)
	require.Equal(t, map[string]float64{"hmget": 2, "xadd": 4}, m.Inner)
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(ds)
	// HdrHistogram's buckets at 3 significant digits: each figure is the
	// top of its value's bucket, within 0.1 % above it.
	require.Equal(t, 100, p.N)
	for _, c := range []struct{ got, want float64 }{{p.P50, 50}, {p.P95, 95}, {p.P99, 99}, {p.Max, 100}} {
		require.GreaterOrEqual(t, c.got, c.want)
		require.InDelta(t, c.want, c.got, c.want/1000)
	}
	require.Equal(t, pct{}, percentiles(nil))
}

func TestPlotWritesAPNG(t *testing.T) {
	var res loadResult
	for i := 0; i < 500; i++ {
		res.Results = append(res.Results, orderResult{
			Status: "Confirmed", Start: time.Duration(i) * 10 * time.Millisecond,
			StartLat: time.Duration(2+i%7) * time.Millisecond, E2E: time.Duration(10+i%23) * time.Millisecond,
		})
	}
	res.Elapsed = 5 * time.Second
	path := filepath.Join(t.TempDir(), "p.png")
	require.NoError(t, plotResults(path, res))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 500)
}
