package edge

import (
	"fmt"
	"net/http"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

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
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.cfg.Operator.RelocateOrder(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("relocate order %s: %w", id, err))
		return
	}
	s.log.Info("order relocated", "order", id, "operation", res.GetOperationId(),
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
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.cfg.Operator.CloseOrder(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("close order %s: %w", id, err))
		return
	}
	s.log.Info("order closed", "order", id, "generation", res.GetGeneration())
	s.writeMessage(w, r, http.StatusOK, res)
}
