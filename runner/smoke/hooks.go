package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/edge/selfcheck/selfcheckapi"
)

// hooks calls one API process's runner-only /self-check/* hooks and its
// /admin/* operations, on the API's admin listener with the admin bearer
// token. Only the runner uses it, before the client starts (fixtures) or
// after it finished (evidence).
type hooks struct {
	base  string // the admin listener's base URL
	token string
	hc    *http.Client
}

// hookError is a hook that did not answer 200.
type hookError struct {
	call   string
	status int
	body   string
}

func (e *hookError) Error() string {
	return fmt.Sprintf("%s answered %d: %s", e.call, e.status, strings.TrimSpace(e.body))
}

// do sends body (JSON-encoded, nil for none) and returns the 200 body; any
// other status is a *hookError.
func (h *hooks) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	call := method + " " + h.base + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", call, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	res, err := h.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", call, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", call, err)
	}
	if res.StatusCode != http.StatusOK {
		return b, &hookError{call: call, status: res.StatusCode, body: string(b)}
	}
	return b, nil
}

func (h *hooks) doJSON(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	b, err := h.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s%s: decode %q: %w", method, h.base, path, b, err)
	}
	return nil
}

func (h *hooks) pendingMapping(ctx context.Context, key, cart, address, method string) (string, error) {
	var out selfcheckapi.PendingMappingReply
	err := h.doJSON(ctx, http.MethodPost, selfcheckapi.PendingMappingPath, selfcheckapi.PendingMappingRequest{
		IdempotencyKey: key, CartID: cart, ShippingAddressID: address, PaymentMethodID: method,
	}, &out)
	if err == nil && out.OrderID == "" {
		err = fmt.Errorf("pending-mapping answered no orderId")
	}
	return out.OrderID, err
}

func (h *hooks) armGate(ctx context.Context, key, mode string) error {
	return h.doJSON(ctx, http.MethodPost, selfcheckapi.GatesPath, selfcheckapi.GateRequest{IdempotencyKey: key, Mode: mode}, nil)
}

func (h *hooks) releaseGate(ctx context.Context, key, orderID string) (*contracts.OrderState, error) {
	var out selfcheckapi.ReleaseReply
	if err := h.doJSON(ctx, http.MethodPost, selfcheckapi.GatesReleasePath, selfcheckapi.ReleaseRequest{IdempotencyKey: key, OrderID: orderID}, &out); err != nil {
		return nil, err
	}
	st := &contracts.OrderState{}
	if err := contracts.UnmarshalJSON(out.State, st); err != nil {
		return nil, fmt.Errorf("gates/release state: %w", err)
	}
	return st, nil
}

func (h *hooks) skipTerminalProjection(ctx context.Context, key string) error {
	return h.doJSON(ctx, http.MethodPost, selfcheckapi.SkipTerminalProjectionPath, selfcheckapi.SkipTerminalProjectionRequest{IdempotencyKey: key}, nil)
}

func (h *hooks) deleteProjection(ctx context.Context, orderID string) error {
	return h.doJSON(ctx, http.MethodDelete, selfcheckapi.ProjectionPath(orderID), nil, nil)
}

// evidence is the reply of GET /self-check/orders/{id}/evidence: the
// hooks' own reply type, with the runner's helpers on it.
type evidence struct {
	selfcheckapi.Evidence
}

func (e *evidence) types() []string {
	out := make([]string, len(e.Events))
	for i, ev := range e.Events {
		out[i] = ev.EventType
	}
	return out
}

func (e *evidence) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// evidence reads an order's server-side evidence; found is false on 404
// (no stream).
func (h *hooks) evidence(ctx context.Context, orderID string) (ev *evidence, found bool, err error) {
	b, err := h.do(ctx, http.MethodGet, selfcheckapi.EvidencePath(orderID), nil)
	if he, ok := err.(*hookError); ok && he.status == http.StatusNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ev = &evidence{}
	if err := json.Unmarshal(b, ev); err != nil {
		return nil, false, fmt.Errorf("evidence of %s: decode %q: %w", orderID, b, err)
	}
	return ev, true, nil
}

func (h *hooks) repeatEffects(ctx context.Context, orderID string) (*selfcheckapi.RepeatEffects, string, error) {
	b, err := h.do(ctx, http.MethodPost, selfcheckapi.RepeatEffectsPath(orderID), nil)
	if err != nil {
		return nil, "", err
	}
	out := &selfcheckapi.RepeatEffects{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, "", fmt.Errorf("repeat-effects of %s: decode %q: %w", orderID, b, err)
	}
	return out, string(b), nil
}

// message posts a contract message to an admin operation and decodes the
// contract reply.
func (h *hooks) message(ctx context.Context, path string, in, out proto.Message) error {
	body, err := contracts.MarshalJSON(in)
	if err != nil {
		return err
	}
	b, err := h.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return err
	}
	if err := contracts.UnmarshalJSON(b, out); err != nil {
		return fmt.Errorf("%s: decode %q: %w", path, b, err)
	}
	return nil
}

// relocate is the planned relocation operation; an empty target lets the
// cluster pick another eligible member.
func (h *hooks) relocate(ctx context.Context, orderID, operationID string) (*contracts.RelocateOrderRes, error) {
	out := &contracts.RelocateOrderRes{}
	err := h.message(ctx, "/admin/orders/"+url.PathEscape(orderID)+"/relocate",
		&contracts.RelocateOrderReq{OrderId: orderID, OperationId: operationID}, out)
	return out, err
}

func (h *hooks) close(ctx context.Context, orderID string) (*contracts.CloseOrderRes, error) {
	out := &contracts.CloseOrderRes{}
	err := h.message(ctx, "/admin/orders/"+url.PathEscape(orderID)+"/close", &contracts.CloseOrderReq{OrderId: orderID}, out)
	return out, err
}
