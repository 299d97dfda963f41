package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/shoppingmall-go/shoppingmall/runner/jsonfile"
)

// History is everything a soak run observed, in a form the checker can read
// again offline. The soak driver fills it after the quiet period; the
// checker never talks to Redis or the cluster itself, so a saved history
// re-checks to the same report.
type History struct {
	Seed int64 `json:"seed"`
	// Client is the client's own log: one record per HTTP attempt, in the
	// order the answers arrived.
	Client []Attempt `json:"client"`
	// Orders holds every order found in the store, by order id. An order
	// the client was told about but that has no entry here is lost.
	Orders map[string]*OrderRecord `json:"orders"`
	// Idempotency is the key → order mapping as Redis holds it, by key.
	Idempotency map[string]*IdempotencyRecord `json:"idempotency"`
	// Modules is the inventory and payment modules' own records, by order id.
	Modules map[string]*ModuleRecord `json:"modules"`
	// Stock is per SKU.
	Stock map[string]*StockRecord `json:"stock"`
	// Faults is the fault schedule as injected, with the effect observed.
	Faults []Fault `json:"faults"`
}

// Op values of Attempt.Op.
const (
	OpStart    = "start"
	OpContinue = "continue"
	OpRebuild  = "rebuild"
	OpGet      = "get"
)

// Attempt is one HTTP attempt and what the client was told.
type Attempt struct {
	Key string `json:"key"` // idempotency key; "" for calls that carry none
	API string `json:"api"` // which commerce-api answered (name or address)
	Op  string `json:"op"`  // start | continue | rebuild | get
	// Request fingerprint: a reused key with another body must be refused,
	// so the checker needs to know what was sent.
	CartID            string `json:"cartId,omitempty"`
	ShippingAddressID string `json:"shippingAddressId,omitempty"`
	PaymentMethodID   string `json:"paymentMethodId,omitempty"`
	// StatusCode is the HTTP status; 0 when no answer arrived (timeout,
	// connection reset).
	StatusCode  int    `json:"statusCode"`
	ErrorCode   string `json:"errorCode,omitempty"`
	ErrorReason string `json:"errorReason,omitempty"`
	OrderID     string `json:"orderId,omitempty"`     // order named by the answer
	OrderStatus string `json:"orderStatus,omitempty"` // status named by the answer, if any
	// SentAtUnixMs is when the request was sent. Answers to overlapping
	// requests may arrive in any order, so the client-view invariant only
	// orders an answer after another when its request was sent after the
	// other's answer arrived. 0 means unknown: AtUnixMs is used instead.
	SentAtUnixMs int64 `json:"sentAtUnixMs"`
	// AtUnixMs is when the answer arrived (when the attempt ended).
	AtUnixMs int64 `json:"atUnixMs"`
}

// Acknowledged reports whether the answer confirmed an order to the client.
func (a Attempt) Acknowledged() bool {
	return (a.StatusCode == 200 || a.StatusCode == 201) && a.OrderID != ""
}

// OrderRecord is one order as the store holds it after the run.
type OrderRecord struct {
	Stream    []Envelope       `json:"stream"`
	ReadModel *ReadModel       `json:"readModel,omitempty"` // nil: no projection
	Ownership []OwnershipEvent `json:"ownership,omitempty"`
	// LocationGeneration is the generation in the order's Location record
	// at the end of the run (0: no record).
	LocationGeneration int64 `json:"locationGeneration,omitempty"`
}

// Envelope is one stored event with the writer's fence.
type Envelope struct {
	Version         int64  `json:"version"`
	EventID         string `json:"eventId"`
	EventType       string `json:"eventType"`
	SourceCommandID string `json:"sourceCommandId,omitempty"`
	CreatedAtUnixMs int64  `json:"createdAtUnixMs"`
	// Data is the event body exactly as stored (contract JSON).
	Data string `json:"data"`
	// Schema is the body's schema version (0 in histories written before
	// it was recorded: the first schema).
	Schema          int   `json:"schema,omitempty"`
	FenceGeneration int64 `json:"fenceGeneration"`
	FenceEpoch      int64 `json:"fenceEpoch"`
}

// ReadModel is the order's projection.
type ReadModel struct {
	Status  string `json:"status"`
	Version int64  `json:"version"`
	// State is the projected OrderState in contract JSON (docs/contract.md,
	// "Wire form"): the checker holds every field of it against the fold.
	State json.RawMessage `json:"state,omitempty"`
}

// Kinds of OwnershipEvent.
const (
	OwnActivation = "activation"
	OwnRelocation = "relocation"
	OwnRelease    = "release"
	OwnRepair     = "repair"
	OwnTakeover   = "takeover"
)

// OwnershipEvent is one entry of an order's ownership history.
type OwnershipEvent struct {
	Kind       string `json:"kind"`
	Member     string `json:"member"`
	Generation int64  `json:"generation"`
	AtUnixMs   int64  `json:"atUnixMs"`
}

// IdempotencyRecord is what Redis maps one idempotency key to. OrderIDs
// lists every order id ever found for the key (more than one is a
// violation); a healthy key has exactly one.
type IdempotencyRecord struct {
	OrderIDs []string `json:"orderIds"`
	Status   string   `json:"status,omitempty"`
	// Fingerprint is the request fingerprint stored with the mapping.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Status values of IdempotencyRecord: pending until the order's start is
// recorded, started after.
const (
	IdemPending = "pending"
	IdemStarted = "started"
)

// ModuleRecord is the inventory and payment modules' view of one order.
// The soak driver scans every reservation and payment record and groups
// them by the orderId each names (commerce.RecordScan), so Reservations
// and Authorizations count every record naming the order: a second one
// under an id other than the order's own is seen. The other fields
// describe the order's reservation and payment: the record under the
// order's own id when there is one, else the first by id.
type ModuleRecord struct {
	// Reservations is how many reservation records name the order.
	Reservations int  `json:"reservations"`
	Reserved     bool `json:"reserved"` // the first reserve was accepted
	Released     bool `json:"released"` // the reservation was released
	// ReservationFailed is true when the first reserve was refused.
	ReservationFailed bool   `json:"reservationFailed,omitempty"`
	Lines             []Line `json:"lines,omitempty"` // lines the reservation holds
	ReserveCalls      int    `json:"reserveCalls,omitempty"`
	ReleaseCalls      int    `json:"releaseCalls,omitempty"`

	// Authorizations is how many payment records name the order, accepted
	// or declined.
	Authorizations int `json:"authorizations"`
	// Authorized: a payment record naming the order was accepted.
	// PaymentID, PaymentAmount and PaymentCurrency are that record's id
	// and what it authorized.
	Authorized      bool   `json:"authorized"`
	PaymentID       string `json:"paymentId,omitempty"`
	PaymentAmount   int64  `json:"paymentAmount,omitempty"`
	PaymentCurrency string `json:"paymentCurrency,omitempty"`
	// PaymentCalled is true when the payment module was asked at all.
	PaymentCalled  bool `json:"paymentCalled"`
	AuthorizeCalls int  `json:"authorizeCalls,omitempty"`
	// PaymentFirstAtUnixMs is when payment was first called, if known.
	PaymentFirstAtUnixMs int64 `json:"paymentFirstAtUnixMs,omitempty"`
}

// Line is one SKU and quantity.
type Line struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// StockRecord is one SKU's stock at the start and end of the run.
type StockRecord struct {
	Initial   int64 `json:"initial"`
	Remaining int64 `json:"remaining"`
}

// Fault is one injected fault.
type Fault struct {
	Kind     string `json:"kind"`
	Target   string `json:"target"`
	AtUnixMs int64  `json:"atUnixMs"`
	Effect   string `json:"effect,omitempty"` // what was observed; "" when none
}

// LoadHistory reads a history saved by Save.
func LoadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("load history %s: %w", path, err)
	}
	// Save indents the projected states with the rest; they are read
	// back compact, as the driver captured them.
	for id, rec := range h.Orders {
		if rec == nil || rec.ReadModel == nil || len(rec.ReadModel.State) == 0 {
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, rec.ReadModel.State); err != nil {
			return nil, fmt.Errorf("load history %s: order %s: projected state: %w", path, id, err)
		}
		rec.ReadModel.State = c.Bytes()
	}
	return &h, nil
}

// Save writes the history as indented JSON.
func (h *History) Save(path string) error {
	if err := jsonfile.Write(path, h); err != nil {
		return fmt.Errorf("save history: %w", err)
	}
	return nil
}
