package telemetry

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBearer(t *testing.T) {
	req := func(auth string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	b := NewBearer("s3cret")
	require.True(t, b.Guards())
	for _, tc := range []struct {
		auth          string
		ok, presented bool
	}{
		{"Bearer s3cret", true, true},
		{"Bearer  s3cret ", true, true},
		{"Bearer s3cre", false, true},
		{"Bearer s3cret2", false, true},
		{"Bearer ", false, true},
		{"Basic s3cret", false, false},
		{"s3cret", false, false},
		{"", false, false},
	} {
		ok, presented := b.Check(req(tc.auth))
		require.Equal(t, tc.ok, ok, "%q", tc.auth)
		require.Equal(t, tc.presented, presented, "%q", tc.auth)
	}
	open := NewBearer("")
	require.False(t, open.Guards())
	ok, _ := open.Check(req(""))
	require.True(t, ok, "no token guards nothing")
}

func TestWriteJSON(t *testing.T) {
	w := httptest.NewRecorder()
	require.NoError(t, WriteJSON(w, http.StatusTeapot, map[string]string{"status": "ok"}))
	require.Equal(t, http.StatusTeapot, w.Code)
	require.Equal(t, "{\"status\":\"ok\"}\n", w.Body.String())
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	require.Equal(t, "16", w.Header().Get("Content-Length"))
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))

	w = httptest.NewRecorder()
	require.Error(t, WriteJSON(w, http.StatusOK, func() {}))
	require.Zero(t, w.Body.Len(), "nothing written for a value that does not encode")
}

// countingWriter records each Write, so a test sees lines torn across
// writes.
type countingWriter struct {
	mu     sync.Mutex
	writes []string
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

// Many goroutines writing through writers of one underlying Evidence
// write whole lines, one Write each; NewEvidence of an Evidence is the
// same writer, so parts that share one share its lock.
func TestEvidenceLinesStayWhole(t *testing.T) {
	out := &countingWriter{}
	e := NewEvidence(out, nil)
	require.Same(t, e, NewEvidence(e, nil))
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				NewEvidence(e, nil).Line(strings.Repeat(string(rune('a'+g%26)), 10+i))
			}
		}()
	}
	wg.Wait()
	require.Len(t, out.writes, 3200)
	for _, w := range out.writes {
		require.True(t, strings.HasSuffix(w, "\n") && strings.Count(w, "\n") == 1, "%q", w)
		require.Equal(t, strings.Repeat(w[:1], len(w)-1), w[:len(w)-1], "a torn line")
	}
	NewEvidence(nil, nil).Line("discarded")
}
