// Package workflowtest provides in-memory fakes of every store and module
// the workflow application layer depends on, so application and grain
// tests run without Redis. The fakes follow the interfaces' documented
// contracts (fencing, expected version, source-command dedupe, first result
// per deterministic id, version-guarded projection) and count every call.
//
// Each store fake passes the contract suite its Redis store passes
// (eventstoretest, readmodeltest, commercetest; contract_test.go), so a
// test above the stores sees nothing from a fake that Redis would not do.
// These fakes exist only for tests above the stores. Nothing outside
// _test files may import this package. It must not import actors/grain,
// cluster, edge or any Redis client.
package workflowtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// Kind is the cluster kind the fake configuration uses.
const Kind = "shoppingmall.order-workflow"

// Deps bundles one set of fakes and a Config wired to them.
type Deps struct {
	Events      *Events
	ReadModel   *ReadModel
	Idempotency *Idempotency
	Inventory   *Inventory
	Payment     *Payment
	Envelopes   *Envelopes
	// Commits commits units over Events, ReadModel, Envelopes and
	// Idempotency.
	Commits  *Committer
	Clock    *Clock
	Evidence *Evidence
	// Config uses every fake above.
	Config workflow.Config
}

// NewDeps returns fresh fakes and a ready Config. The clock starts at
// 1_700_000_000_000 and advances by one millisecond per reading, so event
// times are distinct and ordered.
func NewDeps() *Deps {
	d := &Deps{
		Events:      NewEvents(),
		ReadModel:   NewReadModel(),
		Idempotency: NewIdempotency(),
		Inventory:   NewInventory(),
		Payment:     NewPayment(),
		Envelopes:   NewEnvelopes(),
		Clock:       NewClock(1_700_000_000_000, 1),
		Evidence:    &Evidence{},
	}
	d.Commits = &Committer{Events: d.Events, ReadModel: d.ReadModel, Envelopes: d.Envelopes, Idempotency: d.Idempotency}
	d.Config = workflow.Config{
		Kind:        Kind,
		Events:      d.Events,
		ReadModel:   d.ReadModel,
		Idempotency: d.Idempotency,
		Inventory:   d.Inventory,
		Payment:     d.Payment,
		Envelopes:   d.Envelopes,
		Commits:     d.Commits,
		Now:         d.Clock.Now,
		Evidence:    d.Evidence,
	}
	return d
}

// Writes counts every state-changing call made to any fake (appends,
// projection writes and deletes, mapping changes, module effects, envelope
// saves). Seeding helpers are not counted.
func (d *Deps) Writes() int64 {
	return d.Events.Appends.Load() + d.ReadModel.Puts.Load() + d.ReadModel.Deletes.Load() +
		d.Idempotency.MarkStartedCalls.Load() + d.Idempotency.ReserveCalls.Load() +
		d.Inventory.TotalReserveCalls.Load() + d.Inventory.TotalReleaseCalls.Load() +
		d.Payment.TotalAuthorizeCalls.Load() + d.Envelopes.Saves.Load()
}

// StartReq reserves a pending idempotency mapping key → orderID (as
// CommerceApi would) and returns the matching start request for one line
// of 2 × "SKU-1" at 12900 EUR, paid with methodID.
func (d *Deps) StartReq(orderID, key, methodID string) *contracts.StartOrderWorkflowReq {
	d.Idempotency.Seed(key, commerce.Mapping{OrderID: orderID, Status: commerce.MappingPending})
	return &contracts.StartOrderWorkflowReq{
		OrderId:           orderID,
		CartId:            "cart-" + orderID,
		ShippingAddressId: "addr-" + orderID,
		PaymentMethodId:   methodID,
		IdempotencyKey:    key,
		SourceCommandId:   order.StartSourceCommandID(key),
		Lines:             []*contracts.OrderLine{{Sku: "SKU-1", Quantity: 2}},
		Amount:            12900,
		Currency:          "EUR",
	}
}

// ---- clock ----

// Clock is a controllable unix-millisecond clock.
type Clock struct {
	now  atomic.Int64
	step atomic.Int64
}

// NewClock starts at start and advances by step after every reading.
func NewClock(start, step int64) *Clock {
	c := &Clock{}
	c.now.Store(start)
	c.step.Store(step)
	return c
}

// Now returns the current time and advances it by the step.
func (c *Clock) Now() int64 { return c.now.Add(c.step.Load()) - c.step.Load() }

// Set moves the clock to ms.
func (c *Clock) Set(ms int64) { c.now.Store(ms) }

// Peek returns the current time without advancing.
func (c *Clock) Peek() int64 { return c.now.Load() }

// ---- evidence ----

// Evidence collects evidence lines. Safe for concurrent use.
type Evidence struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (e *Evidence) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writes++
	return e.buf.Write(p)
}

// String is everything written so far.
func (e *Evidence) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.buf.String()
}

// Lines is the written lines without their newlines.
func (e *Evidence) Lines() []string {
	s := strings.TrimSuffix(e.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Count is how many lines equal line exactly.
func (e *Evidence) Count(line string) int {
	n := 0
	for _, l := range e.Lines() {
		if l == line {
			n++
		}
	}
	return n
}

// Writes is how many Write calls were made.
func (e *Evidence) Writes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writes
}

// ---- event store ----

type stream struct {
	fence   *eventstore.Fence
	entries []eventstore.Envelope
}

// Events is an in-memory eventstore.Store.
type Events struct {
	mu      sync.Mutex
	streams map[string]*stream
	// appendFault, when set, is applied to the next Append: landed tells
	// whether the events are stored before err is returned.
	appendFault *fault

	Opens, Loads, Appends atomic.Int64
}

type fault struct {
	err    error
	landed bool
}

// NewEvents returns an empty store.
func NewEvents() *Events { return &Events{streams: map[string]*stream{}} }

// FailNextAppend makes the next Append return err without storing
// anything: a write that never reached the store.
func (e *Events) FailNextAppend(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.appendFault = &fault{err: err}
}

// LoseNextAppendReply makes the next Append store its events and then
// return err: a reply lost after the write landed.
func (e *Events) LoseNextAppendReply(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.appendFault = &fault{err: err, landed: true}
}

func (e *Events) Open(_ context.Context, orderID string, generation int64) (eventstore.Fence, []eventstore.Envelope, error) {
	e.Opens.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.streams[orderID]
	if !ok || (len(st.entries) == 0 && st.fence == nil) {
		return eventstore.Fence{Generation: generation, Epoch: 1}, nil, nil
	}
	var f eventstore.Fence
	switch {
	case st.fence == nil || generation > st.fence.Generation:
		f = eventstore.Fence{Generation: generation, Epoch: 1}
	case generation == st.fence.Generation:
		f = eventstore.Fence{Generation: generation, Epoch: st.fence.Epoch + 1}
	default:
		return eventstore.Fence{}, nil, &eventstore.FencedOpenError{OrderID: orderID, Generation: generation, Stored: *st.fence}
	}
	st.fence = &f
	return f, slices.Clone(st.entries), nil
}

func (e *Events) Append(_ context.Context, orderID string, expectedVersion int64, fence eventstore.Fence, events []eventstore.Envelope) (int64, error) {
	e.Appends.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	flt := e.appendFault
	e.appendFault = nil
	if flt != nil && !flt.landed {
		return 0, flt.err
	}
	st, ok := e.streams[orderID]
	if !ok {
		st = &stream{}
		e.streams[orderID] = st
	}
	// The checks apply in the contract's order: fence, version, source
	// command.
	if st.fence != nil && (*st.fence != fence || st.fence.Epoch == 0) {
		return 0, fmt.Errorf("fence %+v is not %+v: %w", fence, *st.fence, eventstore.ErrFenced)
	}
	if v := int64(len(st.entries)); v != expectedVersion {
		return 0, fmt.Errorf("stream at %d, expected %d: %w", v, expectedVersion, eventstore.ErrVersionConflict)
	}
	for _, env := range events {
		if env.SourceCommandID == "" {
			continue
		}
		for _, old := range st.entries {
			if old.SourceCommandID == env.SourceCommandID {
				return 0, fmt.Errorf("%s at version %d: %w", env.SourceCommandID, old.Version, eventstore.ErrDuplicateCommand)
			}
		}
	}
	if st.fence == nil && len(events) > 0 {
		f := fence
		st.fence = &f
	}
	for _, env := range events {
		env.OrderID = orderID
		env.Version = int64(len(st.entries)) + 1
		env.Data = slices.Clone(env.Data)
		env.FenceGeneration, env.FenceEpoch = fence.Generation, fence.Epoch
		st.entries = append(st.entries, env)
	}
	if flt != nil {
		return 0, flt.err
	}
	return int64(len(st.entries)), nil
}

// RaiseFence retires every writer below minGeneration, stream or not.
func (e *Events) RaiseFence(_ context.Context, orderID string, minGeneration int64) (eventstore.Fence, error) {
	if minGeneration < 1 {
		return eventstore.Fence{}, fmt.Errorf("raise fence to generation %d: generations start at 1", minGeneration)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.streams[orderID]
	if !ok {
		st = &stream{}
		e.streams[orderID] = st
	}
	if st.fence != nil && st.fence.Generation >= minGeneration {
		return *st.fence, nil
	}
	st.fence = &eventstore.Fence{Generation: minGeneration}
	return *st.fence, nil
}

func (e *Events) Load(_ context.Context, orderID string) ([]eventstore.Envelope, error) {
	e.Loads.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if st, ok := e.streams[orderID]; ok {
		return slices.Clone(st.entries), nil
	}
	return []eventstore.Envelope{}, nil
}

// Truncate keeps the order's first keep entries, as a store failover that
// lost the newest acknowledged writes leaves a stream.
func (e *Events) Truncate(orderID string, keep int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if st, ok := e.streams[orderID]; ok && keep < len(st.entries) {
		st.entries = st.entries[:keep]
	}
}

// Stream returns a copy of the order's entries.
func (e *Events) Stream(orderID string) []eventstore.Envelope {
	e.mu.Lock()
	defer e.mu.Unlock()
	if st, ok := e.streams[orderID]; ok {
		return slices.Clone(st.entries)
	}
	return nil
}

// Types returns the order's event types in stream order.
func (e *Events) Types(orderID string) []string {
	var out []string
	for _, env := range e.Stream(orderID) {
		out = append(out, env.EventType)
	}
	return out
}

// Corrupt replaces the body of the order's entry at version with data.
func (e *Events) Corrupt(orderID string, version int64, data []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.streams[orderID].entries[version-1].Data = data
}

// ---- read model ----

type projection struct {
	state   *contracts.OrderState
	version int64
}

// ReadModel is an in-memory readmodel.Store and, like the Redis store
// with its TerminalFeed, a readmodel.TerminalWatcher (terminal.go): every
// stored terminal record wakes its order's waiters.
type ReadModel struct {
	mu      sync.Mutex
	records map[string]projection
	putErr  error
	watch   watchers

	Gets, Puts, Deletes atomic.Int64
}

// NewReadModel returns an empty store.
func NewReadModel() *ReadModel { return &ReadModel{records: map[string]projection{}} }

// FailNextPut makes the next Put return err without writing.
func (r *ReadModel) FailNextPut(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.putErr = err
}

func (r *ReadModel) Get(_ context.Context, orderID string) (*contracts.OrderState, int64, error) {
	r.Gets.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.records[orderID]
	if !ok {
		return nil, 0, fmt.Errorf("%s: %w", orderID, readmodel.ErrNotFound)
	}
	return proto.Clone(p.state).(*contracts.OrderState), p.version, nil
}

func (r *ReadModel) Put(_ context.Context, orderID string, version int64, state *contracts.OrderState) (bool, error) {
	r.Puts.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.putErr; err != nil {
		r.putErr = nil
		return false, err
	}
	if p, ok := r.records[orderID]; ok && p.version > version {
		return false, nil
	}
	r.records[orderID] = projection{state: proto.Clone(state).(*contracts.OrderState), version: version}
	r.watch.stored(orderID, state)
	return true, nil
}

func (r *ReadModel) Replace(_ context.Context, orderID string, version int64, state *contracts.OrderState) error {
	r.Puts.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.putErr; err != nil {
		r.putErr = nil
		return err
	}
	r.records[orderID] = projection{state: proto.Clone(state).(*contracts.OrderState), version: version}
	r.watch.stored(orderID, state)
	return nil
}

func (r *ReadModel) Delete(_ context.Context, orderID string) error {
	r.Deletes.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, orderID)
	return nil
}

// Seed stores a projection without counting a write.
func (r *ReadModel) Seed(orderID string, version int64, state *contracts.OrderState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[orderID] = projection{state: proto.Clone(state).(*contracts.OrderState), version: version}
	r.watch.stored(orderID, state)
}

// seedUnlessNewer stores a projection, without counting a write, unless a
// newer one is stored: Put's guard.
func (r *ReadModel) seedUnlessNewer(orderID string, version int64, state *contracts.OrderState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.records[orderID]; ok && p.version > version {
		return
	}
	r.records[orderID] = projection{state: proto.Clone(state).(*contracts.OrderState), version: version}
	r.watch.stored(orderID, state)
}

// Remove deletes a projection without counting a write.
func (r *ReadModel) Remove(orderID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, orderID)
}

// Lookup returns the projection and its version without counting a read.
func (r *ReadModel) Lookup(orderID string) (*contracts.OrderState, int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.records[orderID]
	if !ok {
		return nil, 0, false
	}
	return proto.Clone(p.state).(*contracts.OrderState), p.version, true
}

// ---- idempotency ----

// Idempotency is an in-memory commerce.Idempotency.
type Idempotency struct {
	mu       sync.Mutex
	mappings map[string]commerce.Mapping
	// old are the keys whose mapping is of the old layout, which a unit's
	// started mark does not reach (only MarkStarted does).
	old      map[string]bool
	failMark error

	ReserveCalls, MarkStartedCalls atomic.Int64
}

// NewIdempotency returns an empty mapping store.
func NewIdempotency() *Idempotency {
	return &Idempotency{mappings: map[string]commerce.Mapping{}, old: map[string]bool{}}
}

// MoveToOldLayout files key's mapping in the old layout: a start's unit
// does not mark it (AddStartedMark's write finds nothing), MarkStarted
// does, as commerce.Redis does for a mapping written before the layout
// changed.
func (i *Idempotency) MoveToOldLayout(key string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.old[key] = true
}

func (i *Idempotency) Reserve(_ context.Context, key string, candidate commerce.Mapping) (commerce.Mapping, bool, error) {
	i.ReserveCalls.Add(1)
	i.mu.Lock()
	defer i.mu.Unlock()
	if m, ok := i.mappings[key]; ok {
		return m, false, nil
	}
	candidate.Status = commerce.MappingPending
	i.mappings[key] = candidate
	return candidate, true, nil
}

func (i *Idempotency) Get(_ context.Context, key, _ string) (commerce.Mapping, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	m, ok := i.mappings[key]
	if !ok {
		return commerce.Mapping{}, fmt.Errorf("key %q: %w", key, commerce.ErrNotFound)
	}
	return m, nil
}

func (i *Idempotency) MarkStarted(_ context.Context, key, orderID string) error {
	i.MarkStartedCalls.Add(1)
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.failMark; err != nil {
		i.failMark = nil
		return err
	}
	m, ok := i.mappings[key]
	if !ok || m.OrderID != orderID {
		return fmt.Errorf("key %q for order %q: %w", key, orderID, commerce.ErrNotFound)
	}
	m.Status = commerce.MappingStarted
	i.mappings[key] = m
	return nil
}

// AddStartedMark implements commerce.Idempotency: the write names the key
// and is made when Committer.Commit hands it back to this store.
func (i *Idempotency) AddStartedMark(u commerce.Unit, key string) (int, error) {
	if key == "" || u.OrderID() == "" {
		return 0, fmt.Errorf("%w: idempotency key and orderId are required", commerce.ErrInvalidArgument)
	}
	return u.HashSetIf(idemKeyPrefix+key, "orderId", u.OrderID(), "status", []byte(commerce.MappingStarted)), nil
}

// idemKeyPrefix marks the unit writes of Idempotency.
const idemKeyPrefix = "workflowtest:idem:"

// apply makes a committed unit's write of this store, counted as a
// MarkStarted call.
func (i *Idempotency) apply(c eventstore.Companion) (mine, wrote bool) {
	key, ok := strings.CutPrefix(c.Key, idemKeyPrefix)
	if !ok {
		return false, false
	}
	i.MarkStartedCalls.Add(1)
	i.mu.Lock()
	defer i.mu.Unlock()
	m, ok := i.mappings[key]
	if !ok || m.OrderID != c.IfValue || i.old[key] {
		return true, false
	}
	m.Status = commerce.MappingStarted
	i.mappings[key] = m
	return true, true
}

func (i *Idempotency) Forget(_ context.Context, key string, m commerce.Mapping) (bool, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	cur, ok := i.mappings[key]
	if !ok || cur.Status != commerce.MappingPending || cur.OrderID != m.OrderID || cur.Fingerprint != m.Fingerprint {
		return false, nil
	}
	delete(i.mappings, key)
	return true, nil
}

// FailNextMarkStarted makes the next MarkStarted fail with err, writing
// nothing: a start interrupted after its event was recorded, whose unit
// could not mark the mapping itself (MoveToOldLayout).
func (i *Idempotency) FailNextMarkStarted(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.failMark = err
}

// Seed stores a mapping without counting a write.
func (i *Idempotency) Seed(key string, m commerce.Mapping) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.mappings[key] = m
}

// Status returns the key's mapping status, "" when unmapped.
func (i *Idempotency) Status(key string) commerce.MappingStatus {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.mappings[key].Status
}

// ---- inventory ----

type reservation struct {
	res      *contracts.ReserveInventoryRes
	lines    []*contracts.OrderLine
	released *contracts.ReleaseInventoryRes
}

// Inventory is an in-memory commerce.Inventory: first result per
// ReservationId, all-or-nothing stock moves.
type Inventory struct {
	mu           sync.Mutex
	stock        map[string]int64
	reservations map[string]*reservation
	reserveCalls map[string]int64
	releaseCalls map[string]int64

	TotalReserveCalls, TotalReleaseCalls atomic.Int64
}

// NewInventory returns an inventory with no stock.
func NewInventory() *Inventory {
	return &Inventory{
		stock: map[string]int64{}, reservations: map[string]*reservation{},
		reserveCalls: map[string]int64{}, releaseCalls: map[string]int64{},
	}
}

// reserveTotals validates a reservation request as the Redis module does
// and sums its quantities per SKU.
func reserveTotals(req *contracts.ReserveInventoryReq) (map[string]int64, error) {
	if req.GetReservationId() == "" {
		return nil, fmt.Errorf("%w: reservationId is empty", commerce.ErrInvalidArgument)
	}
	if len(req.GetLines()) == 0 {
		return nil, fmt.Errorf("%w: reservation %q has no lines", commerce.ErrInvalidArgument, req.GetReservationId())
	}
	totals := map[string]int64{}
	for i, l := range req.GetLines() {
		if l.GetSku() == "" || l.GetQuantity() <= 0 {
			return nil, fmt.Errorf("%w: reservation %q line %d: sku %q quantity %d", commerce.ErrInvalidArgument,
				req.GetReservationId(), i, l.GetSku(), l.GetQuantity())
		}
		totals[l.GetSku()] += int64(l.GetQuantity())
	}
	return totals, nil
}

func (v *Inventory) Reserve(_ context.Context, req *contracts.ReserveInventoryReq) (*contracts.ReserveInventoryRes, error) {
	totals, err := reserveTotals(req)
	if err != nil {
		return nil, err
	}
	v.TotalReserveCalls.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reserveCalls[req.ReservationId]++
	if r, ok := v.reservations[req.ReservationId]; ok {
		return proto.Clone(r.res).(*contracts.ReserveInventoryRes), nil
	}
	res := &contracts.ReserveInventoryRes{Accepted: true}
	for _, l := range req.Lines {
		if v.stock[l.Sku] < totals[l.Sku] {
			res = &contracts.ReserveInventoryRes{Accepted: false, Reason: proto.String("insufficient stock for " + l.Sku)}
			break
		}
	}
	if res.Accepted {
		for sku, q := range totals {
			v.stock[sku] -= q
		}
	}
	v.reservations[req.ReservationId] = &reservation{res: res, lines: req.Lines}
	return proto.Clone(res).(*contracts.ReserveInventoryRes), nil
}

func (v *Inventory) Release(_ context.Context, req *contracts.ReleaseInventoryReq) (*contracts.ReleaseInventoryRes, error) {
	if req.GetReservationId() == "" {
		return nil, fmt.Errorf("%w: reservationId is empty", commerce.ErrInvalidArgument)
	}
	v.TotalReleaseCalls.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.releaseCalls[req.ReservationId]++
	r, ok := v.reservations[req.ReservationId]
	switch {
	case !ok:
		return &contracts.ReleaseInventoryRes{Released: false, Reason: proto.String(commerce.ReasonUnknownReservation)}, nil
	case !r.res.Accepted:
		return &contracts.ReleaseInventoryRes{Released: false, Reason: proto.String(commerce.ReasonReservationNotAccepted)}, nil
	case r.released != nil:
		return proto.Clone(r.released).(*contracts.ReleaseInventoryRes), nil
	}
	for _, l := range r.lines {
		v.stock[l.Sku] += int64(l.Quantity)
	}
	r.released = &contracts.ReleaseInventoryRes{Released: true}
	return proto.Clone(r.released).(*contracts.ReleaseInventoryRes), nil
}

func (v *Inventory) SetStock(_ context.Context, sku string, quantity int64) error {
	if sku == "" || quantity < 0 {
		return fmt.Errorf("%w: stock of %q is %d", commerce.ErrInvalidArgument, sku, quantity)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stock[sku] = quantity
	return nil
}

func (v *Inventory) Stock(_ context.Context, sku string) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stock[sku], nil
}

func (v *Inventory) ReserveCalls(_ context.Context, reservationID string) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reserveCalls[reservationID], nil
}

func (v *Inventory) ReleaseCalls(_ context.Context, reservationID string) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.releaseCalls[reservationID], nil
}

// ---- payment ----

// Payment is an in-memory commerce.Payment: first result per PaymentId.
type Payment struct {
	mu             sync.Mutex
	methods        map[string]commerce.PaymentMethod
	results        map[string]*contracts.AuthorizePaymentRes
	captured       map[string]int64
	authorizeCalls map[string]int64
	lastMethod     map[string]string

	TotalAuthorizeCalls atomic.Int64
}

// NewPayment returns a payment module with no methods.
func NewPayment() *Payment {
	return &Payment{
		methods: map[string]commerce.PaymentMethod{}, results: map[string]*contracts.AuthorizePaymentRes{},
		captured: map[string]int64{}, authorizeCalls: map[string]int64{}, lastMethod: map[string]string{},
	}
}

func (p *Payment) Authorize(_ context.Context, req *contracts.AuthorizePaymentReq) (*contracts.AuthorizePaymentRes, error) {
	if req.GetPaymentId() == "" || req.GetPaymentMethodId() == "" || req.GetAmount() < 0 {
		return nil, fmt.Errorf("%w: payment %q method %q amount %d", commerce.ErrInvalidArgument,
			req.GetPaymentId(), req.GetPaymentMethodId(), req.GetAmount())
	}
	p.TotalAuthorizeCalls.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.authorizeCalls[req.PaymentId]++
	p.lastMethod[req.PaymentId] = req.PaymentMethodId
	if r, ok := p.results[req.PaymentId]; ok {
		return proto.Clone(r).(*contracts.AuthorizePaymentRes), nil
	}
	m, ok := p.methods[req.PaymentMethodId]
	var res *contracts.AuthorizePaymentRes
	switch {
	case !ok:
		res = &contracts.AuthorizePaymentRes{Accepted: false, Reason: proto.String(commerce.ReasonUnknownPaymentMethod)}
	case !m.Approve && m.Reason == "":
		res = &contracts.AuthorizePaymentRes{Accepted: false, Reason: proto.String(commerce.ReasonPaymentDeclined)}
	case !m.Approve:
		res = &contracts.AuthorizePaymentRes{Accepted: false, Reason: proto.String(m.Reason)}
	default:
		res = &contracts.AuthorizePaymentRes{Accepted: true}
		p.captured[req.PaymentId] = req.Amount
	}
	p.results[req.PaymentId] = res
	return proto.Clone(res).(*contracts.AuthorizePaymentRes), nil
}

func (p *Payment) PutMethod(_ context.Context, m commerce.PaymentMethod) error {
	if strings.TrimSpace(m.MethodID) == "" || (m.Approve && m.Reason != "") {
		return fmt.Errorf("%w: payment method %+v", commerce.ErrInvalidArgument, m)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.methods[m.MethodID] = m
	return nil
}

func (p *Payment) GetMethod(_ context.Context, methodID string) (commerce.PaymentMethod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.methods[methodID]
	if !ok {
		return commerce.PaymentMethod{}, fmt.Errorf("method %q: %w", methodID, commerce.ErrNotFound)
	}
	return m, nil
}

func (p *Payment) AuthorizeCalls(_ context.Context, paymentID string) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.authorizeCalls[paymentID], nil
}

func (p *Payment) Captured(_ context.Context, paymentID string) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.captured[paymentID], nil
}

// LastMethod is the payment method of the last Authorize for paymentID.
func (p *Payment) LastMethod(paymentID string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastMethod[paymentID]
}

// ---- envelopes ----

// Envelopes is an in-memory workflow.Envelopes: first write wins.
type Envelopes struct {
	mu    sync.Mutex
	first map[string]*contracts.StartOrderWorkflowReq

	Saves, LoadCalls atomic.Int64
}

// NewEnvelopes returns an empty store.
func NewEnvelopes() *Envelopes {
	return &Envelopes{first: map[string]*contracts.StartOrderWorkflowReq{}}
}

// AddFirst implements workflow.Envelopes: the write is a SET NX of the
// encoded envelope that Committer.Commit hands back to this store.
func (e *Envelopes) AddFirst(u *eventstore.Unit, req *contracts.StartOrderWorkflowReq) error {
	b, err := workflow.EncodeEnvelope(req)
	if err != nil {
		return err
	}
	u.SetIfAbsent(envelopeKeyPrefix+u.OrderID(), b)
	return nil
}

// envelopeKeyPrefix marks the unit writes of Envelopes.
const envelopeKeyPrefix = "workflowtest:envelope:"

// apply makes a committed unit's write of this store, counted as a save.
func (e *Envelopes) apply(c eventstore.Companion) (mine, wrote bool) {
	orderID, ok := strings.CutPrefix(c.Key, envelopeKeyPrefix)
	if !ok {
		return false, false
	}
	e.Saves.Add(1)
	req, err := workflow.DecodeEnvelope(orderID, c.Value)
	if err != nil {
		panic(fmt.Sprintf("workflowtest: envelope of %s: %v", orderID, err))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.first[orderID]; ok {
		return true, false
	}
	e.first[orderID] = req
	return true, true
}

func (e *Envelopes) LoadFirst(_ context.Context, orderID string) (*contracts.StartOrderWorkflowReq, error) {
	e.LoadCalls.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	req, ok := e.first[orderID]
	if !ok {
		return nil, fmt.Errorf("first envelope of %s: %w", orderID, workflow.ErrNotFound)
	}
	return proto.Clone(req).(*contracts.StartOrderWorkflowReq), nil
}

var (
	_ eventstore.Store          = (*Events)(nil)
	_ readmodel.Store           = (*ReadModel)(nil)
	_ readmodel.TerminalWatcher = (*ReadModel)(nil)
	_ commerce.Idempotency      = (*Idempotency)(nil)
	_ commerce.Inventory        = (*Inventory)(nil)
	_ commerce.Payment          = (*Payment)(nil)
	_ workflow.Envelopes        = (*Envelopes)(nil)
)

// Committer is a fake of readmodel.RedisCommitter's Commit (and so of
// readmodel.Committer) over Events and ReadModel: the unit's append and
// its projection write, under Put's version guard, and then its writes of
// Envelopes and Idempotency (AddFirst, AddStartedMark), happen together
// or not at all, and Calls counts the units.
//
// Any other write (an activation's Ready an order carried,
// Order.CarryFirstWrite) it records in With, and fails with RefuseWith,
// when set, before anything is written, as a failed Require does.
type Committer struct {
	Events      *Events
	ReadModel   *ReadModel
	Envelopes   *Envelopes
	Idempotency *Idempotency
	Calls       atomic.Int64
	RefuseWith  error

	mu   sync.Mutex
	with []eventstore.Companion
}

// With is what the last unit carried besides the fakes' own writes.
func (p *Committer) With() []eventstore.Companion {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.with
}

// Commit implements readmodel.Committer.
func (p *Committer) Commit(ctx context.Context, u *eventstore.Unit, state *contracts.OrderState) (eventstore.Outcome, error) {
	p.Calls.Add(1)
	var other []eventstore.Companion
	for _, c := range u.Writes {
		if !strings.HasPrefix(c.Key, envelopeKeyPrefix) && !strings.HasPrefix(c.Key, idemKeyPrefix) {
			other = append(other, c)
		}
	}
	p.mu.Lock()
	p.with = other
	p.mu.Unlock()
	if len(other) > 0 && p.RefuseWith != nil {
		return eventstore.Outcome{}, p.RefuseWith
	}
	v, err := p.Events.Append(ctx, u.OrderID(), u.ExpectedVersion(), u.Fence(), u.Events())
	if err != nil {
		return eventstore.Outcome{}, err
	}
	p.ReadModel.seedUnlessNewer(u.OrderID(), v, state)
	out := eventstore.Outcome{Version: v, Applied: make([]bool, len(u.Writes))}
	for i, c := range u.Writes {
		if mine, wrote := p.Envelopes.apply(c); mine {
			out.Applied[i] = wrote
			continue
		}
		if _, wrote := p.Idempotency.apply(c); wrote {
			out.Applied[i] = true
		}
	}
	return out, nil
}

var _ readmodel.Committer = (*Committer)(nil)
