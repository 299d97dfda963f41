package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/edge"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

type httpRes struct {
	status     int
	body       map[string]any
	retryAfter string
}

// errorCode returns the problem details' code and reason (none when the
// body is not of the code's problem type).
func errorCode(r httpRes) (code, reason string) {
	code, _ = r.body["code"].(string)
	reason, _ = r.body["reason"].(string)
	if typ, _ := r.body["type"].(string); typ != edge.ProblemType(code) {
		return "", ""
	}
	return code, reason
}

// requireOwnerGone: a 503 alone could be a store outage or a missing
// member; only this reason says the owner is dead and nothing took over.
func requireOwnerGone(t *testing.T, r httpRes) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%v", r.body)
	code, reason := errorCode(r)
	require.Equal(t, edge.CodeUnavailable, code, "%v", r.body)
	require.Equal(t, edge.ReasonOwnerGone, reason, "%v", r.body)
	require.NotEmpty(t, r.retryAfter, "a 503 says when to come back")
}

func post(t *testing.T, url, body string) httpRes {
	t.Helper()
	res, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := httpRes{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
	_ = json.Unmarshal(b, &out.body)
	return out
}

func get(t *testing.T, url string) httpRes {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := httpRes{status: res.StatusCode}
	_ = json.Unmarshal(b, &out.body)
	return out
}

func status(r httpRes) string {
	st, _ := r.body["state"].(map[string]any)
	s, _ := st["status"].(string)
	return s
}

func TestOwnerKilledIsUnavailableWithoutFailover(t *testing.T) {
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)

	api := c.APIURL(localcluster.APIA)
	start := post(t, api+"/orders", fmt.Sprintf(`{"cartId":%q,"shippingAddressId":"addr-1","paymentMethodId":%q,"idempotencyKey":"crash-%d"}`,
		commerce.DemoCartOK, commerce.DemoMethodOK, time.Now().UnixNano()))
	require.Equal(t, http.StatusCreated, start.status, "%v", start.body)
	orderID, _ := start.body["orderId"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for status(get(t, api+"/orders/"+orderID)) != "Confirmed" {
		require.True(t, time.Now().Before(deadline), "order did not confirm")
		time.Sleep(20 * time.Millisecond)
	}

	before, err := loc.Get(ctx, grain.KindName, orderID)
	require.NoError(t, err)
	names, err := loc.MemberNames(ctx)
	require.NoError(t, err)
	owner := names[before.Owner]
	require.Contains(t, localcluster.WorkflowNodes, owner)

	killed := time.Now()
	require.NoError(t, c.Kill(owner))
	// Poll continue until the cluster has recorded the owner gone; every
	// answer must be UNAVAILABLE or (before detection) come from nowhere
	// else than the dead owner: never a success from a new activation.
	// Until its heartbeat is older than its bound (2 s), the owner is not
	// known to be dead, only unreachable: OWNER_UNREACHABLE, then
	// OWNER_GONE once it is recorded.
	var first, unreachableFor time.Duration
	var slowest time.Duration
	for {
		t0 := time.Now()
		r := post(t, api+"/orders/"+orderID+"/continue", `{}`)
		took := time.Since(t0)
		require.NotEqual(t, http.StatusOK, r.status, "a dead owner's order must not be served by anyone else")
		if _, reason := errorCode(r); r.status == http.StatusServiceUnavailable && reason == edge.ReasonOwnerUnreachable {
			unreachableFor = time.Since(killed)
			proctest.RequireFaster(t, unreachableFor, 10*time.Second, "a killed owner is still only unreachable")
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if r.status == http.StatusServiceUnavailable {
			requireOwnerGone(t, r)
			first = time.Since(killed)
			slowest = took
			break
		}
		require.True(t, time.Since(killed) < 30*time.Second, "no UNAVAILABLE after the kill: last %d %v", r.status, r.body)
	}
	t.Logf("after SIGKILL of %s: OWNER_UNREACHABLE until %s, first OWNER_GONE %s after the kill; that request took %s",
		owner, unreachableFor, first, slowest)
	var worst time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		r := post(t, api+"/orders/"+orderID+"/continue", `{}`)
		took := time.Since(t0)
		requireOwnerGone(t, r)
		proctest.RequireFaster(t, took, time.Second, "UNAVAILABLE is fast, not a timeout")
		worst = max(worst, took)
	}
	t.Logf("once the owner is known gone, UNAVAILABLE over HTTP takes at most %s (20 requests)", worst)
	require.Equal(t, "Confirmed", status(get(t, api+"/orders/"+orderID)), "GET keeps working from the read model")

	// The same node name comes back as a new incarnation: still no failover.
	require.NoError(t, c.Restart(ctx, owner))
	r := post(t, c.APIURL(localcluster.APIB)+"/orders/"+orderID+"/rebuild-projection", `{}`)
	requireOwnerGone(t, r)
	after, err := loc.Get(ctx, grain.KindName, orderID)
	require.NoError(t, err)
	require.Equal(t, before, after, "the Location record is untouched")
}
