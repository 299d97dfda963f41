package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// the error envelope).
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

// ErrorBody is the API's error envelope
// {"error":{code,message,field,reason}}. Reason is set on every 503 and
// 504 (OWNER_GONE, STORE_UNAVAILABLE, ...).
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Reply is what one call answered: the HTTP status, the headers, the raw
// body and, for a non-2xx status, the decoded error envelope.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	Error  *ErrorBody
}

func (r Reply) String() string {
	if r.Error != nil && r.Error.Reason != "" {
		return fmt.Sprintf("HTTP %d %s (%s): %s", r.Status, r.Error.Code, r.Error.Reason, r.Error.Message)
	}
	if r.Error != nil {
		return fmt.Sprintf("HTTP %d %s: %s", r.Status, r.Error.Code, r.Error.Message)
	}
	return fmt.Sprintf("HTTP %d %s", r.Status, strings.TrimSpace(string(r.Body)))
}

// OK reports a 2xx status.
func (r Reply) OK() bool { return r.Status >= 200 && r.Status < 300 }

// StartOrder is POST /orders. On a 2xx status the StartOrderRes is
// returned; otherwise nil and the Reply carries the error envelope. err
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
// otherwise nil and the Reply carries the error envelope (an unknown
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
// the contract codec, a non-2xx body into the error envelope.
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
	hreq.Header.Set("Accept", "application/json")
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
	eb, err := DecodeError(b)
	if err != nil {
		return rep, fmt.Errorf("%w: %s %s answered %d: %w", ErrProtocol, method, path, rep.Status, err)
	}
	rep.Error = eb
	return rep, nil
}

// DecodeError decodes the error envelope; a body that is not one, or has
// no code, is ErrProtocol.
func DecodeError(b []byte) (*ErrorBody, error) {
	var env struct {
		Error *ErrorBody `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: error body %q: %v", ErrProtocol, b, err)
	}
	if env.Error == nil || env.Error.Code == "" {
		return nil, fmt.Errorf("%w: error body %q has no error code", ErrProtocol, b)
	}
	return env.Error, nil
}
