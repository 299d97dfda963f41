package commerce

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/cluster/retry"
)

// Seed is the data a run puts into the CommerceStateStore before any order
// starts: cart snapshots, stock per SKU and payment-method seeds. Its JSON
// form is
//
//	{"carts": [{"cartId": "...", "lines": [{"sku": "...", "quantity": 1}],
//	            "amount": 4870, "currency": "EUR"}],
//	 "stock": {"sku": 10},
//	 "paymentMethods": [{"methodId": "...", "approve": false, "reason": "..."}]}
//
// Amounts are in the currency's minor unit.
type Seed struct {
	Carts   []Cart           `json:"carts"`
	Stock   map[string]int64 `json:"stock"`
	Methods []PaymentMethod  `json:"paymentMethods"`
}

// Demo catalogue ids, so runners and tests name the same data DemoSeed
// writes.
const (
	DemoCartOK               = "cart-demo-ok"
	DemoCartNoStock          = "cart-demo-nostock"
	DemoSKUShirt             = "sku-demo-shirt"
	DemoSKUMug               = "sku-demo-mug"
	DemoSKUSoldOut           = "sku-demo-soldout"
	DemoMethodOK             = "pm-demo-ok"
	DemoMethodDeclined       = "pm-demo-declined"
	DemoDeclineReason        = "card declined"
	DemoCurrency             = "EUR"
	demoAmpleStock     int64 = 1_000_000
)

// DemoSeed returns a small catalogue covering the sample's three paths:
// DemoCartOK has ample stock (success, or payment failure when paid with
// DemoMethodDeclined); DemoCartNoStock holds a SKU with no stock
// (inventory failure). Shipping addresses are free strings and need no
// seed.
func DemoSeed() Seed {
	return Seed{
		Carts: []Cart{
			{
				CartID: DemoCartOK,
				Lines: []*contracts.OrderLine{
					{Sku: DemoSKUShirt, Quantity: 2},
					{Sku: DemoSKUMug, Quantity: 1},
				},
				Amount:   2*1990 + 890,
				Currency: DemoCurrency,
			},
			{
				CartID:   DemoCartNoStock,
				Lines:    []*contracts.OrderLine{{Sku: DemoSKUSoldOut, Quantity: 1}},
				Amount:   4990,
				Currency: DemoCurrency,
			},
		},
		Stock: map[string]int64{
			DemoSKUShirt:   demoAmpleStock,
			DemoSKUMug:     demoAmpleStock,
			DemoSKUSoldOut: 0,
		},
		Methods: []PaymentMethod{
			{MethodID: DemoMethodOK, Approve: true},
			{MethodID: DemoMethodDeclined, Approve: false, Reason: DemoDeclineReason},
		},
	}
}

// LoadSeed reads one JSON Seed and validates it. Unknown fields and
// trailing data are errors, so a typo in a seed file cannot silently seed
// nothing. Every error wraps ErrInvalidArgument.
func LoadSeed(r io.Reader) (Seed, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Seed
	if err := dec.Decode(&s); err != nil {
		return Seed{}, fmt.Errorf("%w: seed: %v", ErrInvalidArgument, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Seed{}, fmt.Errorf("%w: seed: trailing data after the JSON object", ErrInvalidArgument)
	}
	if err := s.Validate(); err != nil {
		return Seed{}, err
	}
	return s, nil
}

// Validate reports every problem of the seed at once, each naming where it
// is, wrapped in ErrInvalidArgument.
func (s Seed) Validate() error {
	var errs []error
	carts := make(map[string]bool, len(s.Carts))
	for i, c := range s.Carts {
		if err := validateCart(c); err != nil {
			errs = append(errs, fmt.Errorf("carts[%d]: %w", i, err))
			continue
		}
		if carts[c.CartID] {
			errs = append(errs, fmt.Errorf("carts[%d]: duplicate cartId %q", i, c.CartID))
		}
		carts[c.CartID] = true
	}
	skus := make([]string, 0, len(s.Stock))
	for sku := range s.Stock {
		skus = append(skus, sku)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		switch {
		case sku == "":
			errs = append(errs, errors.New("stock: empty sku"))
		case s.Stock[sku] < 0:
			errs = append(errs, fmt.Errorf("stock[%q]: %d, want >= 0", sku, s.Stock[sku]))
		}
	}
	methods := make(map[string]bool, len(s.Methods))
	for i, m := range s.Methods {
		if err := validateMethod(m); err != nil {
			errs = append(errs, fmt.Errorf("paymentMethods[%d]: %w", i, err))
			continue
		}
		if methods[m.MethodID] {
			errs = append(errs, fmt.Errorf("paymentMethods[%d]: duplicate methodId %q", i, m.MethodID))
		}
		methods[m.MethodID] = true
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: seed: %w", ErrInvalidArgument, errors.Join(errs...))
}

// ApplySeedRetrying is ApplySeed retried with backoff (cluster/retry)
// until it succeeds, the seed is invalid (ErrInvalidArgument), or ctx
// ends: a Redis that is starting, restarting on an existing data set
// (LOADING) or failing over must not fail a seed that a moment later
// would land. Each attempt is bounded by seedAttemptTimeout; logf, if
// set, hears each failed one. ApplySeed sets absolute values, so a
// repeat converges.
func (r *Redis) ApplySeedRetrying(ctx context.Context, s Seed, logf func(format string, args ...any)) error {
	wait := retry.Backoff(100*time.Millisecond, 5*time.Second)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, seedAttemptTimeout)
		err := r.ApplySeed(actx, s)
		cancel()
		if err == nil || errors.Is(err, ErrInvalidArgument) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("seed: %w (last attempt: %w)", ctx.Err(), err)
		}
		pause := wait.NextBackOff()
		if logf != nil {
			logf("seed attempt %d failed (%v); retrying in %s", attempt, err, pause.Round(time.Millisecond))
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("seed: %w (last attempt: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// seedAttemptTimeout bounds one ApplySeed of ApplySeedRetrying.
const seedAttemptTimeout = 10 * time.Second

// ApplySeed validates the seed and writes it, replacing carts, stock and
// methods of the same ids. Every SKU's stock change is a seed movement of
// its ledger (none when the stock already is the seed's). It is not one
// atomic step (the keys live in different slots); applying the same seed
// again converges.
func (r *Redis) ApplySeed(ctx context.Context, s Seed) error {
	if err := s.Validate(); err != nil {
		return err
	}
	type put struct {
		key string
		val []byte
	}
	carts := make([]put, 0, len(s.Carts))
	for _, c := range s.Carts {
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("%w: cart %q: %v", ErrInvalidArgument, c.CartID, err)
		}
		carts = append(carts, put{r.keys.cart(c.CartID), b})
	}
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range carts {
			p.Set(ctx, c.key, c.val, 0)
		}
		// Each SKU's stock is set with its seed movement, so the ledger
		// starts at the initial stock. Eval, not EvalSha: a pipeline
		// cannot fall back on NOSCRIPT.
		now := r.now().UnixMilli()
		for sku, n := range s.Stock {
			setStockScript.Eval(ctx, p, []string{r.keys.stock(sku), r.keys.ledger(sku)}, n, now, r.ledgerMax)
		}
		for _, m := range s.Methods {
			p.HSet(ctx, r.keys.paymentMethod(m.MethodID), "approve", boolField(m.Approve), "reason", m.Reason)
		}
		return nil
	})
	return translate("apply seed", err)
}

// validateCart is shared by PutCart and seed validation so that a stored
// cart is always one an order can be started from.
func validateCart(c Cart) error {
	if c.CartID == "" {
		return errors.New("cartId is empty")
	}
	if len(c.Lines) == 0 {
		return fmt.Errorf("cart %q has no lines", c.CartID)
	}
	for i, l := range c.Lines {
		switch {
		case l == nil:
			return fmt.Errorf("cart %q lines[%d] is null", c.CartID, i)
		case l.GetSku() == "":
			return fmt.Errorf("cart %q lines[%d]: sku is empty", c.CartID, i)
		case l.GetQuantity() <= 0:
			return fmt.Errorf("cart %q lines[%d] (sku %q): quantity %d, want > 0", c.CartID, i, l.GetSku(), l.GetQuantity())
		}
	}
	if c.Amount < 0 {
		return fmt.Errorf("cart %q: amount %d is negative", c.CartID, c.Amount)
	}
	if !isCurrencyCode(c.Currency) {
		return fmt.Errorf("cart %q: currency %q is not a three-letter upper-case code", c.CartID, c.Currency)
	}
	return nil
}

func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func validateMethod(m PaymentMethod) error {
	if strings.TrimSpace(m.MethodID) == "" {
		return errors.New("methodId is empty")
	}
	if m.Approve && m.Reason != "" {
		return fmt.Errorf("method %q approves but has a decline reason %q", m.MethodID, m.Reason)
	}
	return nil
}

// ---- JSON forms ----

// cartJSON is the wire form of Cart, in the spec's field names. Cart
// itself has no tags because it carries contract messages, which must not
// be encoded by reflection on generated structs.
type cartJSON struct {
	CartID   string     `json:"cartId"`
	Lines    []lineJSON `json:"lines"`
	Amount   int64      `json:"amount"`
	Currency string     `json:"currency"`
}

type lineJSON struct {
	SKU      string `json:"sku"`
	Quantity int32  `json:"quantity"`
}

// MarshalJSON encodes the cart as {cartId, lines[{sku, quantity}], amount,
// currency}: the seed form, also the form a cart snapshot is stored in.
func (c Cart) MarshalJSON() ([]byte, error) {
	w := cartJSON{CartID: c.CartID, Amount: c.Amount, Currency: c.Currency, Lines: make([]lineJSON, 0, len(c.Lines))}
	for i, l := range c.Lines {
		if l == nil {
			return nil, fmt.Errorf("cart %q lines[%d] is null", c.CartID, i)
		}
		w.Lines = append(w.Lines, lineJSON{SKU: l.GetSku(), Quantity: l.GetQuantity()})
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes the MarshalJSON form, refusing unknown fields.
func (c *Cart) UnmarshalJSON(b []byte) error {
	var w cartJSON
	if err := strictUnmarshal(b, &w); err != nil {
		return err
	}
	*c = Cart{CartID: w.CartID, Amount: w.Amount, Currency: w.Currency}
	if w.Lines != nil {
		c.Lines = make([]*contracts.OrderLine, 0, len(w.Lines))
	}
	for _, l := range w.Lines {
		c.Lines = append(c.Lines, &contracts.OrderLine{Sku: l.SKU, Quantity: l.Quantity})
	}
	return nil
}

type methodJSON struct {
	MethodID string `json:"methodId"`
	Approve  bool   `json:"approve"`
	Reason   string `json:"reason,omitempty"`
}

// MarshalJSON encodes the method as {methodId, approve, reason}.
func (m PaymentMethod) MarshalJSON() ([]byte, error) {
	return json.Marshal(methodJSON(m))
}

// UnmarshalJSON decodes the MarshalJSON form, refusing unknown fields.
func (m *PaymentMethod) UnmarshalJSON(b []byte) error {
	var w methodJSON
	if err := strictUnmarshal(b, &w); err != nil {
		return err
	}
	*m = PaymentMethod(w)
	return nil
}

// strictUnmarshal applies DisallowUnknownFields inside a custom
// UnmarshalJSON, where the outer decoder's setting does not reach.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
