package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func startTestOps(t *testing.T, token string) string {
	t.Helper()
	// No Redis answers at this URL: the probes are not what is tested.
	s, err := NewStores(RedisURLs{Default: "redis://127.0.0.1:1/0"}, StoreOptions{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	ops, err := StartOps(OpsConfig{Readiness: NewReadiness(s), Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ops.Shutdown(context.Background()) })
	return "http://" + ops.Addr()
}

func opsGet(t *testing.T, url, auth string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(b)
}

func TestOpsPprofNeedsTheTokenWhenOneIsSet(t *testing.T) {
	const token = "ops-test-token-0123456789"
	base := startTestOps(t, token)
	for _, c := range []struct{ name, auth string }{
		{"no header", ""},
		{"wrong token", "Bearer not-the-token"},
		{"token prefix", "Bearer " + token[:5]},
		{"other scheme", "Basic " + token},
		{"bare token", token},
	} {
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			code, h, body := opsGet(t, base+p, c.auth)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s", c.name, p)
			require.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
			require.NotContains(t, body, "goroutine")
		}
	}
	code, _, body := opsGet(t, base+"/debug/pprof/", "Bearer "+token)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine")
	code, _, body = opsGet(t, base+"/debug/pprof/cmdline", "Bearer "+token)
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasSuffix(strings.Split(body, "\x00")[0], ".test"), "cmdline names this test binary: %q", body)
	// Probes never need the token.
	code, _, _ = opsGet(t, base+"/healthz", "")
	require.Equal(t, http.StatusOK, code)
}

func TestOpsPprofWithoutATokenIsOpen(t *testing.T) {
	base := startTestOps(t, "")
	code, _, body := opsGet(t, base+"/debug/pprof/", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine")
}
