package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// DefaultRequestTimeout bounds a request when Config.RequestTimeout is 0.
const DefaultRequestTimeout = 10 * time.Second

// Server is the CommerceApi HTTP edge. It serves two handlers on two
// listeners: the public order API (the Server itself as an http.Handler,
// Serve) and, when enabled, the admin surface (AdminHandler, ServeAdmin):
// /admin/, what the wiring mounts (the runner's /self-check/) and
// /debug/pprof/, every request authenticated by the admin bearer token. No
// admin route exists on the public handler. Safe for concurrent use.
type Server struct {
	cfg       Config
	log       *slog.Logger
	evidence  *telemetry.Evidence
	metrics   *httpMetrics
	engine    *gin.Engine // public routes
	admin     *gin.Engine // admin routes; nil when the admin surface is off
	token     telemetry.Bearer
	http      *http.Server
	adminHTTP *http.Server
	listening atomic.Bool
	served    atomic.Bool
	adminUp   atomic.Bool
	waits     waitGate   // ends the waits in flight at Shutdown (wait.go)
	admission *admission // the public routes' in-flight budgets (admission.go)
	// tracker is cfg.Terminal when it vouches for the starts it saw
	// (readmodel.StartTracker), else nil.
	tracker readmodel.StartTracker
}

// New builds a Server from cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Lines logged with a request's context carry its id.
	cfg.Logger = slog.New(LogHandler(cfg.Logger.Handler()))
	if cfg.Evidence == nil {
		cfg.Evidence = io.Discard
	}
	if cfg.NewID == nil {
		cfg.NewID = uuid.NewString
	}
	gin.SetMode(gin.ReleaseMode)
	ad := newAdmission(cfg.Admission)
	s := &Server{cfg: cfg, log: cfg.Logger, evidence: telemetry.NewEvidence(cfg.Evidence, cfg.Logger), metrics: newHTTPMetrics(cfg.Metrics, ad), admission: ad}
	s.tracker, _ = cfg.Terminal.(readmodel.StartTracker)
	if nc, ok := cfg.Terminal.(noticeCounts); ok {
		countNotices(cfg.Metrics, nc)
	}
	s.engine = s.newEngine(s.admit)
	s.routes()
	s.http = s.newHTTPServer(s.engine)
	s.http.RegisterOnShutdown(s.waits.end)
	if cfg.AdminToken != "" {
		s.token = telemetry.NewBearer(cfg.AdminToken)
		s.admin = s.newEngine()
		s.adminRoutes()
		s.adminHTTP = s.newHTTPServer(s.admin)
	}
	return s, nil
}

// newEngine is a gin engine answering only the routes it has: trailing-
// slash and fixed-path redirects would answer routes the contract does
// not have. A path it has, asked with a method it does not, is 405 with
// an Allow header (RFC 9110 §15.5.6) rather than 404, so that a client's
// wrong method is not mistaken for a missing route. Every request of it,
// unknown routes and wrong methods included, runs first the given
// middleware (the public engine's admission control, which must come
// before everything else, see admission.go), then the middleware chain.
func (s *Server) newEngine(first ...gin.HandlerFunc) *gin.Engine {
	e := gin.New()
	e.RedirectTrailingSlash, e.RedirectFixedPath = false, false
	// gin sets Allow before any middleware runs; the admin token check
	// takes it off a refused request (requireAdminToken).
	e.HandleMethodNotAllowed = true
	e.Use(first...)
	e.Use(s.middleware()...)
	return e
}

// middleware is the chain every request of both listeners runs, in this
// order, after the public listener's admission control (admission.go)
// and before the admin token check and the route's handler:
//
//   - requestID decides the request's id and puts it in its context;
//   - tracing makes the request's server span (tracing.go), right after
//     it, so that the span carries RequestID(ctx) and encloses everything
//     below;
//   - observe counts the request in the HTTP metrics and writes its access
//     log line once the rest has answered;
//   - recoverPanics turns a handler's panic into a 500 that observe sees.
func (s *Server) middleware() []gin.HandlerFunc {
	return []gin.HandlerFunc{
		s.requestID,
		s.tracing,
		s.observe,
		s.recoverPanics,
	}
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.RequestTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxBody,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
}

// routes are the public order API. The admin surface is never here: on
// the public listener its paths are unknown routes like any other.
func (s *Server) routes() {
	e := s.engine
	e.GET("/healthz", handle(s.healthz))
	e.GET("/readyz", handle(s.readyz))
	e.POST("/orders", handle(s.startOrder))
	e.GET("/orders/:orderId", handle(s.getOrder))
	e.POST("/orders/:orderId/continue", handle(s.continueOrder))
	e.POST("/orders/:orderId/rebuild-projection", handle(s.rebuildProjection))
	s.unmatched(e)
}

// adminRoutes are the admin listener's: the token check comes first, for
// every path and method, so an unauthenticated caller learns nothing of
// which routes exist (401 everywhere); only with the token are unknown
// routes 404 and wrong methods 405.
func (s *Server) adminRoutes() {
	e := s.admin
	e.Use(s.requireAdminToken)
	if s.cfg.Admin {
		e.POST("/admin/orders/:orderId/relocate", handle(s.adminRelocate))
		e.POST("/admin/orders/:orderId/close", handle(s.adminClose))
		if s.cfg.Stuck != nil {
			e.GET("/admin/orders/stuck", handle(s.stuckOrders))
			e.POST("/admin/orders/stuck/resume", handle(s.resumeStuck))
			e.POST("/admin/read-model/active-index/rebuild", handle(s.rebuildActiveIndex))
		}
		s.registerTakeover(e)
		s.registerTimeline(e)
	}
	for _, m := range s.cfg.Mounts {
		m.Mount(AdminRouter{s: s, e: e})
	}
	registerPprof(e)
	s.unmatched(e)
}

// unmatched answers what no route takes in the edge's error shape, not
// gin's text bodies: an unknown path, including disabled hooks, 404; a
// known path with another method 405, whose Allow header gin has set.
// Neither has a route template, so both are RouteUnmatched in the metrics
// and never admitted to a budget.
func (s *Server) unmatched(e *gin.Engine) {
	e.NoRoute(func(c *gin.Context) {
		s.fail(c.Writer, c.Request, fmt.Errorf("%w: %s %s", errNoRoute, c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		s.fail(c.Writer, c.Request, fmt.Errorf("%w: %s %s", errMethodNotAllowed, c.Request.Method, c.Request.URL.Path))
	})
}

// handle adapts a plain handler to gin; the path parameter travels as the
// request's path value so handlers stay framework-free.
func handle(h http.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		for _, p := range c.Params {
			c.Request.SetPathValue(p.Key, p.Value)
		}
		h(c.Writer, c.Request)
	}
}

// ServeHTTP implements http.Handler: the public order API. A panic in a
// handler is answered 500 INTERNAL and logged, never shown.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.engine.ServeHTTP(w, r)
}

// AdminHandler is the admin surface as an http.Handler, for ServeAdmin or
// a test; nil when Config.AdminToken is empty.
func (s *Server) AdminHandler() http.Handler {
	if s.admin == nil {
		return nil
	}
	return s.admin
}

// Serve answers the public API on ln until Shutdown. Once the listener
// accepts it prints `shoppingmall-ready kind=http node=<NodeId>` to the
// evidence writer, once. It returns http.ErrServerClosed after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if !s.served.CompareAndSwap(false, true) {
		return errors.New("edge: Serve called twice")
	}
	// The listener is bound: the kernel accepts connections from here on
	// and they queue until Serve takes them.
	s.listening.Store(true)
	s.evidence.Line("shoppingmall-ready kind=http node=" + s.cfg.NodeID)
	s.log.Info("http edge listening", slog.String("address", ln.Addr().String()))
	return s.http.Serve(ln)
}

// ErrNoAdmin: ServeAdmin on a Server without an admin token. The admin
// listener never starts unauthenticated.
var ErrNoAdmin = errors.New("edge: the admin listener needs an admin token")

// ServeAdmin answers the admin surface on ln until Shutdown; it returns
// http.ErrServerClosed after Shutdown.
func (s *Server) ServeAdmin(ln net.Listener) error {
	if s.admin == nil {
		return ErrNoAdmin
	}
	if !s.adminUp.CompareAndSwap(false, true) {
		return errors.New("edge: ServeAdmin called twice")
	}
	s.log.Info("admin listener up", slog.String("address", ln.Addr().String()),
		slog.Bool("admin", s.cfg.Admin), slog.Int("mounts", len(s.cfg.Mounts)))
	return s.adminHTTP.Serve(ln)
}

// Shutdown stops accepting on both listeners, waits for requests in
// flight until ctx ends, then closes.
func (s *Server) Shutdown(ctx context.Context) error {
	s.listening.Store(false)
	var errs []error
	if s.adminHTTP != nil {
		errs = append(errs, s.adminHTTP.Shutdown(ctx))
	}
	errs = append(errs, s.http.Shutdown(ctx))
	return errors.Join(errs...)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// StoreCheck is implemented by a Config.Topology that can also tell
// whether this process's stores answer; /readyz then answers 503 while
// they do not, since no order request could succeed.
type StoreCheck interface {
	// CheckStores returns nil when every store answers, bounded by ctx.
	CheckStores(ctx context.Context) error
}

// readyzStoreTimeout keeps /readyz against a down or hanging Redis (whose
// client retries a failed PING) below a probe's usual one-second timeout,
// so the probe gets a 503 rather than no answer.
const readyzStoreTimeout = 800 * time.Millisecond

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if !s.listening.Load() {
		s.writeError(w, http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonStarting,
			Message: "the HTTP listener is not up", retryAfter: retryAfterSoon})
		return
	}
	if sc, ok := s.cfg.Topology.(StoreCheck); ok {
		ctx, cancel := context.WithTimeout(r.Context(), readyzStoreTimeout)
		err := sc.CheckStores(ctx)
		cancel()
		if err != nil {
			// Probes repeat every few seconds: the cause goes to debug,
			// the client sees that the stores are the reason.
			s.log.DebugContext(r.Context(), "not ready: stores do not answer", slog.Any("error", err))
			s.writeError(w, http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonStoreUnavailable,
				Message: "the stores do not answer", retryAfter: retryAfterSoon})
			return
		}
	}
	if n := s.cfg.Topology.WorkflowMembers(); n == 0 {
		s.writeError(w, http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, Reason: ReasonNoEligibleMember,
			Message: "no order workflow member is in the topology", retryAfter: retryAfterNoMember})
	} else {
		s.writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "workflowMembers": n})
	}
}

// requestContext bounds a request's work by the configured timeout.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
}

// writeContext bounds a request that writes by the edge's request
// timeout alone: a client that hangs up does not cancel it. A write
// canceled half way has an outcome nobody knows (a reservation that took
// the key but answered nobody, a start recorded while its caller saw an
// error); run to its own deadline, it has an answer, which the client's
// retry with the same key finds. It keeps the request's values (its
// trace).
func (s *Server) writeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.RequestTimeout)
}

// fail answers err through httpError and logs what the client does not
// see: 5xx at warn/error with the full error, client errors at debug.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := httpError(err)
	attrs := []any{slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.String("code", body.Code), slog.Any("error", err)}
	ctx := r.Context()
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout:
		s.log.ErrorContext(ctx, "request failed", attrs...)
	case status >= 500:
		s.log.WarnContext(ctx, "request failed", attrs...)
	default:
		s.log.DebugContext(ctx, "request refused", attrs...)
	}
	s.writeError(w, status, body)
}

// writeError writes every error reply of the edge (writeProblem), so it
// is where answers with a reason (every 503 and 504) are counted, once
// each.
func (s *Server) writeError(w http.ResponseWriter, status int, e apiError) {
	if e.Reason != "" {
		s.metrics.unavailable.WithLabelValues(e.Reason).Inc()
	}
	writeProblem(w, status, e)
}

// writeJSON writes the hooks' own (non-contract) bodies.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	if err := telemetry.WriteJSON(w, status, v); err != nil {
		s.log.Error("encoding a reply failed", slog.Any("error", err))
		writeProblem(w, http.StatusInternalServerError, apiError{Code: CodeInternal, Message: "internal error"})
	}
}

// writeMessage writes a contract message with the contract codec.
func (s *Server) writeMessage(w http.ResponseWriter, r *http.Request, status int, m proto.Message) {
	b, err := contracts.MarshalJSON(m)
	if err != nil {
		s.fail(w, r, fmt.Errorf("encoding %s: %w", m.ProtoReflect().Descriptor().Name(), err))
		return
	}
	s.writeBody(w, status, b)
}

func (s *Server) writeBody(w http.ResponseWriter, status int, b []byte) {
	writeBody(w, status, "application/json", b)
}

// writeBody writes every reply body of the edge, of its media type.
func writeBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	telemetry.WriteBody(w, status, contentType, b)
}
