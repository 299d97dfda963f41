package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
)

// ErrInvalidFixtures: the fixtures file cannot drive the scenario.
var ErrInvalidFixtures = errors.New("client: invalid fixtures")

// Fixtures is the scenario's configuration, written by the smoke runner:
// where the public API is, which seeded data to order, and the orders the
// runner prepared through its own hooks before the client starts. It holds
// public base URLs of CommerceApi and order ids only; never an owner node,
// a member, a workflow endpoint or any choice of where an order lives
// (docs/contract.md, "Nobody chooses the owner").
type Fixtures struct {
	// APIs are the public base URLs of the CommerceApi processes (at least
	// two); the scenario spreads its calls over all of them.
	APIs []string `json:"apis"`
	// RunID makes the idempotency keys the scenario creates unique to the
	// run.
	RunID string `json:"runId"`
	// ShippingAddressID is used on every order the scenario starts.
	ShippingAddressID string  `json:"shippingAddressId"`
	Catalog           Catalog `json:"catalog"`
	// Prepared are the runner's fixture orders.
	Prepared Prepared `json:"prepared"`
	// Poll bounds every wait for an order's state.
	Poll Poll `json:"poll"`
	// ResultsPath, if set, is where the scenario writes the ids of the
	// orders it started (Results), for the runner's evidence checks.
	ResultsPath string `json:"resultsPath,omitempty"`
}

// Catalog names the run's seeded data: each path of docs/contract.md,
// "Results of an order", has its own.
type Catalog struct {
	// SuccessCartID has ample stock; its total is SuccessAmount Currency.
	SuccessCartID string `json:"successCartId"`
	SuccessAmount int64  `json:"successAmount"`
	Currency      string `json:"currency"`
	// InsufficientStockCartID holds a SKU whose stock cannot cover it.
	InsufficientStockCartID string `json:"insufficientStockCartId"`
	// ApprovingMethodID approves; DecliningMethodID declines with
	// DeclineReason.
	ApprovingMethodID string `json:"approvingMethodId"`
	DecliningMethodID string `json:"decliningMethodId"`
	DeclineReason     string `json:"declineReason"`
}

// Prepared are the orders the runner set up through its hooks.
type Prepared struct {
	// PendingMapping is an idempotency key reserved (pending) for an
	// OrderId whose start never ran; starting with it must resume that
	// OrderId (docs/contract.md, "A pending mapping resumes its order").
	PendingMapping PendingOrder `json:"pendingMapping"`
	// Interrupted stopped at InventoryReserved during the background
	// continuation; State is its read model then (docs/contract.md,
	// "Continue resumes from payment").
	Interrupted Expected `json:"interrupted"`
	// TerminalProjectionSkipped recorded its terminal event without the
	// projection; State is the stale read model (docs/contract.md,
	// "Continue repairs a terminal projection").
	TerminalProjectionSkipped Expected `json:"terminalProjectionSkipped"`
	// ProjectionDeleted lost its read model; State is the read model it
	// had (docs/contract.md, "Rebuild replays the stream").
	ProjectionDeleted Expected `json:"projectionDeleted"`
	// Closed reached Confirmed (State) and was closed (docs/contract.md,
	// "A closed order activates a new generation").
	Closed Expected `json:"closed"`
	// Relocated was moved by a planned relocation while parked at
	// InventoryReserved and released afterwards (docs/contract.md,
	// "Planned relocation resumes at payment").
	Relocated Expected `json:"relocated"`
	// Crashed reached Confirmed (State); the process owning it was
	// killed (docs/contract.md, "A dead owner answers Unavailable").
	Crashed Expected `json:"crashed"`
	// NeverCreated is an OrderId that no one ever started (docs/contract.md,
	// "An unknown order stays unknown").
	NeverCreated Expected `json:"neverCreated"`
}

// PendingOrder is a pending idempotency mapping and the request it was
// reserved for.
type PendingOrder struct {
	IdempotencyKey  string `json:"idempotencyKey"`
	OrderID         string `json:"orderId"`
	CartID          string `json:"cartId"`
	PaymentMethodID string `json:"paymentMethodId"`
}

// Expected is a prepared order and, where the scenario compares with it,
// the OrderState the runner saw, in the contract's JSON.
type Expected struct {
	OrderID string          `json:"orderId"`
	State   json.RawMessage `json:"state,omitempty"`
}

// ExpectedState decodes State with the contract codec; nil when absent.
func (e Expected) ExpectedState() (*contracts.OrderState, error) {
	if len(e.State) == 0 {
		return nil, nil
	}
	st := &contracts.OrderState{}
	if err := contracts.UnmarshalJSON(e.State, st); err != nil {
		return nil, fmt.Errorf("%w: state of %s: %w", ErrInvalidFixtures, e.OrderID, err)
	}
	return st, nil
}

// WithState returns e with st as its expected state.
func (e Expected) WithState(st *contracts.OrderState) (Expected, error) {
	b, err := contracts.MarshalJSON(st)
	if err != nil {
		return e, err
	}
	e.State = b
	return e, nil
}

// Poll is a bounded polling budget.
type Poll struct {
	IntervalMs int `json:"intervalMs"`
	Attempts   int `json:"attempts"`
}

// DefaultPoll is every 100 ms, at most 300 times.
var DefaultPoll = Poll{IntervalMs: 100, Attempts: 300}

// Interval is the wait between two looks.
func (p Poll) Interval() time.Duration { return time.Duration(p.IntervalMs) * time.Millisecond }

// Results are the orders the scenario started itself, by case.
type Results struct {
	// Orders maps a case (CaseSuccess, ...) to its OrderId.
	Orders map[string]string `json:"orders"`
	// Concurrent are the orders started together on every API
	// (docs/contract.md, "Concurrent orders through every API").
	Concurrent []string `json:"concurrent"`
}

// The cases of Results.Orders.
const (
	CaseSuccess               = "success"
	CaseInsufficientInventory = "insufficientInventory"
	CasePaymentRejected       = "paymentRejected"
	CaseDuplicate             = "duplicate"
	CasePendingMapping        = "pendingMapping"
)

// LoadFixtures reads and validates a fixtures file. Unknown fields and
// trailing data are errors, so a runner and a client that disagree on the
// format fail loudly instead of skipping a case.
func LoadFixtures(path string) (Fixtures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Fixtures{}, fmt.Errorf("%w: %v", ErrInvalidFixtures, err)
	}
	return DecodeFixtures(b)
}

// DecodeFixtures decodes and validates fixtures JSON; Poll defaults to
// DefaultPoll where unset.
func DecodeFixtures(b []byte) (Fixtures, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f Fixtures
	if err := dec.Decode(&f); err != nil {
		return Fixtures{}, fmt.Errorf("%w: %v", ErrInvalidFixtures, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Fixtures{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidFixtures)
	}
	if f.Poll.IntervalMs <= 0 {
		f.Poll.IntervalMs = DefaultPoll.IntervalMs
	}
	if f.Poll.Attempts <= 0 {
		f.Poll.Attempts = DefaultPoll.Attempts
	}
	if err := f.Validate(); err != nil {
		return Fixtures{}, err
	}
	return f, nil
}

// Validate reports every missing or malformed field at once.
func (f Fixtures) Validate() error {
	var errs []error
	need := func(name, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
		}
	}
	if len(f.APIs) < 2 {
		errs = append(errs, fmt.Errorf("apis: %d base URLs, want at least 2", len(f.APIs)))
	}
	for i, a := range f.APIs {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("apis[%d]: %q is not an http(s) base URL", i, a))
		}
	}
	need("runId", f.RunID)
	need("shippingAddressId", f.ShippingAddressID)
	c := f.Catalog
	need("catalog.successCartId", c.SuccessCartID)
	need("catalog.currency", c.Currency)
	need("catalog.insufficientStockCartId", c.InsufficientStockCartID)
	need("catalog.approvingMethodId", c.ApprovingMethodID)
	need("catalog.decliningMethodId", c.DecliningMethodID)
	if c.SuccessAmount <= 0 {
		errs = append(errs, fmt.Errorf("catalog.successAmount %d, want > 0", c.SuccessAmount))
	}
	p := f.Prepared
	need("prepared.pendingMapping.idempotencyKey", p.PendingMapping.IdempotencyKey)
	need("prepared.pendingMapping.orderId", p.PendingMapping.OrderID)
	need("prepared.pendingMapping.cartId", p.PendingMapping.CartID)
	need("prepared.pendingMapping.paymentMethodId", p.PendingMapping.PaymentMethodID)
	for _, e := range []struct {
		name      string
		exp       Expected
		wantState bool
	}{
		{"interrupted", p.Interrupted, true},
		{"terminalProjectionSkipped", p.TerminalProjectionSkipped, true},
		{"projectionDeleted", p.ProjectionDeleted, true},
		{"closed", p.Closed, true},
		{"relocated", p.Relocated, false},
		{"crashed", p.Crashed, true},
		{"neverCreated", p.NeverCreated, false},
	} {
		need("prepared."+e.name+".orderId", e.exp.OrderID)
		st, err := e.exp.ExpectedState()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("prepared.%s.state: %w", e.name, err))
		case e.wantState && st == nil:
			errs = append(errs, fmt.Errorf("prepared.%s.state is missing", e.name))
		case st != nil && st.GetOrderId() != e.exp.OrderID:
			errs = append(errs, fmt.Errorf("prepared.%s.state is of order %q, not %q", e.name, st.GetOrderId(), e.exp.OrderID))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidFixtures, errors.Join(errs...))
}

// LoadResults reads what a scenario wrote to ResultsPath.
func LoadResults(path string) (Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Results{}, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return Results{}, fmt.Errorf("results %s: %w", path, err)
	}
	return r, nil
}
