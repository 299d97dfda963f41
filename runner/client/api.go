package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// ErrProtocol: a response that the public API contract does not allow (a
// 2xx body that is not the contract message, an error body that is not
// the problem details).
var ErrProtocol = errors.New("client: response breaks the API contract")

// maxBody bounds how much of a response is read; the API's own request
// limit is 64 KiB and its answers are smaller.
const maxBody = 1 << 20

// API is one CommerceApi process's public order API, reached over HTTP.
// It offers the four public order calls and nothing else.
type API struct {
	// BaseURL is the process's public URL, e.g. http://127.0.0.1:8081.
	BaseURL string
	// HTTP is the client used; nil means http.DefaultClient.
	HTTP *http.Client
}

// ContentTypeProblem is the media type of every error reply.
const ContentTypeProblem = "application/problem+json"

// ProblemTypePrefix starts the type URN of every code's problem details:
// urn:shoppingmall:problem:<code>.
const ProblemTypePrefix = "urn:shoppingmall:problem:"

// ErrorBody is the API's error reply, an RFC 9457 problem details object
// {type,title,status,detail,code,reason?,field?}. Code, Reason and Field
// are the contract's extension members; Reason is set on every 503 and
// 504 (OWNER_GONE, STORE_UNAVAILABLE, ...).
type ErrorBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Reason string `json:"reason,omitempty"`
	Field  string `json:"field,omitempty"`
}

// Reply is what one call answered: the HTTP status, the headers, the raw
// body and, for a non-2xx status, the decoded problem details.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	Error  *ErrorBody
}

func (r Reply) String() string {
	if r.Error != nil && r.Error.Reason != "" {
		return fmt.Sprintf("HTTP %d %s (%s): %s", r.Status, r.Error.Code, r.Error.Reason, r.Error.Detail)
	}
	if r.Error != nil {
		return fmt.Sprintf("HTTP %d %s: %s", r.Status, r.Error.Code, r.Error.Detail)
	}
	return fmt.Sprintf("HTTP %d %s", r.Status, strings.TrimSpace(string(r.Body)))
}

// OK reports a 2xx status.
func (r Reply) OK() bool { return r.Status >= 200 && r.Status < 300 }

// StartOrder is POST /orders. On a 2xx status the StartOrderRes is
// returned; otherwise nil and the Reply carries the problem details. err
// is a transport failure or a body that breaks the contract.
func (a *API) StartOrder(ctx context.Context, req *contracts.StartOrderReq) (*contracts.StartOrderRes, Reply, error) {
	res := &contracts.StartOrderRes{}
	rep, err := a.call(ctx, http.MethodPost, "/orders", req, res)
	if err != nil || !rep.OK() {
		return nil, rep, err
	}
	return res, rep, nil
}

// GetOrder is GET /orders/{orderId}: the read model only.
func (a *API) GetOrder(ctx context.Context, orderID string) (*contracts.OrderState, Reply, error) {
	res := &contracts.GetOrderStateRes{}
	rep, err := a.call(ctx, http.MethodGet, "/orders/"+url.PathEscape(orderID), nil, res)
	if err != nil || !rep.OK() {
		return nil, rep, err
	}
	return res.GetState(), rep, nil
}

// The bounded wait of GET /orders/{orderId}?waitFor=terminal&timeoutMs=N
// (the API's contract, spelled here because the client links nothing of
// the API): a 200 carries X-Wait: reached (the state is terminal) or
// timeout (it is not, and the time ran out).
const (
	HeaderWait  = "X-Wait"
	WaitReached = "reached"
	WaitTimeout = "timeout"
	// MaxWait is the longest wait the API accepts.
	MaxWait = 30 * time.Second
)

// WaitTerminal is one bounded wait for the order's outcome: GET
// /orders/{orderId}?waitFor=terminal&timeoutMs=<timeout in ms>. On a 200
// it returns the state and whether it is terminal (X-Wait: reached);
// otherwise nil and the Reply carries the problem details (an unknown
// order is 404, a timeout above MaxWait 400). The API holds the request
// until the outcome or the timeout, so the caller sends one request where
// it would poll; the ctx must outlast timeout.
func (a *API) WaitTerminal(ctx context.Context, orderID string, timeout time.Duration) (*contracts.OrderState, bool, Reply, error) {
	res := &contracts.GetOrderStateRes{}
	path := "/orders/" + url.PathEscape(orderID) + "?waitFor=terminal&timeoutMs=" + strconv.FormatInt(timeout.Milliseconds(), 10)
	rep, err := a.call(ctx, http.MethodGet, path, nil, res)
	if err != nil || !rep.OK() {
		return nil, false, rep, err
	}
	w := rep.Header.Get(HeaderWait)
	st := res.GetState()
	terminal := st.GetStatus() == contracts.OrderStatus_Confirmed || st.GetStatus() == contracts.OrderStatus_Failed
	if (w != WaitReached && w != WaitTimeout) || (w == WaitReached) != terminal {
		return nil, false, rep, fmt.Errorf("%w: GET %s answered 200 with %s %q and status %s", ErrProtocol, path, HeaderWait, w, st.GetStatus())
	}
	return st, terminal, rep, nil
}

// Continue is POST /orders/{orderId}/continue with an empty
// sourceCommandId, which the server fills.
func (a *API) Continue(ctx context.Context, orderID string) (*contracts.OrderState, Reply, error) {
	res := &contracts.ContinueOrderWorkflowRes{}
	rep, err := a.call(ctx, http.MethodPost, "/orders/"+url.PathEscape(orderID)+"/continue",
		&contracts.ContinueOrderWorkflowReq{OrderId: orderID}, res)
	if err != nil || !rep.OK() {
		return nil, rep, err
	}
	return res.GetState(), rep, nil
}

// Rebuild is POST /orders/{orderId}/rebuild-projection.
func (a *API) Rebuild(ctx context.Context, orderID string) (*contracts.OrderState, Reply, error) {
	res := &contracts.RebuildOrderProjectionRes{}
	rep, err := a.call(ctx, http.MethodPost, "/orders/"+url.PathEscape(orderID)+"/rebuild-projection",
		&contracts.RebuildOrderProjectionReq{OrderId: orderID}, res)
	if err != nil || !rep.OK() {
		return nil, rep, err
	}
	return res.GetState(), rep, nil
}

// call sends req (nil for no body) and decodes a 2xx body into res with
// the contract codec, a non-2xx body into the problem details.
func (a *API) call(ctx context.Context, method, path string, req, res proto.Message) (Reply, error) {
	var body io.Reader
	if req != nil {
		b, err := contracts.MarshalJSON(req)
		if err != nil {
			return Reply{}, fmt.Errorf("client: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.BaseURL, "/")+path, body)
	if err != nil {
		return Reply{}, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if req != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json, "+ContentTypeProblem)
	hc := a.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	hres, err := hc.Do(hreq)
	if err != nil {
		return Reply{}, fmt.Errorf("client: %s %s%s: %w", method, a.BaseURL, path, err)
	}
	defer hres.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hres.Body, maxBody))
	if err != nil {
		return Reply{}, fmt.Errorf("client: %s %s%s: read body: %w", method, a.BaseURL, path, err)
	}
	rep := Reply{Status: hres.StatusCode, Header: hres.Header, Body: b}
	if rep.OK() {
		if err := contracts.UnmarshalJSON(b, res); err != nil {
			return rep, fmt.Errorf("%w: %s %s answered %d with %q: %w", ErrProtocol, method, path, rep.Status, b, err)
		}
		return rep, nil
	}
	eb, err := DecodeErrorReply(rep.Status, rep.Header, b)
	if err != nil {
		return rep, fmt.Errorf("%w: %s %s answered %d: %w", ErrProtocol, method, path, rep.Status, err)
	}
	rep.Error = eb
	return rep, nil
}

// DecodeError decodes a problem details body; a body that is not one (no
// type or no code) is ErrProtocol.
func DecodeError(b []byte) (*ErrorBody, error) {
	var p ErrorBody
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: error body %q: %v", ErrProtocol, b, err)
	}
	if p.Code == "" {
		return nil, fmt.Errorf("%w: error body %q has no error code", ErrProtocol, b)
	}
	if p.Type == "" {
		return nil, fmt.Errorf("%w: error body %q has no problem type", ErrProtocol, b)
	}
	return &p, nil
}

// DecodeErrorReply decodes a whole error reply: its body with
// DecodeError, sent as application/problem+json, whose status member is
// the reply's status.
func DecodeErrorReply(status int, h http.Header, b []byte) (*ErrorBody, error) {
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || mt != ContentTypeProblem {
		return nil, fmt.Errorf("%w: error reply of type %q, want %s", ErrProtocol, h.Get("Content-Type"), ContentTypeProblem)
	}
	p, err := DecodeError(b)
	if err != nil {
		return nil, err
	}
	if p.Status != status {
		return nil, fmt.Errorf("%w: error body %q says status %d, the reply %d", ErrProtocol, b, p.Status, status)
	}
	return p, nil
}
