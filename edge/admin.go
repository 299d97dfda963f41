package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// requireAdminToken lets a request through only with
// `Authorization: Bearer <Config.AdminToken>` (telemetry.Bearer).
func (s *Server) requireAdminToken(c *gin.Context) {
	allowed, ok := s.token.Check(c.Request)
	if allowed {
		c.Next()
		return
	}
	// Who knocked goes to the log, never what they sent.
	s.log.WarnContext(c.Request.Context(), "admin request refused: missing or wrong bearer token", slog.String("method", c.Request.Method),
		slog.String("path", c.Request.URL.Path), slog.String("remote", c.Request.RemoteAddr), slog.Bool("bearer", ok))
	// The router has set Allow already for a path it knows with another
	// method; left on the 401, it would tell that the path exists.
	c.Writer.Header().Del("Allow")
	c.Writer.Header().Set("WWW-Authenticate", `Bearer realm="shoppingmall-admin"`)
	s.fail(c.Writer, c.Request, ErrUnauthenticated)
	c.Abort()
}

// registerPprof serves the process's profiles (telemetry.Pprof) under
// /debug/pprof/ on the admin listener only, behind its token.
func registerPprof(e *gin.Engine) {
	h := gin.WrapH(telemetry.Pprof())
	e.GET(telemetry.PprofPrefix+"*name", h)
	e.POST(telemetry.PprofPrefix+"*name", h)
}

// adminRelocate is POST /admin/orders/{orderId}/relocate: a planned
// relocation of a live order, sent to the order's owner by its identity.
// A dead owner is 503 (relocation is not crash failover), no other
// eligible member is 409, an unknown order 404.
func (s *Server) adminRelocate(w http.ResponseWriter, r *http.Request) {
	req := &contracts.RelocateOrderReq{}
	id, err := pathOrderID(r)
	if err == nil {
		err = s.decodeForOrder(w, r, req, &req.OrderId, id)
	}
	if err == nil {
		err = checkOptionalID("targetNode", req.TargetNode)
	}
	if err == nil {
		err = checkOptionalID("operationId", req.OperationId)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.writeContext(r)
	defer cancel()
	if err := s.refuseArchived(ctx, id); err != nil {
		s.fail(w, r, fmt.Errorf("relocate order %s: %w", id, err))
		return
	}
	res, err := s.cfg.Operator.RelocateOrder(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("relocate order %s: %w", id, err))
		return
	}
	s.log.InfoContext(r.Context(), "order relocated", "order", id, "operation", res.GetOperationId(),
		"source", res.GetSourceNode(), "target", res.GetTargetNode(), "generation", res.GetGeneration())
	s.writeMessage(w, r, http.StatusOK, res)
}

// adminClose is POST /admin/orders/{orderId}/close: the owner releases the
// order's authority; the next command activates generation + 1.
func (s *Server) adminClose(w http.ResponseWriter, r *http.Request) {
	req := &contracts.CloseOrderReq{}
	id, err := pathOrderID(r)
	if err == nil {
		err = s.decodeForOrder(w, r, req, &req.OrderId, id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.writeContext(r)
	defer cancel()
	if err := s.refuseArchived(ctx, id); err != nil {
		s.fail(w, r, fmt.Errorf("close order %s: %w", id, err))
		return
	}
	res, err := s.cfg.Operator.CloseOrder(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("close order %s: %w", id, err))
		return
	}
	s.log.InfoContext(r.Context(), "order closed", "order", id, "generation", res.GetGeneration())
	s.writeMessage(w, r, http.StatusOK, res)
}

// errOrderArchived: an operator command that needs an owner, on an
// archived order, which has none and is never activated again.
var errOrderArchived = errkind.New(errkind.FailedPrecondition, "the order is archived")

// refuseArchived refuses an operator command that would reach (and so
// activate) an archived order's grain, from one read of the event store;
// without Streams the grain finds out (its activation is refused by the
// sealed stream and leaves no record).
func (s *Server) refuseArchived(ctx context.Context, id string) error {
	if s.cfg.Streams == nil {
		return nil
	}
	p, err := s.cfg.Streams.Presence(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("check the event stream: %w", err)
	case p.Tier == eventstore.TierArchived:
		return errOrderArchived
	}
	return nil
}
