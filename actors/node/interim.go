package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// ErrHandedOff: the interim server already gave its listener away.
var ErrHandedOff = errors.New("node: listener already handed off")

// Interim answers on a process's public listener while the process starts
// (waits for its stores, joins the cluster), so a probe or a client gets a
// 503 rather than a refused connection, and then hands the still-bound
// socket to the real server: no moment where the port is free for another
// process to take, and connections that arrive during the handoff wait in
// the kernel's accept queue.
type Interim struct {
	ln     *pausableListener
	srv    *http.Server
	done   chan struct{}
	handed atomic.Bool
}

// deadliner is what a listener needs for a handoff: its blocked Accept
// can be woken without closing the socket.
type deadliner interface {
	SetDeadline(time.Time) error
}

// ServeInterim serves h on ln until Handoff. ln must support SetDeadline
// (TCP and unix listeners do).
func ServeInterim(ln net.Listener, h http.Handler, log *slog.Logger) (*Interim, error) {
	if _, ok := ln.(deadliner); !ok {
		return nil, fmt.Errorf("node: interim: listener %T cannot be handed off", ln)
	}
	if log == nil {
		log = slog.Default()
	}
	i := &Interim{
		ln: &pausableListener{Listener: ln},
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(i.done)
		if err := i.srv.Serve(i.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("interim listener ended", slog.Any("error", err))
		}
	}()
	return i, nil
}

// Handoff stops the interim server, waiting until ctx ends for the
// requests it is answering, and returns the listener, still bound and
// accepting, for the real server.
func (i *Interim) Handoff(ctx context.Context) (net.Listener, error) {
	if !i.handed.CompareAndSwap(false, true) {
		return nil, ErrHandedOff
	}
	err := i.srv.Shutdown(ctx)
	<-i.done
	if err != nil {
		return nil, fmt.Errorf("node: interim: %w", err)
	}
	// Accept was woken with a past deadline; the real server must block.
	if err := i.ln.Listener.(deadliner).SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("node: interim: %w", err)
	}
	return i.ln.Listener, nil
}

// Close stops the interim server and closes the listener: the process
// stops before it was ready.
func (i *Interim) Close() error {
	ln, err := i.Handoff(context.Background())
	if errors.Is(err, ErrHandedOff) {
		return nil
	}
	if err != nil {
		_ = i.ln.Listener.Close()
		return err
	}
	return ln.Close()
}

// pausableListener is closed for the interim http.Server (which closes its
// listener on Shutdown) without closing the socket underneath.
type pausableListener struct {
	net.Listener
	paused atomic.Bool
}

func (l *pausableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && l.paused.Load() {
		return nil, net.ErrClosed
	}
	// A connection accepted just as the pause began is still served: the
	// shutdown waits for it, so the client gets an answer, not a reset.
	return c, err
}

func (l *pausableListener) Close() error {
	l.paused.Store(true)
	return l.Listener.(deadliner).SetDeadline(time.Now())
}
