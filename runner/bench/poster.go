package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// poster is one overload worker's own HTTP/1.1 connections, one per API,
// on which it writes a POST and reads its answer on its own goroutine.
//
// Why not http.Client: at three times the cluster's peak the generator
// shares the machine's two cores with what it measures, so every
// microsecond it spends is taken from the cluster and shows up as lost
// goodput. http.Transport spends two goroutines per connection (its read
// and write loops), a pool under one mutex shared by a thousand workers,
// and channel hand-offs on every request. A worker that owns its sockets
// needs none of that, as in wrk-style generators; the request and the
// answer are still parsed by net/http (http.ReadResponse). A poster is
// not safe for concurrent use: each worker has its own.
type poster struct {
	apis    []posterAPI
	conns   []*posterConn
	timeout time.Duration
	dialer  net.Dialer
}

// posterAPI is one API's address and the request head its POSTs share.
type posterAPI struct {
	addr string
	head string // request line and headers, up to Content-Length's value
}

type posterConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// newPoster returns a poster for the APIs' base URLs (http://host:port),
// each POST bounded by timeout.
func newPoster(bases []string, path string, timeout time.Duration) (*poster, error) {
	p := &poster{conns: make([]*posterConn, len(bases)), timeout: timeout, dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("bench: API base %q is not http://host:port", b)
		}
		p.apis = append(p.apis, posterAPI{
			addr: u.Host,
			head: "POST " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: shoppingmall-bench\r\nContent-Type: application/json\r\nContent-Length: ",
		})
	}
	return p, nil
}

// post sends body to API i and returns the answer's status, headers and
// body (at most 1 MiB). A connection the server closed while it sat idle
// fails (EOF, or a reset) without an answer; the POST is then sent once
// more on a new connection, as http.Transport does for such a failure.
// Every start carries its idempotency key, so a repeat can only find the
// same order. A timeout is never repeated.
func (p *poster) post(ctx context.Context, i int, body []byte) (int, http.Header, []byte, error) {
	reused := p.conns[i] != nil
	code, h, raw, err := p.once(ctx, i, body)
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	if err != nil && reused && ctx.Err() == nil && !timedOut {
		return p.once(ctx, i, body)
	}
	return code, h, raw, err
}

func (p *poster) once(ctx context.Context, i int, body []byte) (int, http.Header, []byte, error) {
	pc := p.conns[i]
	if pc == nil {
		c, err := p.dialer.DialContext(ctx, "tcp", p.apis[i].addr)
		if err != nil {
			return 0, nil, nil, err
		}
		pc = &posterConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096)}
		p.conns[i] = pc
	}
	fail := func(err error) (int, http.Header, []byte, error) {
		_ = pc.c.Close()
		p.conns[i] = nil
		return 0, nil, nil, err
	}
	if err := pc.c.SetDeadline(time.Now().Add(p.timeout)); err != nil {
		return fail(err)
	}
	// The phase's end cuts a POST in flight at once, not at its deadline.
	stop := context.AfterFunc(ctx, func() { _ = pc.c.SetDeadline(time.Now()) })
	defer stop()
	_, _ = pc.bw.WriteString(p.apis[i].head)
	_, _ = pc.bw.WriteString(strconv.Itoa(len(body)))
	_, _ = pc.bw.WriteString("\r\n\r\n")
	_, _ = pc.bw.Write(body)
	if err := pc.bw.Flush(); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		return fail(err)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil {
		return fail(err)
	}
	if resp.Close || len(raw) == 1<<20 {
		// The server ends the connection after this answer, or the rest
		// of an oversized body is still unread on it.
		_, _, _, _ = fail(nil)
	}
	return resp.StatusCode, resp.Header, raw, nil
}

// close closes the poster's connections.
func (p *poster) close() {
	for i, pc := range p.conns {
		if pc != nil {
			_ = pc.c.Close()
			p.conns[i] = nil
		}
	}
}
