package node

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func text(h string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, h) })
}

func body(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	res, err := c.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// The interim server and the real one take turns on one bound socket;
// a kept-alive connection to the interim one is closed by the handoff,
// and the next request reaches the real server on the same address.
func TestInterimHandsTheListenerOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/"
	in, err := ServeInterim(ln, text("starting"), nil)
	require.NoError(t, err)
	c := &http.Client{Timeout: 5 * time.Second}
	require.Equal(t, "starting", body(t, c, url))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := in.Handoff(ctx)
	require.NoError(t, err)
	require.Equal(t, ln.Addr().String(), got.Addr().String())
	_, err = in.Handoff(ctx)
	require.ErrorIs(t, err, ErrHandedOff)
	require.NoError(t, in.Close(), "closing after a handoff leaves the new owner's listener alone")

	srv := &http.Server{Handler: text("serving"), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(got) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	require.Equal(t, "serving", body(t, c, url))
}

func TestInterimCloseFreesThePort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	in, err := ServeInterim(ln, text("starting"), nil)
	require.NoError(t, err)
	require.NoError(t, in.Close())
	again, err := net.Listen("tcp", addr)
	require.NoError(t, err, "a process that stops before it is ready leaves its port free")
	again.Close()
}
