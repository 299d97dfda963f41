package edge

import (
	"context"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// Mount is a surface the API's wiring mounts on the admin listener, behind
// the admin bearer token: the runner's /self-check/ hooks (edge/selfcheck)
// in a process started with -self-check. The edge serves what is mounted
// and knows nothing of it; with nothing mounted its paths are unknown
// routes like any other.
type Mount interface {
	// Mount registers the surface's routes on r. New calls it once, before
	// the admin listener serves.
	Mount(r AdminRouter)
}

// AdminRouter is what a Mount registers its routes on, with the edge's
// own reply helpers, so that a mounted surface answers in the edge's error
// shape and bounds its work like every other route.
type AdminRouter struct {
	s *Server
	e *gin.Engine
}

// Handle serves h for method and path on the admin listener. A path
// segment written {name} matches one segment, read with r.PathValue(name).
func (a AdminRouter) Handle(method, path string, h http.HandlerFunc) {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if name, ok := strings.CutPrefix(seg, "{"); ok && strings.HasSuffix(name, "}") {
			segs[i] = ":" + strings.TrimSuffix(name, "}")
		}
	}
	a.e.Handle(method, strings.Join(segs, "/"), handle(h))
}

// Fail answers err as every route does (httpError decides the status,
// code and reason) and logs it.
func (a AdminRouter) Fail(w http.ResponseWriter, r *http.Request, err error) { a.s.fail(w, r, err) }

// JSON answers status with v encoded by encoding/json (a mounted surface's
// own bodies, never contract messages).
func (a AdminRouter) JSON(w http.ResponseWriter, status int, v any) { a.s.writeJSON(w, status, v) }

// Context bounds a request's work by the edge's request timeout.
func (a AdminRouter) Context(r *http.Request) (context.Context, context.CancelFunc) {
	return a.s.requestContext(r)
}

// Evidence writes one raw evidence line (docs/contract.md, "Evidence lines")
// to the edge's evidence writer, whole.
func (a AdminRouter) Evidence(line string) { a.s.evidence.Line(line) }

// DecodeJSON reads the body (at most MaxBody) strictly into v: unknown
// fields and trailing data are refused. On failure it has answered the
// request itself and returns false.
func (a AdminRouter) DecodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := readBody(w, r)
	if err == nil {
		err = decodeJSON(body, v, bodyRequired)
	}
	if err != nil {
		a.s.fail(w, r, err)
		return false
	}
	return true
}

// DecodeStartOrder reads the body as a public StartOrderReq, checked as
// POST /orders checks it, its key taken from the Idempotency-Key header
// too, so that a hook given a start's request derives what the start
// would. On failure it has answered the request itself and returns nil.
func (a AdminRouter) DecodeStartOrder(w http.ResponseWriter, r *http.Request) *contracts.StartOrderReq {
	body, err := readBody(w, r)
	var req *contracts.StartOrderReq
	if err == nil {
		req, err = decodeStartOrder(body, r.Header)
	}
	if err != nil {
		a.s.fail(w, r, err)
		return nil
	}
	return req
}

// OrderID returns the {orderId} path value, checked as every route checks
// an id (an error wrapping ErrInvalidArgument names the field).
func (a AdminRouter) OrderID(r *http.Request) (string, error) { return pathOrderID(r) }

// CheckID checks an id or key named field as every route does.
func (a AdminRouter) CheckID(field, v string) error { return checkID(field, v) }

// OrderIDFor returns the OrderId POST /orders reserves for idempotencyKey.
func (a AdminRouter) OrderIDFor(idempotencyKey string) string { return a.s.orderIDFor(idempotencyKey) }
