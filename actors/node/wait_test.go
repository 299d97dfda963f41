package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// loadingRedis speaks just enough RESP to stand for a redis-server that
// is still loading its data set: PING answers LOADING until done is set.
// A real server cannot be held in LOADING on demand.
type loadingRedis struct {
	ln    net.Listener
	done  atomic.Bool
	pings atomic.Int64
}

func startLoadingRedis(t *testing.T) *loadingRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &loadingRedis{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); f.serve(c) }()
		}
	}()
	return f
}

func (f *loadingRedis) url() string { return "redis://" + f.ln.Addr().String() + "/0" }

func (f *loadingRedis) serve(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for {
		args, err := readCommand(rd)
		if err != nil {
			return
		}
		reply := "+OK\r\n"
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			f.pings.Add(1)
			reply = "-LOADING Redis is loading the dataset in memory\r\n"
			if f.done.Load() {
				reply = "+PONG\r\n"
			}
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(rd *bufio.Reader) ([]string, error) {
	head, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "*")))
	if err != nil || n < 1 {
		return nil, io.ErrUnexpectedEOF
	}
	args := make([]string, n)
	for i := range args {
		l, err := rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "$")))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// The failure this exists for: a Redis loading its append-only file
// answers LOADING, and the process waits instead of exiting.
func TestWaitStoresRidesOutLoading(t *testing.T) {
	f := startLoadingRedis(t)
	s, err := NewStores(RedisURLs{Default: f.url()}, StoreOptions{})
	require.NoError(t, err)
	defer s.Close()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- WaitStores(context.Background(), s, WaitConfig{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond, Logger: testLogger(&logs)})
	}()
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "LOADING") >= 3 }, 10*time.Second, 20*time.Millisecond, "three logged LOADING checks")
	select {
	case err := <-done:
		require.FailNow(t, "WaitStores returned while Redis was loading", "%v", err)
	default:
	}
	f.done.Store(true)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "WaitStores did not return once Redis answered")
	}
	require.Contains(t, logs.String(), `"msg":"stores do not answer yet; waiting"`)
	require.Contains(t, logs.String(), `"msg":"stores answer"`)
}

// Backoff is exponential and capped: after the cap, checks are Max apart.
func TestWaitStoresBackoffIsCapped(t *testing.T) {
	f := startLoadingRedis(t)
	s, err := NewStores(RedisURLs{Default: f.url()}, StoreOptions{})
	require.NoError(t, err)
	defer s.Close()
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WaitStores(ctx, s, WaitConfig{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Logger: testLogger(&logs)})
	}()
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "\n") >= 6 }, 10*time.Second, 20*time.Millisecond, "six failed checks")
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrStoresUnavailable, "the last check's failure travels with the cancellation")

	var pauses []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			RetryIn int64  `json:"retryIn"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Msg == "stores do not answer yet; waiting" {
			pauses = append(pauses, time.Duration(rec.RetryIn))
		}
	}
	require.GreaterOrEqual(t, len(pauses), 4)
	// Full jitter under a bound that doubles from Initial to Max.
	for i, p := range pauses {
		bound := min(5*time.Millisecond<<i, 20*time.Millisecond)
		require.LessOrEqual(t, p, bound+time.Nanosecond, "pause %d: %v", i+1, pauses)
	}
}

// A Redis that is not running yet: connections are refused until it
// starts, and then the wait ends without the stores being reopened.
func TestWaitStoresUntilRedisStarts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	s, err := NewStores(RedisURLs{Default: "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"}, StoreOptions{})
	require.NoError(t, err, "building the stores does not contact Redis")
	defer s.Close()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- WaitStores(context.Background(), s, WaitConfig{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Logger: testLogger(&logs)})
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "connection refused") }, 10*time.Second, 20*time.Millisecond, "a logged refused check")

	srv, err := redisserver.Start(context.Background(), redisserver.Config{Port: port})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		require.FailNow(t, "WaitStores did not return once Redis started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Ping(ctx))
}

func TestOpsAnswersHealthAndWhyNotReady(t *testing.T) {
	f := startLoadingRedis(t)
	s, err := NewStores(RedisURLs{Default: f.url()}, StoreOptions{})
	require.NoError(t, err)
	defer s.Close()
	ready := NewReadiness(s)
	ops, err := StartOps(OpsConfig{Readiness: ready, CheckTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ops.Shutdown(context.Background()) })
	require.True(t, strings.HasPrefix(ops.Addr(), "127.0.0.1:"), "loopback by default: %s", ops.Addr())

	get := func(path string) (int, opsReply) {
		res, err := http.Get("http://" + ops.Addr() + path)
		require.NoError(t, err)
		defer res.Body.Close()
		var rep opsReply
		require.NoError(t, json.NewDecoder(res.Body).Decode(&rep))
		return res.StatusCode, rep
	}
	code, rep := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", rep.Status)

	code, rep = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unready", rep.Status)
	require.Contains(t, rep.Conditions["stores"], "LOADING")
	require.Contains(t, rep.Conditions["member"], "not joined")

	f.done.Store(true)
	code, rep = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "the stores answer, but no member has joined")
	require.Equal(t, "ok", rep.Conditions["stores"])

	ready.Draining()
	_, rep = get("/readyz")
	require.Contains(t, rep.Conditions["member"], "draining")

	res, err := http.Get("http://" + ops.Addr() + "/orders")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode, "the ops listener serves nothing else")
}

func TestStoreNamesHideThePassword(t *testing.T) {
	s, err := NewStores(RedisURLs{Default: "redis://:s3cret@127.0.0.1:1/0"}, StoreOptions{})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = s.Ping(ctx)
	require.ErrorIs(t, err, ErrStoresUnavailable)
	require.NotContains(t, err.Error(), "s3cret")
}
