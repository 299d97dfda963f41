package edge

import (
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
)

// LogMsgAccess is the message of the one access log line per request.
const LogMsgAccess = "http request"

// observe counts every request in the HTTP metrics and writes its access
// log line once the handler chain after it has answered (a panic
// included: recoverPanics, after it, turns that into a 500). The route is
// gin's template, never the raw path.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	d := time.Since(start)
	route := c.FullPath()
	if route == "" {
		route = RouteUnmatched
	}
	status := c.Writer.Status()
	s.metrics.observe(route, c.Request.Method, status, d)

	attrs := []slog.Attr{slog.String("method", c.Request.Method), slog.String("route", route),
		slog.Int("status", status), slog.Duration("duration", d)}
	if id := accessOrderID(c); id != "" {
		attrs = append(attrs, slog.String("orderId", id))
	}
	// The request id comes with the context (LogHandler).
	s.log.LogAttrs(c.Request.Context(), slog.LevelInfo, LogMsgAccess, attrs...)
}

// accessOrderID is the order the request was about: the one the handler
// noted, else a well-formed {orderId} of the route.
func accessOrderID(c *gin.Context) string {
	if ri := requestInfoOf(c.Request.Context()); ri != nil {
		if id := ri.order(); id != "" {
			return id
		}
	}
	if id := c.Param("orderId"); checkID("orderId", id) == nil {
		return id
	}
	return ""
}

// recoverPanics answers a handler's panic 500 INTERNAL, never showing it,
// and logs it with the request's id. It runs inside observe so that the
// 500 is counted and logged like any other answer.
func (s *Server) recoverPanics(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		r := c.Request
		s.log.ErrorContext(r.Context(), "handler panicked", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		if !c.Writer.Written() {
			s.writeError(c.Writer, http.StatusInternalServerError, apiError{Code: CodeInternal, Message: "internal error"})
		}
		c.Abort()
	}()
	c.Next()
}
