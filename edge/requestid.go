package edge

import (
	"context"
	"log/slog"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
)

// HeaderRequestID carries a request's id: a client may send one, and
// every reply of both listeners echoes the id the edge used.
const HeaderRequestID = "X-Request-Id"

// MaxRequestIDLen bounds a client's request id; a longer one is replaced.
const MaxRequestIDLen = 128

// LogKeyRequestID is the log key of a request's id.
const LogKeyRequestID = "requestId"

// requestInfo is what the edge knows about the request being served,
// carried in its context. The id never changes; the order id is noted by
// the handler once it knows which order the request is about.
type requestInfo struct {
	id string

	mu      sync.Mutex
	orderID string
}

type requestInfoKey struct{}

// RequestID returns the id of the request ctx belongs to (the edge's
// X-Request-Id), or "" outside a request served by the edge. Tracing and
// logging read it from here.
func RequestID(ctx context.Context) string {
	if ri := requestInfoOf(ctx); ri != nil {
		return ri.id
	}
	return ""
}

func requestInfoOf(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// noteOrder records which order the request is about, for its access log
// line, when the path does not name it (POST /orders learns it from the
// idempotency reservation).
func noteOrder(ctx context.Context, orderID string) {
	if ri := requestInfoOf(ctx); ri != nil {
		ri.mu.Lock()
		ri.orderID = orderID
		ri.mu.Unlock()
	}
}

func (ri *requestInfo) order() string {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	return ri.orderID
}

// saneRequestID reports whether a client's id can be kept: 1 to
// MaxRequestIDLen characters, each an HTTP token character (RFC 9110
// tchar), so that it reads the same in a header, a log line and a span.
func saneRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !isTokenChar(id[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// requestID is the first middleware of both listeners: it decides the
// request's id, echoes it in the reply and puts it in the request's
// context. A request the edge dispatches to itself (the stuck resume's
// takeover) keeps its caller's id.
func (s *Server) requestID(c *gin.Context) {
	ctx := c.Request.Context()
	id := RequestID(ctx)
	if id == "" {
		id = c.Request.Header.Get(HeaderRequestID)
		if !saneRequestID(id) {
			id = uuid.NewString()
		}
	}
	c.Writer.Header().Set(HeaderRequestID, id)
	c.Request = c.Request.WithContext(context.WithValue(ctx, requestInfoKey{}, &requestInfo{id: id}))
	c.Next()
}

// LogHandler wraps h so that every record logged with the context of a
// request the edge serves (InfoContext(r.Context(), ...) and the like)
// carries its id under LogKeyRequestID. Wrapping twice adds it once. New
// wraps Config.Logger's handler with it; wiring may wrap the process's
// logger so that other packages' lines carry it too.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(requestIDHandler); ok {
		return h
	}
	return requestIDHandler{h}
}

type requestIDHandler struct{ next slog.Handler }

func (h requestIDHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		// The record may be shared with the caller's other handlers.
		r = r.Clone()
		r.AddAttrs(slog.String(LogKeyRequestID, id))
	}
	return h.next.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.next.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.next.WithGroup(name)}
}
