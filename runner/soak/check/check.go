package check

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
)

// Invariant names, in report order. The soak driver and soak-results.json
// use them verbatim.
const (
	InvNoLostOrder          = "acknowledged_orders_exist"
	InvOneStart             = "exactly_one_order_started"
	InvAllTerminal          = "every_order_terminal"
	InvKeyOneOrder          = "key_maps_to_one_order"
	InvOneReservation       = "at_most_one_reservation"
	InvOneAuthorization     = "at_most_one_authorization"
	InvNoPaymentAfterInvErr = "no_payment_after_inventory_failure"
	InvReleaseOnlyOnFailure = "release_only_after_failure"
	InvStockHeld            = "stock_held_matches_status"
	InvStockConserved       = "stock_conserved_per_sku"
	InvStreamFolds          = "stream_gapless_and_folds"
	InvReadModelIsFold      = "read_model_equals_fold"
	InvPaymentMatches       = "payment_authorized_iff_accepted_record"
	InvFailedUnpaid         = "failed_order_has_no_accepted_payment"
	InvConfirmedPaid        = "confirmed_order_has_payment_record"
	InvGenerations          = "generations_only_grow"
	InvClientMonotonic      = "client_view_consistent"
	InvAckNotLost           = "acknowledgement_not_lost"
)

var invariantOrder = []string{
	InvNoLostOrder, InvOneStart, InvAllTerminal, InvKeyOneOrder,
	InvOneReservation, InvOneAuthorization, InvNoPaymentAfterInvErr,
	InvReleaseOnlyOnFailure, InvStockHeld, InvStockConserved,
	InvPaymentMatches, InvFailedUnpaid, InvConfirmedPaid,
	InvStreamFolds, InvReadModelIsFold, InvGenerations, InvClientMonotonic, InvAckNotLost,
}

// Offender is one violation: the order (or, for key and stock invariants,
// the key or SKU) and why.
type Offender struct {
	OrderID string `json:"orderId,omitempty"`
	Key     string `json:"key,omitempty"`
	SKU     string `json:"sku,omitempty"`
	Reason  string `json:"reason"`
}

// Result is one invariant's outcome.
type Result struct {
	Name       string     `json:"name"`
	Violations int        `json:"violations"`
	Offenders  []Offender `json:"offenders,omitempty"`
}

// Report has one Result per invariant, in a fixed order, violated or not,
// so a summary always shows every invariant with its count.
type Report struct {
	Results []Result `json:"invariants"`
}

// OK reports whether no invariant was violated.
func (r Report) OK() bool {
	for _, res := range r.Results {
		if res.Violations > 0 {
			return false
		}
	}
	return true
}

// Get returns the named invariant's result (zero Result if unknown).
func (r Report) Get(name string) Result {
	for _, res := range r.Results {
		if res.Name == name {
			return res
		}
	}
	return Result{}
}

// OffendingOrders lists the order ids named by any violation, sorted.
func (r Report) OffendingOrders() []string {
	set := map[string]bool{}
	for _, res := range r.Results {
		for _, o := range res.Offenders {
			if o.OrderID != "" {
				set[o.OrderID] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// String is the summary table followed by every offender.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-38s %s\n", "invariant", "violations")
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%-38s %d\n", res.Name, res.Violations)
	}
	for _, res := range r.Results {
		for _, o := range res.Offenders {
			var names []string
			if o.OrderID != "" {
				names = append(names, "order "+o.OrderID)
			}
			if o.Key != "" {
				names = append(names, "key "+o.Key)
			}
			if o.SKU != "" {
				names = append(names, "sku "+o.SKU)
			}
			id := strings.Join(names, " ")
			fmt.Fprintf(&b, "VIOLATION %s: %s: %s\n", res.Name, id, o.Reason)
		}
	}
	return b.String()
}

type checker struct {
	h       *History
	results map[string]*Result
	// folds holds the fold of every stream that folded, by order id.
	folds map[string]order.State
	// started holds each order's first OrderStartedEvent that decoded.
	started map[string]order.OrderStarted
	// authorized: the stream holds a PaymentAuthorizedEvent (by type, so
	// a stream that does not decode counts too); authorizedID is the
	// paymentId of the first one that decoded.
	authorized   map[string]bool
	authorizedID map[string]string
}

func (c *checker) fail(inv string, o Offender) {
	r := c.results[inv]
	r.Violations++
	r.Offenders = append(r.Offenders, o)
}

func (c *checker) failOrder(inv, orderID, format string, args ...any) {
	c.fail(inv, Offender{OrderID: orderID, Reason: fmt.Sprintf(format, args...)})
}

// Check decides every invariant of the soak from the history alone.
// Orders are visited in id order so the same history gives the same report.
func Check(h *History) Report {
	c := &checker{h: h, results: map[string]*Result{}, folds: map[string]order.State{}, started: map[string]order.OrderStarted{},
		authorized: map[string]bool{}, authorizedID: map[string]string{}}
	for _, n := range invariantOrder {
		c.results[n] = &Result{Name: n}
	}
	ids := slices.Sorted(maps.Keys(h.Orders))
	for _, id := range ids {
		c.checkStream(id, h.Orders[id])
	}
	c.checkAcknowledged()
	c.checkKeys()
	c.checkModules()
	c.checkPayments()
	c.checkStock()
	c.checkClientView()
	c.checkAcknowledgements()
	var rep Report
	for _, n := range invariantOrder {
		rep.Results = append(rep.Results, *c.results[n])
	}
	return rep
}

// checkStream covers what one order's own records must satisfy: the
// stream, its fold, the projection, the fence generations, termination.
func (c *checker) checkStream(id string, rec *OrderRecord) {
	if rec == nil || len(rec.Stream) == 0 {
		// An order without events is only wrong if someone was told about
		// it (checkAcknowledged) or holds stock for it (checkModules).
		return
	}
	starts, reservedEvents, authorizedEvents := 0, 0, 0
	events := make([]order.Event, 0, len(rec.Stream))
	at := make([]int64, 0, len(rec.Stream))
	decodeOK := true
	for i, env := range rec.Stream {
		switch env.EventType {
		case order.TypeOrderStarted:
			starts++
		case order.TypeInventoryReserved:
			reservedEvents++
		case order.TypePaymentAuthorized:
			authorizedEvents++
			c.authorized[id] = true
		}
		if want := int64(i + 1); env.Version != want {
			c.failOrder(InvStreamFolds, id, "entry %d has version %d, want %d (gap or reorder)", i, env.Version, want)
			decodeOK = false
			continue
		}
		e, err := workflow.DecodeEvent(env.EventType, env.Schema, []byte(env.Data))
		if err != nil {
			c.failOrder(InvStreamFolds, id, "version %d does not decode: %v", env.Version, err)
			decodeOK = false
			continue
		}
		if e.Order() != id || e.ID() != env.EventID {
			c.failOrder(InvStreamFolds, id, "version %d body (order %q, event %q) disagrees with envelope (event %q)", env.Version, e.Order(), e.ID(), env.EventID)
			decodeOK = false
			continue
		}
		switch e := e.(type) {
		case order.OrderStarted:
			if _, seen := c.started[id]; !seen {
				c.started[id] = e
			}
		case order.PaymentAuthorized:
			if _, seen := c.authorizedID[id]; !seen {
				c.authorizedID[id] = e.PaymentID
			}
		}
		events = append(events, e)
		at = append(at, env.CreatedAtUnixMs)
	}
	if starts != 1 {
		c.failOrder(InvOneStart, id, "%d OrderStartedEvents", starts)
	}
	if reservedEvents > 1 {
		c.failOrder(InvOneReservation, id, "%d InventoryReservedEvents in the stream", reservedEvents)
	}
	if authorizedEvents > 1 {
		c.failOrder(InvOneAuthorization, id, "%d PaymentAuthorizedEvents in the stream", authorizedEvents)
	}
	c.checkStreamSemantics(id, rec.Stream)
	c.checkGenerations(id, rec)

	if !decodeOK {
		return
	}
	st, err := order.Fold(events, at)
	if err != nil {
		c.failOrder(InvStreamFolds, id, "does not fold: %v", err)
		return
	}
	c.folds[id] = st
	if !st.Status.Terminal() {
		c.failOrder(InvAllTerminal, id, "stuck at %s (version %d)", st.Status, st.Version)
	}
	switch rm := rec.ReadModel; {
	case rm == nil:
		c.failOrder(InvReadModelIsFold, id, "no projection; fold is %s at version %d", st.Status, st.Version)
	case rm.Status != string(st.Status) || rm.Version != st.Version:
		c.failOrder(InvReadModelIsFold, id, "projection %s at version %d, fold %s at version %d", rm.Status, rm.Version, st.Status, st.Version)
	default:
		for _, d := range projectionDiff(rm.State, st) {
			c.failOrder(InvReadModelIsFold, id, "projection at version %d: %s", rm.Version, d)
		}
	}
}

// checkStreamSemantics reads event types only, so a stream that does not
// fold still shows which business rule it broke.
func (c *checker) checkStreamSemantics(id string, stream []Envelope) {
	invFailed, payFailed, confirmed := false, false, false
	for _, env := range stream {
		switch env.EventType {
		case order.TypeInventoryReservationFailed:
			invFailed = true
		case order.TypePaymentAuthorized, order.TypePaymentFailed:
			if invFailed {
				c.failOrder(InvNoPaymentAfterInvErr, id, "%s at version %d after InventoryReservationFailedEvent", env.EventType, env.Version)
			}
			if env.EventType == order.TypePaymentFailed {
				payFailed = true
			}
		case order.TypeOrderConfirmed:
			confirmed = true
		case order.TypeInventoryReleased:
			if !payFailed {
				c.failOrder(InvReleaseOnlyOnFailure, id, "InventoryReleasedEvent at version %d without a preceding PaymentFailedEvent", env.Version)
			}
		}
	}
	if confirmed {
		for _, env := range stream {
			if env.EventType == order.TypeInventoryReleased {
				c.failOrder(InvReleaseOnlyOnFailure, id, "InventoryReleasedEvent at version %d in a confirmed order", env.Version)
			}
		}
	}
}

// checkGenerations: the ownership history's generations never go down,
// the stream's writer fences never go down, no event stamped after an
// activation, relocation or takeover carries a generation below that
// entry's, and no event carries a generation the Location record never
// reached. Event and ownership times come from one host's clock in the
// soak; an event stamped before a takeover but appended after it is not
// flagged, which keeps the rule sound at the cost of that window.
func (c *checker) checkGenerations(id string, rec *OrderRecord) {
	own := slices.Clone(rec.Ownership)
	sort.SliceStable(own, func(i, j int) bool { return own[i].AtUnixMs < own[j].AtUnixMs })
	for i := 1; i < len(own); i++ {
		if own[i].Generation < own[i-1].Generation {
			c.failOrder(InvGenerations, id, "ownership %s by %s at generation %d follows %s at generation %d",
				own[i].Kind, own[i].Member, own[i].Generation, own[i-1].Kind, own[i-1].Generation)
		}
	}
	for i := 1; i < len(rec.Stream); i++ {
		prev, cur := rec.Stream[i-1], rec.Stream[i]
		if cur.FenceGeneration < prev.FenceGeneration ||
			(cur.FenceGeneration == prev.FenceGeneration && cur.FenceEpoch < prev.FenceEpoch) {
			c.failOrder(InvGenerations, id, "version %d written under fence %d/%d after version %d under %d/%d",
				cur.Version, cur.FenceGeneration, cur.FenceEpoch, prev.Version, prev.FenceGeneration, prev.FenceEpoch)
		}
	}
	for _, o := range own {
		// An entry that installs an owner retires every lower generation:
		// an event stamped after it under a lower one had two writers.
		if o.Kind != OwnTakeover && o.Kind != OwnActivation && o.Kind != OwnRelocation {
			continue
		}
		for _, env := range rec.Stream {
			if env.CreatedAtUnixMs > o.AtUnixMs && env.FenceGeneration < o.Generation {
				c.failOrder(InvGenerations, id, "version %d written at %d under retired generation %d, after %s by %s to generation %d at %d",
					env.Version, env.CreatedAtUnixMs, env.FenceGeneration, o.Kind, o.Member, o.Generation, o.AtUnixMs)
			}
		}
	}
	if rec.LocationGeneration > 0 {
		for _, env := range rec.Stream {
			if env.FenceGeneration > rec.LocationGeneration {
				c.failOrder(InvGenerations, id, "version %d under generation %d, above the Location record's %d",
					env.Version, env.FenceGeneration, rec.LocationGeneration)
			}
		}
	}
}

func (c *checker) checkAcknowledged() {
	told := map[string]bool{}
	for _, a := range c.h.Client {
		if a.Acknowledged() {
			told[a.OrderID] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(told)) {
		if !c.hasStream(id) {
			c.failOrder(InvNoLostOrder, id, "acknowledged to the client but has no stream")
		}
	}
	// A key is marked started only after its OrderStartedEvent landed, so
	// a started mapping to a missing order is a lost order too.
	for _, key := range slices.Sorted(maps.Keys(c.h.Idempotency)) {
		rec := c.h.Idempotency[key]
		if rec == nil || rec.Status != IdemStarted {
			continue
		}
		for _, id := range rec.OrderIDs {
			if !told[id] && !c.hasStream(id) {
				c.fail(InvNoLostOrder, Offender{OrderID: id, Key: key, Reason: "idempotency key marked started but the order has no stream"})
			}
		}
	}
}

func (c *checker) hasStream(id string) bool {
	rec := c.h.Orders[id]
	return rec != nil && len(rec.Stream) > 0
}

func (c *checker) checkKeys() {
	byKey := map[string]map[string]bool{}
	add := func(key, id string) {
		if key == "" || id == "" {
			return
		}
		if byKey[key] == nil {
			byKey[key] = map[string]bool{}
		}
		byKey[key][id] = true
	}
	for _, a := range c.h.Client {
		if a.Op == OpStart && a.Acknowledged() {
			add(a.Key, a.OrderID)
		}
	}
	for key, rec := range c.h.Idempotency {
		if rec == nil {
			continue
		}
		for _, id := range rec.OrderIDs {
			add(key, id)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		if ids := byKey[key]; len(ids) > 1 {
			c.fail(InvKeyOneOrder, Offender{Key: key, Reason: "maps to orders " + strings.Join(slices.Sorted(maps.Keys(ids)), ", ")})
		}
	}
}

// checkModules compares the modules' own records with the streams.
func (c *checker) checkModules() {
	for _, id := range slices.Sorted(maps.Keys(c.h.Modules)) {
		m := c.h.Modules[id]
		if m == nil {
			continue
		}
		if m.Reservations > 1 {
			c.failOrder(InvOneReservation, id, "%d reservation records", m.Reservations)
		}
		if m.Authorizations > 1 {
			c.failOrder(InvOneAuthorization, id, "%d authorization records", m.Authorizations)
		}
		st, folded := c.folds[id]
		if m.PaymentCalled && (m.ReservationFailed || (folded && st.ReservationFailed)) {
			c.failOrder(InvNoPaymentAfterInvErr, id, "payment module called for an order whose inventory reservation failed")
		}
		if m.Released && folded && st.Status == order.StatusConfirmed {
			c.failOrder(InvReleaseOnlyOnFailure, id, "stock released for a confirmed order")
		} else if m.Released && folded && !st.PaymentFailed {
			c.failOrder(InvReleaseOnlyOnFailure, id, "stock released but the stream records no payment failure")
		}
	}
	// Net hold per order: every order with a stream or a module record.
	ids := map[string]bool{}
	for id := range c.h.Modules {
		ids[id] = true
	}
	for id := range c.h.Orders {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		held := c.held(id)
		want := map[string]int64{}
		st, folded := c.folds[id]
		if folded && st.Status == order.StatusConfirmed {
			want = sumLines(c.started[id].Lines)
		}
		if !maps.Equal(held, want) {
			status := "no folded stream"
			if folded {
				status = string(st.Status)
			}
			c.failOrder(InvStockHeld, id, "holds %s, want %s for status %s", fmtHeld(held), fmtHeld(want), status)
		}
	}
}

// checkPayments holds the payment module's records against the streams:
// a PaymentAuthorizedEvent exactly when the module accepted a payment for
// the order, under the event's paymentId, for the amount and currency the
// order started with; no accepted payment for a Failed order; none
// missing for a Confirmed one. Orders with a module record but no stream
// are visited too: a payment accepted for them is money taken for no
// order.
func (c *checker) checkPayments() {
	ids := map[string]bool{}
	for id, m := range c.h.Modules {
		if m != nil {
			ids[id] = true
		}
	}
	for id := range c.h.Orders {
		if c.hasStream(id) {
			ids[id] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		m := c.h.Modules[id]
		accepted := m != nil && m.Authorized
		inStream := c.authorized[id]
		switch {
		case inStream && !accepted:
			c.failOrder(InvPaymentMatches, id, "stream holds PaymentAuthorizedEvent, the payment module has no accepted record")
		case !inStream && accepted:
			c.failOrder(InvPaymentMatches, id, "payment module accepted %s for %d %s, the stream holds no PaymentAuthorizedEvent", m.PaymentID, m.PaymentAmount, m.PaymentCurrency)
		}
		if accepted {
			if s, ok := c.started[id]; ok && (m.PaymentAmount != s.Amount || m.PaymentCurrency != s.Currency) {
				c.failOrder(InvPaymentMatches, id, "payment %s authorized %d %s, the order started with %d %s", m.PaymentID, m.PaymentAmount, m.PaymentCurrency, s.Amount, s.Currency)
			}
			if pid, ok := c.authorizedID[id]; ok && pid != m.PaymentID {
				c.failOrder(InvPaymentMatches, id, "accepted payment record %s, the stream authorized %s", m.PaymentID, pid)
			}
		}
		st, folded := c.folds[id]
		if !folded {
			continue
		}
		switch st.Status {
		case order.StatusFailed:
			if accepted {
				c.failOrder(InvFailedUnpaid, id, "Failed order, payment %s accepted for %d %s", m.PaymentID, m.PaymentAmount, m.PaymentCurrency)
			}
		case order.StatusConfirmed:
			switch {
			case !accepted:
				c.failOrder(InvConfirmedPaid, id, "Confirmed order, no accepted payment record")
			case m.PaymentID != st.PaymentID:
				c.failOrder(InvConfirmedPaid, id, "Confirmed order paid by %s, accepted record is %s", st.PaymentID, m.PaymentID)
			}
		}
	}
}

// held is the stock the inventory module still holds for an order: its
// reservation's lines unless refused or released.
func (c *checker) held(id string) map[string]int64 {
	m := c.h.Modules[id]
	out := map[string]int64{}
	if m == nil || !m.Reserved || m.Released {
		return out
	}
	for _, l := range m.Lines {
		if l.Quantity != 0 {
			out[l.SKU] += l.Quantity
		}
	}
	return out
}

func sumLines(lines []order.Line) map[string]int64 {
	out := map[string]int64{}
	for _, l := range lines {
		if l.Quantity != 0 {
			out[l.SKU] += int64(l.Quantity)
		}
	}
	return out
}

func fmtHeld(m map[string]int64) string {
	if len(m) == 0 {
		return "nothing"
	}
	parts := make([]string, 0, len(m))
	for _, sku := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", sku, m[sku]))
	}
	return strings.Join(parts, " ")
}

// checkStock: initial = remaining + what confirmed orders took, per SKU.
// The confirmed orders' lines come from their streams, not the module, so
// a module that kept or dropped stock on its own shows up here.
func (c *checker) checkStock() {
	taken := map[string]int64{}
	for id, st := range c.folds {
		if st.Status == order.StatusConfirmed {
			for sku, q := range sumLines(c.started[id].Lines) {
				taken[sku] += q
			}
		}
	}
	skus := map[string]bool{}
	for sku := range c.h.Stock {
		skus[sku] = true
	}
	for sku := range taken {
		skus[sku] = true
	}
	for _, sku := range slices.Sorted(maps.Keys(skus)) {
		s := c.h.Stock[sku]
		if s == nil {
			c.fail(InvStockConserved, Offender{SKU: sku, Reason: fmt.Sprintf("confirmed orders took %d of a SKU with no stock record", taken[sku])})
			continue
		}
		if s.Initial != s.Remaining+taken[sku] {
			c.fail(InvStockConserved, Offender{SKU: sku, Reason: fmt.Sprintf("initial %d != remaining %d + confirmed %d", s.Initial, s.Remaining, taken[sku])})
		}
	}
}

var statusRank = map[string]int{
	string(order.StatusCreated):           1,
	string(order.StatusInventoryReserved): 2,
	string(order.StatusPaymentAuthorized): 3,
	string(order.StatusConfirmed):         terminalRank,
	string(order.StatusFailed):            terminalRank,
}

const terminalRank = 4

// checkClientView: per order, a status the client was told is never
// followed by an earlier one. "Followed" is real-time order: answer a
// follows answer b when a's request was sent after b's answer arrived, so
// overlapping requests answered out of order are not flagged. Two
// different terminal statuses are a violation, and so is a terminal
// status the stream does not end in.
//
// The failover window: a read (a GET) is answered from the primary
// without waiting for replicas, so it may show state that a Redis kill
// or failover injected after the read was sent then loses. Such a read
// followed by an earlier status, or naming a terminal status the stream
// does not end in, is not a violation here; an acknowledgement (the 2xx
// of a start, continue or rebuild) may never be lost, whatever the
// faults, and is judged by checkAcknowledgements.
func (c *checker) checkClientView() {
	type seen struct {
		status   string
		sent, at int64
		read     bool
	}
	per := map[string][]seen{}
	for _, a := range c.h.Client {
		if a.OrderID == "" || a.OrderStatus == "" || a.StatusCode < 200 || a.StatusCode > 299 {
			continue
		}
		sent := a.SentAtUnixMs
		if sent == 0 {
			sent = a.AtUnixMs
		}
		per[a.OrderID] = append(per[a.OrderID], seen{a.OrderStatus, sent, a.AtUnixMs, a.Op == OpGet})
	}
	for _, id := range slices.Sorted(maps.Keys(per)) {
		ss := per[id]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].sent < ss[j].sent })
		terminal, terminalRead := "", false
		for i, a := range ss {
			r, ok := statusRank[a.status]
			if !ok {
				c.failOrder(InvClientMonotonic, id, "client told unknown status %q", a.status)
				continue
			}
			if r == terminalRank && (!a.read || !c.lossAfter(a.sent, math.MaxInt64)) {
				if terminal != "" && terminal != a.status {
					c.failOrder(InvClientMonotonic, id, "client told both %s and %s", terminal, a.status)
				}
				if terminal == "" {
					terminal, terminalRead = a.status, a.read
				}
			}
			for j, b := range ss {
				if j == i || b.at >= a.sent {
					continue
				}
				if b.read && c.lossAfter(b.sent, a.sent) {
					// b may have shown what a failover then lost.
					continue
				}
				if rb, ok := statusRank[b.status]; ok && r < rb {
					c.failOrder(InvClientMonotonic, id, "client told %s (sent %d) after %s (answered %d)", a.status, a.sent, b.status, b.at)
					break
				}
			}
		}
		if st, ok := c.folds[id]; ok && terminal != "" && terminal != string(st.Status) && terminalRead {
			c.failOrder(InvClientMonotonic, id, "client read %s, stream ends %s", terminal, st.Status)
		}
	}
}

// lossKinds are the faults that may lose writes a read already showed:
// a Redis SIGKILL (restarted from its append-only file) and a Sentinel
// failover, lagging or not (the promoted replica may lack the primary's
// last writes).
var lossKinds = map[string]bool{"redis-kill": true, "redis-failover": true, "redis-lagging-failover": true, "redis-master-kill": true}

// lossAfter reports whether a fault that may lose writes was injected
// in [from, to].
func (c *checker) lossAfter(from, to int64) bool {
	for _, f := range c.h.Faults {
		if lossKinds[f.Kind] && f.AtUnixMs >= from && f.AtUnixMs <= to {
			return true
		}
	}
	return false
}

// checkAcknowledgements: what a start, continue or rebuild acknowledged
// (its 2xx naming a status) is never lost, across every fault: the
// order's stream reached that status (no lower final status), and a
// terminal status acknowledged is the one the stream ends in.
func (c *checker) checkAcknowledgements() {
	for _, a := range c.h.Client {
		if a.Op == OpGet || a.OrderID == "" || a.OrderStatus == "" || a.StatusCode < 200 || a.StatusCode > 299 {
			continue
		}
		st, ok := c.folds[a.OrderID]
		if !ok {
			continue // a lost order is InvNoLostOrder's
		}
		r, ok := statusRank[a.OrderStatus]
		if !ok {
			continue // an unknown status is InvClientMonotonic's
		}
		switch {
		case statusRank[string(st.Status)] < r:
			c.failOrder(InvAckNotLost, a.OrderID, "%s acknowledged %s (answered %d), stream ends %s", a.Op, a.OrderStatus, a.AtUnixMs, st.Status)
		case r == terminalRank && a.OrderStatus != string(st.Status):
			c.failOrder(InvAckNotLost, a.OrderID, "%s acknowledged %s (answered %d), stream ends %s", a.Op, a.OrderStatus, a.AtUnixMs, st.Status)
		}
	}
}
