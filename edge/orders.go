package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// startOrder is POST /orders (docs/contract.md, "Start and success" and
// "Duplicate start and resume"). It answers once the Created boundary is
// confirmed and never waits for the continuation:
//
//  1. validate the request (its key from the body's idempotencyKey or
//     the Idempotency-Key header, see decodeStartOrder) and load the
//     cart (an unknown cart is 400 cartId);
//  2. reserve the idempotency key with the OrderId derived from it
//     (order.OrderIDFor) — the first reservation wins, every other request
//     uses the winner's OrderId (another one only for a mapping made
//     before OrderIds were derived);
//  3. a key mapped for a different cart, address or method is 422;
//  4. a started mapping is a replay: 200 with the current read model;
//  5. otherwise (pending, or started without a projection yet) the grain
//     records the start or finds it recorded: 201 if this call recorded
//     it, else 200. A key whose mapping was lost reserves it again with
//     the same OrderId and so reaches the order it started: the grain
//     answers 200, or 422 when the recorded start is another request
//     (workflow.ErrKeyReused), and the mapping this call made for it is
//     given back.
func (s *Server) startOrder(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, err := decodeStartOrder(body, r.Header)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.writeContext(r)
	defer cancel()

	fp := commerce.Fingerprint(req.CartId, req.ShippingAddressId, req.PaymentMethodId)
	rsv, err := s.cartAndKey(ctx, req, commerce.Mapping{
		OrderID: s.orderIDFor(req.IdempotencyKey), Status: commerce.MappingPending, Fingerprint: fp,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cart, m := rsv.Cart, rsv.Mapping
	if m.Fingerprint != fp {
		s.fail(w, r, ErrIdempotencyKeyReused)
		return
	}
	noteOrder(r.Context(), m.OrderID)
	if m.Status == commerce.MappingStarted {
		st, _, err := s.cfg.ReadModel.Get(ctx, m.OrderID)
		if err == nil && s.cfg.Barrier != nil {
			// The mapping and projection may be an earlier attempt's
			// whose writes fell short of the replicas.
			if berr := s.cfg.Barrier.Barrier(ctx, m.OrderID); berr != nil {
				s.fail(w, r, fmt.Errorf("start order %s: %w", m.OrderID, berr))
				return
			}
		}
		switch {
		case err == nil:
			s.writeMessage(w, r, http.StatusOK, &contracts.StartOrderRes{OrderId: m.OrderID, State: st})
			return
		case !errors.Is(err, readmodel.ErrNotFound):
			s.fail(w, r, fmt.Errorf("read order %s: %w", m.OrderID, err))
			return
		}
		// Started but without a projection (deleted, or a crash between
		// the two): the grain's repeated start repairs it like a pending one.
	}
	if rsv.Created {
		// This request minted the OrderId: its grain has nothing to read.
		ctx = placement.WithMintedIdentity(ctx, grain.KindName, m.OrderID)
		if rsv.LockToken != "" {
			// The reservation took the order's creation lock too.
			ctx = placement.WithHeldCreation(ctx, grain.KindName, m.OrderID, rsv.LockToken)
		}
	}
	// Tracked from before the start, so that this process's wait for
	// the order's outcome need not read what the start just told it.
	tracked := func() {}
	if s.tracker != nil {
		tracked = s.tracker.Track(m.OrderID)
		if s.cfg.NoticeTo != "" {
			ctx = grain.NoticeTo(ctx, s.cfg.NoticeTo)
		}
	}
	res, recorded, err := s.cfg.Orders.StartOrderWorkflow(ctx, &contracts.StartOrderWorkflowReq{
		OrderId:           m.OrderID,
		CartId:            req.CartId,
		ShippingAddressId: req.ShippingAddressId,
		PaymentMethodId:   req.PaymentMethodId,
		IdempotencyKey:    req.IdempotencyKey,
		SourceCommandId:   order.StartSourceCommandID(req.IdempotencyKey),
		Lines:             cart.Lines,
		Amount:            cart.Amount,
		Currency:          cart.Currency,
	})
	if err != nil {
		if s.archived(ctx, m.OrderID) {
			// The key's mapping was lost (deleted by hand) after its order
			// was archived: the sealed order refused the activation, and
			// wrote nothing. Which request started it is not kept beside
			// the mapping, so the start is refused as the archived
			// order's, and the mapping this call made is given back.
			err = errOrderArchived
			if rsv.Created {
				s.forget(ctx, req.IdempotencyKey, m)
			}
		}
		if rsv.Created && errors.Is(err, errkind.KeyReused) {
			// The key's mapping was lost and this call made it anew for a
			// request the order refused: left in place, it would refuse
			// the key's own retry.
			s.forget(ctx, req.IdempotencyKey, m)
		}
		s.fail(w, r, fmt.Errorf("start order %s: %w", m.OrderID, err))
		return
	}
	status := http.StatusOK
	if recorded {
		status = http.StatusCreated
		tracked()
	}
	s.writeMessage(w, r, status, &contracts.StartOrderRes{OrderId: m.OrderID, State: res.GetState()})
}

// forget gives back the mapping m this start reserved for key. A mapping
// that stays is logged, not failed: the client's answer is the refusal
// either way, and an operator can delete the key.
func (s *Server) forget(ctx context.Context, key string, m commerce.Mapping) {
	gone, err := s.cfg.Idempotency.Forget(context.WithoutCancel(ctx), key, m)
	if err != nil || !gone {
		s.log.Warn("a refused start's idempotency mapping stays (pending, for another request)",
			slog.String("idempotencyKey", key), slog.String("orderId", m.OrderID), slog.Any("error", err))
	}
}

// cartAndKey loads the start's cart and reserves its idempotency key for
// candidate; it returns the cart, the mapping in force, whether this call
// created it, and the token of the order's creation lock when the
// reservation took that too (see CartReserver), as one reservation. A cart that does not
// exist, or that the API refuses, leaves no mapping behind: without a
// CartReserver the cart is checked before the key is reserved; with one
// (one round trip) a mapping the step created for a refused cart is given
// back, with its lock.
func (s *Server) cartAndKey(ctx context.Context, req *contracts.StartOrderReq, candidate commerce.Mapping) (commerce.CartReservation, error) {
	if s.cfg.CartReserve == nil {
		cart, err := s.cfg.Carts.GetCart(ctx, req.CartId)
		if err != nil {
			return commerce.CartReservation{}, cartError(err)
		}
		if err := checkCart(cart); err != nil {
			return commerce.CartReservation{}, err
		}
		m, created, err := s.cfg.Idempotency.Reserve(ctx, req.IdempotencyKey, candidate)
		if err != nil {
			return commerce.CartReservation{}, fmt.Errorf("reserve idempotency key: %w", err)
		}
		return commerce.CartReservation{Cart: cart, Mapping: m, Created: created}, nil
	}
	res, err := s.cfg.CartReserve.ReserveForCart(ctx, req.CartId, req.IdempotencyKey, candidate)
	if err == nil {
		err = checkCart(res.Cart)
	} else {
		err = cartError(err)
	}
	if err != nil {
		if res.Created {
			if kept, uerr := s.cfg.CartReserve.Unreserve(context.WithoutCancel(ctx), req.CartId, req.IdempotencyKey, res); uerr != nil || kept {
				s.log.Warn("a refused start's idempotency key stays reserved (pending; its retry is refused the same way)",
					slog.String("idempotencyKey", req.IdempotencyKey), slog.Any("error", uerr))
			}
		}
		return commerce.CartReservation{}, err
	}
	return res, nil
}

// cartError is a failed cart load as the API answers it: an unknown cart
// is the client's 400 on cartId.
func cartError(err error) error {
	if errors.Is(err, commerce.ErrNotFound) {
		return invalidField("cartId", "no such cart")
	}
	return fmt.Errorf("load cart: %w", err)
}

// orderIDFor is the OrderId a start with idempotencyKey reserves.
func (s *Server) orderIDFor(idempotencyKey string) string {
	return order.OrderIDFor(s.cfg.OrderIDSecret, idempotencyKey)
}

// getOrder is GET /orders/{orderId}: the read model only, no grain call,
// no side effect (docs/contract.md, "Lookup and projection rebuild"). With
// waitFor=terminal it is a bounded wait for the outcome (wait.go), just as
// free of side effects.
func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	id, err := pathOrderID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	timeout, wait, err := parseWait(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if wait {
		s.waitOrder(w, r, id, timeout)
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, _, err := s.cfg.ReadModel.Get(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("read order %s: %w", id, err))
		return
	}
	s.writeMessage(w, r, http.StatusOK, &contracts.GetOrderStateRes{State: st})
}

// continueOrder is POST /orders/{orderId}/continue. An archived order
// is terminal: its answer is the final state its sealed record keeps,
// and no grain is activated for it (an activation would write a
// Location record and a generation).
func (s *Server) continueOrder(w http.ResponseWriter, r *http.Request) {
	req := &contracts.ContinueOrderWorkflowReq{}
	id, ok := s.orderCommand(w, r, req, &req.OrderId, &req.SourceCommandId, "continue-")
	if !ok {
		return
	}
	ctx, cancel := s.writeContext(r)
	defer cancel()
	p, err := s.presence(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("continue order %s: %w", id, err))
		return
	}
	if p.Tier == eventstore.TierArchived {
		st, _, err := readmodel.KeptState(p.Sealed)
		if err != nil {
			s.fail(w, r, fmt.Errorf("continue archived order %s: %w", id, err))
			return
		}
		s.writeMessage(w, r, http.StatusOK, &contracts.ContinueOrderWorkflowRes{State: st})
		return
	}
	res, err := s.cfg.Orders.ContinueOrderWorkflow(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("continue order %s: %w", id, err))
		return
	}
	s.writeMessage(w, r, http.StatusOK, res)
}

// rebuildProjection is POST /orders/{orderId}/rebuild-projection. An
// archived order is rebuilt from the archive's events, the cold tier's
// replay (ArchivedOrders.Rebuild), without activating it.
func (s *Server) rebuildProjection(w http.ResponseWriter, r *http.Request) {
	req := &contracts.RebuildOrderProjectionReq{}
	id, ok := s.orderCommand(w, r, req, &req.OrderId, &req.SourceCommandId, "rebuild-")
	if !ok {
		return
	}
	ctx, cancel := s.writeContext(r)
	defer cancel()
	p, err := s.presence(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("rebuild projection of order %s: %w", id, err))
		return
	}
	if p.Tier == eventstore.TierArchived {
		st, err := s.rebuildArchived(ctx, id)
		if err != nil {
			s.fail(w, r, fmt.Errorf("rebuild projection of archived order %s: %w", id, err))
			return
		}
		s.writeMessage(w, r, http.StatusOK, &contracts.RebuildOrderProjectionRes{State: st})
		return
	}
	res, err := s.cfg.Orders.RebuildOrderProjection(ctx, req)
	if err != nil {
		s.fail(w, r, fmt.Errorf("rebuild projection of order %s: %w", id, err))
		return
	}
	s.writeMessage(w, r, http.StatusOK, res)
}

// errNoArchive: the order is archived and this API was started without
// the archive, which alone holds its history.
var errNoArchive = errkind.New(errkind.StoreUnavailable, "the order is archived and this API has no archive configured (-archive)")

// errArchiveUnavailable marks a failed read of an archived order's
// history: one of kind StoreUnavailable is answered as the archive's
// outage.
var errArchiveUnavailable = errors.New("the archived order's history could not be read")

func (s *Server) rebuildArchived(ctx context.Context, id string) (*contracts.OrderState, error) {
	if s.cfg.Archive == nil {
		return nil, errNoArchive
	}
	st, rewrote, err := s.cfg.Archive.Rebuild(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errArchiveUnavailable, err)
	}
	if rewrote {
		s.log.InfoContext(ctx, "archived order's kept state rewritten from the archive's events", slog.String("orderId", id))
	}
	return st, nil
}

// archived reports whether the order is archived, after a grain call on
// it failed: only a start whose mapping was lost reaches an archived
// order's grain. Without Streams, or when the check fails, it reports
// false and the call's own error stands.
func (s *Server) archived(ctx context.Context, orderID string) bool {
	return errors.Is(s.refuseArchived(context.WithoutCancel(ctx), orderID), errOrderArchived)
}

// errNoStream: the order has no event stream, so a command on it is the
// grain's own 404 (workflow.ErrNotFound), answered without asking it.
var errNoStream = fmt.Errorf("%w: the order has no event stream", ErrNotFound)

// presence keeps a command on an order without a stream from costing a
// cold activation (and its Location round trips) only to learn that: an
// id that never started is answered 404 from one read of the event
// store, with the reply the grain would have given, and an archived one
// is told apart in the same read. It reads the stream and the fence,
// never the read model, whose record may be the very thing a rebuild is
// for. An order whose start is still being recorded may be answered 404
// too, as if the command had come a moment earlier. Without Streams it
// answers TierHot: the grain finds out.
func (s *Server) presence(ctx context.Context, orderID string) (eventstore.Presence, error) {
	if s.cfg.Streams == nil {
		return eventstore.Presence{Tier: eventstore.TierHot}, nil
	}
	p, err := s.cfg.Streams.Presence(ctx, orderID)
	switch {
	case err != nil:
		return eventstore.Presence{}, fmt.Errorf("check the event stream: %w", err)
	case p.Tier == eventstore.TierNone:
		return eventstore.Presence{}, errNoStream
	}
	return p, nil
}

// orderCommand decodes a continue/rebuild body (empty means {}), fills the
// orderId from the path — a different one in the body is 400 — and an
// empty sourceCommandId with a fresh one. It answers the failure itself.
func (s *Server) orderCommand(w http.ResponseWriter, r *http.Request, req proto.Message, orderID, sourceCommandID *string, prefix string) (string, bool) {
	id, err := pathOrderID(r)
	if err == nil {
		err = s.decodeForOrder(w, r, req, orderID, id)
	}
	if err == nil {
		if *sourceCommandID == "" {
			*sourceCommandID = prefix + s.cfg.NewID()
		}
		err = checkID("sourceCommandId", *sourceCommandID)
	}
	if err != nil {
		s.fail(w, r, err)
		return "", false
	}
	return id, true
}

// decodeForOrder decodes an optional contract body addressed to the path's
// order and sets its orderId field to it.
func (s *Server) decodeForOrder(w http.ResponseWriter, r *http.Request, req proto.Message, orderID *string, pathID string) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := decodeContract(body, req, bodyOptional); err != nil {
		return err
	}
	if *orderID != "" && *orderID != pathID {
		return invalidField("orderId", "differs from the order in the path")
	}
	*orderID = pathID
	return nil
}

// pathOrderID returns the validated {orderId} of the route.
func pathOrderID(r *http.Request) (string, error) {
	id := r.PathValue("orderId")
	return id, checkID("orderId", id)
}
