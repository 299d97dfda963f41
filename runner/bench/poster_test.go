package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoAPI answers each POST with its body's length, and with
// "Connection: close" when the body says so.
func echoAPI(t *testing.T, conns *atomic.Int64, closed *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/orders" || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if string(b) == `"close"` {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("X-Len", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// A poster keeps one connection per API across POSTs, follows a
// "Connection: close" answer with a new connection, and sends a POST
// again on a new connection when the server closed the idle one.
func TestPosterReusesAndRedialsItsConnection(t *testing.T) {
	var conns, closed atomic.Int64
	srv := echoAPI(t, &conns, &closed)
	p, err := newPoster([]string{srv.URL}, "/orders", 5*time.Second)
	require.NoError(t, err)
	defer p.close()
	ctx := context.Background()

	for i := range 20 {
		body := []byte(`{"n":` + strconv.Itoa(i) + `}`)
		code, h, raw, err := p.post(ctx, 0, body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code)
		require.Equal(t, body, raw)
		require.Equal(t, strconv.Itoa(len(body)), h.Get("X-Len"))
	}
	require.EqualValues(t, 1, conns.Load(), "twenty POSTs on one connection")

	code, _, _, err := p.post(ctx, 0, []byte(`"close"`))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	require.Nil(t, p.conns[0], "the server ends the connection: the poster drops it")
	code, _, _, err = p.post(ctx, 0, []byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	require.EqualValues(t, 2, conns.Load())

	// The server closes the idle connection behind the poster's back.
	srv.Config.SetKeepAlivesEnabled(false)
	srv.CloseClientConnections()
	require.Eventually(t, func() bool { return closed.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	srv.Config.SetKeepAlivesEnabled(true)
	code, _, raw, err := p.post(ctx, 0, []byte(`{"again":1}`))
	require.NoError(t, err, "a POST on a connection the server closed is sent again on a new one")
	require.Equal(t, http.StatusCreated, code)
	require.Equal(t, `{"again":1}`, string(raw))
	require.EqualValues(t, 3, conns.Load())
}

// The phase's end cuts a POST in flight at once.
func TestPosterGivesUpWithItsContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { <-release }))
	t.Cleanup(func() { close(release); srv.Close() })
	p, err := newPoster([]string{srv.URL}, "/orders", time.Minute)
	require.NoError(t, err)
	defer p.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, _, err := p.post(ctx, 0, []byte(`{}`))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled POST still waits for its answer")
	}
}

func TestPosterRefusesABaseThatIsNotHTTP(t *testing.T) {
	_, err := newPoster([]string{"https://127.0.0.1:1"}, "/orders", time.Second)
	require.Error(t, err)
	_, err = newPoster([]string{"127.0.0.1:1"}, "/orders", time.Second)
	require.Error(t, err)
}
