package metricstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// The order workflow's families as docs/observability.md lists them; a reading
// holds each of their series (a histogram by its _count).
var families = []string{
	"shoppingmall_orders_started_total", "shoppingmall_orders_terminal_total", "shoppingmall_step_duration_seconds",
	"shoppingmall_step_retries_total", "shoppingmall_step_permanent_failures_total", "shoppingmall_grain_restarts_total",
	"shoppingmall_activations_total", "shoppingmall_activations_aborted_total", "shoppingmall_grains_hosted",
}

type reading map[string]float64

// scrape GETs a node's /metrics as a scraper does.
func scrape(t *testing.T, base string) reading {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := reading{}
	for _, name := range families {
		mf, ok := mfs[name]
		require.True(t, ok, "%s serves %s", base, name)
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				key += "_count"
			}
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func delta(before, after reading) reading {
	d := reading{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// expect is want on the series it names and 0 on every other series of r.
func expect(r, want reading) reading {
	out := reading{}
	for k := range r {
		out[k] = 0
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	res, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out
}

func orderStatus(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	var body struct {
		State struct {
			Status string `json:"status"`
		} `json:"state"`
	}
	_ = json.NewDecoder(res.Body).Decode(&body)
	return body.State.Status
}

// One order through the public API: the workflow node that owns it shows
// started +1, terminal{confirmed} +1, one cold activation, one grain more
// hosted and one sample per step it ran; the other shows nothing.
func TestOneOrderMovesTheOwnersMetricsByExactlyItsDeltas(t *testing.T) {
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		Env: localcluster.ChildEnv(os.Environ()), RequestTimeout: 10 * time.Second, Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	opt, err := redis.ParseURL(c.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
	require.NoError(t, err)
	require.NoError(t, cs.ApplySeed(ctx, commerce.DemoSeed()))

	before := map[string]reading{}
	for _, n := range localcluster.WorkflowNodes {
		u := c.MetricsURL(n)
		require.NotEmpty(t, u, "%s has a metrics listener", n)
		before[n] = scrape(t, u)
		t.Logf("%s serves its metrics at %s", n, u)
	}

	api := c.APIURL(localcluster.APIA)
	code, body := post(t, api+"/orders", fmt.Sprintf(`{"cartId":%q,"shippingAddressId":"addr-1","paymentMethodId":%q,"idempotencyKey":"metrics-%d"}`,
		commerce.DemoCartOK, commerce.DemoMethodOK, time.Now().UnixNano()))
	require.Equal(t, http.StatusCreated, code, "%v", body)
	orderID, _ := body["orderId"].(string)
	require.Eventually(t, func() bool { return orderStatus(t, api+"/orders/"+orderID) == "Confirmed" },
		30*time.Second, 20*time.Millisecond, "order %s confirms", orderID)

	const confirmed = `shoppingmall_orders_terminal_total{outcome="confirmed"}`
	var owner string
	after := map[string]reading{}
	require.Eventually(t, func() bool {
		owner = ""
		for _, n := range localcluster.WorkflowNodes {
			after[n] = scrape(t, c.MetricsURL(n))
			if after[n][confirmed]-before[n][confirmed] == 1 {
				owner = n
			}
		}
		return owner != ""
	}, 10*time.Second, 20*time.Millisecond, "a workflow node counts the confirmed order")
	t.Logf("order %s ran on %s", orderID, owner)

	d := delta(before[owner], after[owner])
	require.Equal(t, expect(d, reading{
		"shoppingmall_orders_started_total": 1,
		confirmed:                           1,
		`shoppingmall_activations_total{cause="cold"}`:                       1,
		"shoppingmall_grains_hosted":                                         1,
		`shoppingmall_step_duration_seconds_count{step="reserve_inventory"}`: 1,
		`shoppingmall_step_duration_seconds_count{step="authorize_payment"}`: 1,
		`shoppingmall_step_duration_seconds_count{step="confirm"}`:           1,
	}), d, "the owner's deltas")
	for _, n := range localcluster.WorkflowNodes {
		if n != owner {
			d := delta(before[n], after[n])
			require.Equal(t, expect(d, nil), d, "%s ran nothing of the order", n)
		}
	}
}
