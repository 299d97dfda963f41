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

	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

var (
	// ErrNotJoined: the process's cluster member has not joined the
	// topology yet (or no longer sees itself in it).
	ErrNotJoined = errors.New("node: cluster member not joined")
	// ErrDraining: the process is stopping and hands its work off.
	ErrDraining = errors.New("node: draining")
)

// Readiness is what a process's /readyz reports. The stores are checked
// with a PING at every probe rather than remembered, so a Redis that
// restarts under a running process turns it unready and ready again
// without the process doing anything.
type Readiness struct {
	stores   *Stores
	member   atomic.Pointer[cluster.Member]
	draining atomic.Bool
	durable  atomic.Pointer[DurableWatch]
}

// WatchDurable adds the condition "durable": w's latest verdict, so that
// a store that stops keeping acknowledged writes at run time (a failover
// onto an unsafe replica) turns the process unready.
func (r *Readiness) WatchDurable(w *DurableWatch) { r.durable.Store(w) }

// DurableErr is the "durable" condition alone: nil without a watch.
func (r *Readiness) DurableErr() error {
	if w := r.durable.Load(); w != nil {
		return w.Err()
	}
	return nil
}

// NewReadiness returns a Readiness for a process whose member has not
// joined yet.
func NewReadiness(s *Stores) *Readiness { return &Readiness{stores: s} }

// Joined records the process's member once cluster.Start returned it.
func (r *Readiness) Joined(m *cluster.Member) { r.member.Store(m) }

// Draining marks the process as stopping: it stays unready from here on,
// so a load balancer stops sending before the member leaves.
func (r *Readiness) Draining() { r.draining.Store(true) }

// Condition is one readiness condition and why it does not hold (Err nil
// when it does).
type Condition struct {
	Name string
	Err  error
}

// Check evaluates every condition, stores first. ctx bounds the PINGs.
func (r *Readiness) Check(ctx context.Context) []Condition {
	out := []Condition{{Name: "stores", Err: r.stores.Ping(ctx)}}
	m := r.member.Load()
	var member error
	switch {
	case r.draining.Load():
		member = ErrDraining
	case m == nil:
		member = fmt.Errorf("%w: still starting", ErrNotJoined)
	case !m.Lookup.Live(m.ID()):
		member = fmt.Errorf("%w: member %s is not in its own topology", ErrNotJoined, m.ID())
	}
	out = append(out, Condition{Name: "member", Err: member})
	if w := r.durable.Load(); w != nil {
		out = append(out, Condition{Name: "durable", Err: w.Err()})
	}
	return out
}

// DefaultReadyzTimeout bounds the store PINGs of one /readyz. A PING to a
// down Redis is retried by its client; the bound keeps the reply below a
// probe's usual one-second timeout, so the probe gets a 503, not no
// answer.
const DefaultReadyzTimeout = 800 * time.Millisecond

// DefaultOpsAddr is the -ops-http default: loopback on a port the kernel
// picks, so two workflow processes on one host never collide; a pod sets
// a fixed, reachable address for its probes.
const DefaultOpsAddr = "127.0.0.1:0"

// OpsConfig configures an operations listener.
type OpsConfig struct {
	// Addr is the listen address; default DefaultOpsAddr.
	Addr      string
	Readiness *Readiness
	// CheckTimeout bounds the store PINGs of one /readyz; default
	// DefaultReadyzTimeout.
	CheckTimeout time.Duration
	// Token, when set, is the bearer token /debug/pprof/ requires
	// (`Authorization: Bearer <Token>`); the probes never need it.
	// Without one the profiles are open to whoever reaches Addr.
	Token  string
	Logger *slog.Logger
}

// Ops is a running operations listener: /healthz answers 200 while the
// process runs, /readyz 200 when every readiness condition holds and 503
// otherwise; both bodies name each condition. /debug/pprof/ serves the
// process's profiles, behind OpsConfig.Token when one is set.
type Ops struct {
	cfg  OpsConfig
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// StartOps binds cfg.Addr and serves on it until Shutdown. A taken or
// malformed address fails here, before the process waits for anything.
func StartOps(cfg OpsConfig) (*Ops, error) {
	if cfg.Readiness == nil {
		return nil, errors.New("node: OpsConfig.Readiness is required")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultOpsAddr
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultReadyzTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ops listen %s: %w", cfg.Addr, err)
	}
	o := &Ops{cfg: cfg, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", o.healthz)
	mux.HandleFunc("GET /readyz", o.readyz)
	mux.Handle(telemetry.PprofPrefix, requireBearer(cfg.Token, telemetry.Pprof(), cfg.Logger))
	if ap, ok := ln.Addr().(*net.TCPAddr); ok && !ap.IP.IsLoopback() && cfg.Token == "" {
		cfg.Logger.Warn("the ops listener is not on loopback and has no token: its /debug/pprof/ is open to anyone who reaches it", "ops", ln.Addr().String())
	}
	o.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(o.done)
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("ops listener ended", slog.Any("error", err))
		}
	}()
	return o, nil
}

// Addr is the bound address (the real port when Addr asked for 0).
func (o *Ops) Addr() string { return o.ln.Addr().String() }

// Shutdown stops the listener, waiting for probes in flight until ctx
// ends.
func (o *Ops) Shutdown(ctx context.Context) error {
	err := o.srv.Shutdown(ctx)
	<-o.done
	return err
}

// opsReply is the body of both endpoints: status "ok" (healthz), "ready"
// or "unready", and per condition "ok" or why not.
type opsReply struct {
	Status     string            `json:"status"`
	Conditions map[string]string `json:"conditions,omitempty"`
}

func (o *Ops) healthz(w http.ResponseWriter, r *http.Request) {
	writeOpsJSON(w, http.StatusOK, opsReply{Status: "ok"})
}

func (o *Ops) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), o.cfg.CheckTimeout)
	defer cancel()
	cs := o.cfg.Readiness.Check(ctx)
	rep := opsReply{Status: "ready", Conditions: map[string]string{}}
	for _, c := range cs {
		rep.Conditions[c.Name] = "ok"
		if c.Err != nil {
			rep.Status, rep.Conditions[c.Name] = "unready", c.Err.Error()
		}
	}
	status := http.StatusOK
	if rep.Status != "ready" {
		status = http.StatusServiceUnavailable
	}
	writeOpsJSON(w, status, rep)
}

// requireBearer lets a request through to next only with the bearer
// token (telemetry.Bearer); an empty token lets every request through.
func requireBearer(token string, next http.Handler, log *slog.Logger) http.Handler {
	bearer := telemetry.NewBearer(token)
	if !bearer.Guards() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, presented := bearer.Check(r)
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		// Who knocked goes to the log, never what they sent.
		log.Warn("ops request refused: missing or wrong bearer token", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr), slog.Bool("bearer", presented))
		w.Header().Set("WWW-Authenticate", `Bearer realm="shoppingmall-ops"`)
		writeOpsJSON(w, http.StatusUnauthorized, opsReply{Status: "unauthenticated"})
	})
}

// writeOpsJSON writes an ops reply; its bodies are strings only, so they
// always encode.
func writeOpsJSON(w http.ResponseWriter, status int, v any) { _ = telemetry.WriteJSON(w, status, v) }
