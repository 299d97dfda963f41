package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

var (
	successPath   = []string{typeStarted, typeReserved, typeAuthorized, typeConfirmed}
	noStockPath   = []string{typeStarted, typeReserveFailed, typeFailed}
	declinedPath  = []string{typeStarted, typeReserved, typePaymentFailed, typeReleased, typeFailed}
	startedLineRE = regexp.MustCompile(`^shoppingmall-order started order=(\S+) spot=shoppingmall\.order-workflow/(\S+)$`)
	repeatedRE    = regexp.MustCompile(`^shoppingmall-order external-effect-repeated order=\S+$`)
)

// check is one evidence row: it passes or says why not.
type check struct {
	name string
	run  func(context.Context) (string, error)
}

// checkEvidence confirms, after the client finished, the server-side facts
// of every scenario (docs/contract.md, "Scenarios") and every evidence line
// ("Evidence lines"), through the hooks and each node's own log, one log at
// a time.
func (r *runner) checkEvidence(ctx context.Context) error {
	checks := []check{
		{"event order, success path (docs/contract.md#success-event-order)", r.evSuccess},
		{"event order, insufficient inventory, no payment call (docs/contract.md#out-of-stock-ends-failed-without-payment)", r.evNoStock},
		{"event order, payment rejected with compensation (docs/contract.md#declined-payment-is-compensated)", r.evDeclined},
		{"one OrderStartedEvent for the duplicate key (docs/contract.md#same-key-on-two-apis)", r.evDuplicate},
		{"resumed, repaired, rebuilt and pending orders ran every step once (docs/contract.md#duplicates-resumption-and-the-projection)", r.evPrepared},
		{"generation N+1 after close (docs/contract.md#a-closed-order-activates-a-new-generation)", r.evClosed},
		{"planned relocation kept the generation and paid on the target (docs/contract.md#planned-relocation-resumes-at-payment)", r.evRelocated},
		{"same stream through both APIs (docs/contract.md#concurrent-orders-through-every-api)", r.evSameStream},
		{"killed owner's order not recreated (docs/contract.md#a-dead-owner-answers-unavailable)", r.evKilled},
		{"unknown order stayed unknown (docs/contract.md#an-unknown-order-stays-unknown)", r.evNeverCreated},
		{"repeated effects return the first result and move nothing (docs/contract.md#repeated-effects-return-the-first-result)", r.evRepeat},
		{"started line in each workflow log (docs/contract.md#order-lines)", r.logStarted},
		{"evidence line in the API log (docs/contract.md#order-lines)", r.logEvidence},
		{"replayed line exactly once (docs/contract.md#order-lines)", r.logReplayed},
		{"external-effect-repeated exactly zero (docs/contract.md#order-lines)", r.logRepeated},
	}
	for _, c := range checks {
		detail, err := c.run(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		r.logf("ok   %s: %s", c.name, detail)
	}
	return nil
}

func (r *runner) ev(ctx context.Context, api int, id string) (*evidence, error) {
	ev, found, err := r.hk[api].evidence(ctx, id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("order %s has no event stream", id)
	}
	r.noteEvidence(api, ev)
	return ev, nil
}

// stream checks an order's event types and the envelope invariants: one
// stream, versions 1..n without gaps, distinct event ids.
func (r *runner) stream(ctx context.Context, api int, id string, want []string) (*evidence, error) {
	ev, err := r.ev(ctx, api, id)
	if err != nil {
		return nil, err
	}
	if got := ev.types(); !slices.Equal(got, want) {
		return nil, fmt.Errorf("order %s events %v, want %v", id, got, want)
	}
	ids := map[string]bool{}
	for i, e := range ev.Events {
		if e.Version != int64(i+1) {
			return nil, fmt.Errorf("order %s event %d has version %d", id, i, e.Version)
		}
		if ids[e.EventID] {
			return nil, fmt.Errorf("order %s repeats eventId %s", id, e.EventID)
		}
		ids[e.EventID] = true
	}
	return ev, nil
}

// succeeded checks a success-path order: the event order and one call of
// each module.
func (r *runner) succeeded(ctx context.Context, api int, id string) (*evidence, error) {
	ev, err := r.stream(ctx, api, id, successPath)
	if err != nil {
		return nil, err
	}
	if ev.ReserveCalls != 1 || ev.AuthorizeCalls != 1 || ev.ReleaseCalls != 0 {
		return nil, fmt.Errorf("order %s reserveCalls=%d authorizeCalls=%d releaseCalls=%d, want 1, 1, 0 (reservation %s)",
			id, ev.ReserveCalls, ev.AuthorizeCalls, ev.ReleaseCalls, ev.ReservationID)
	}
	return ev, nil
}

func (r *runner) order(c string) (string, error) {
	id := r.res.Orders[c]
	if id == "" {
		return "", fmt.Errorf("the client reported no %s order", c)
	}
	return id, nil
}

func (r *runner) evSuccess(ctx context.Context) (string, error) {
	id, err := r.order(client.CaseSuccess)
	if err != nil {
		return "", err
	}
	ev, err := r.succeeded(ctx, 0, id)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("order %s %v, reserveCalls=1 for %s, authorizeCalls=1 for %s", id, ev.types(), ev.ReservationID, ev.PaymentID), nil
}

func (r *runner) evNoStock(ctx context.Context) (string, error) {
	id, err := r.order(client.CaseInsufficientInventory)
	if err != nil {
		return "", err
	}
	ev, err := r.stream(ctx, 1, id, noStockPath)
	if err != nil {
		return "", err
	}
	if ev.ReserveCalls != 1 || ev.AuthorizeCalls != 0 {
		return "", fmt.Errorf("order %s reserveCalls=%d authorizeCalls=%d, want 1 and 0", id, ev.ReserveCalls, ev.AuthorizeCalls)
	}
	return fmt.Sprintf("order %s %v, reserveCalls=1, authorizeCalls=0", id, ev.types()), nil
}

func (r *runner) evDeclined(ctx context.Context) (string, error) {
	id, err := r.order(client.CasePaymentRejected)
	if err != nil {
		return "", err
	}
	ev, err := r.stream(ctx, 0, id, declinedPath)
	if err != nil {
		return "", err
	}
	if ev.ReserveCalls != 1 || ev.AuthorizeCalls != 1 || ev.ReleaseCalls != 1 {
		return "", fmt.Errorf("order %s reserveCalls=%d authorizeCalls=%d releaseCalls=%d, want 1 each", id, ev.ReserveCalls, ev.AuthorizeCalls, ev.ReleaseCalls)
	}
	return fmt.Sprintf("order %s %v, reserve/authorize/release called once each", id, ev.types()), nil
}

func (r *runner) evDuplicate(ctx context.Context) (string, error) {
	id, err := r.order(client.CaseDuplicate)
	if err != nil {
		return "", err
	}
	ev, err := r.succeeded(ctx, 1, id)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("order %s has %d OrderStartedEvent in %v", id, countType(ev, typeStarted), ev.types()), nil
}

func countType(ev *evidence, t string) int {
	n := 0
	for _, e := range ev.Events {
		if e.EventType == t {
			n++
		}
	}
	return n
}

func (r *runner) evPrepared(ctx context.Context) (string, error) {
	p := r.fx.Prepared
	var ids []string
	for _, id := range []string{p.Interrupted.OrderID, p.TerminalProjectionSkipped.OrderID, p.ProjectionDeleted.OrderID, p.PendingMapping.OrderID} {
		if _, err := r.succeeded(ctx, 0, id); err != nil {
			return "", err
		}
		ids = append(ids, id)
	}
	return fmt.Sprintf("orders %s each %v with one reserve and one authorize call", strings.Join(ids, " "), successPath), nil
}

func (r *runner) evClosed(ctx context.Context) (string, error) {
	c := r.closed
	ev, err := r.succeeded(ctx, 1, c.orderID)
	if err != nil {
		return "", err
	}
	if ev.Generation != c.generation+1 {
		return "", fmt.Errorf("order %s generation %d after close and continue, want %d+1", c.orderID, ev.Generation, c.generation)
	}
	if ev.Authority != authorityReady {
		return "", fmt.Errorf("order %s authority %s after continue, want Ready (a new activation)", c.orderID, ev.Authority)
	}
	return fmt.Sprintf("order %s closed at generation %d, continued at generation %d on %s, events unchanged", c.orderID, c.generation, ev.Generation, ev.OwnerNode), nil
}

func (r *runner) evRelocated(ctx context.Context) (string, error) {
	rl := r.relocated
	ev, err := r.succeeded(ctx, 0, rl.orderID)
	if err != nil {
		return "", err
	}
	if ev.Generation != rl.generation {
		return "", fmt.Errorf("order %s generation %d, want the relocation's %d", rl.orderID, ev.Generation, rl.generation)
	}
	if ev.OwnerNode != rl.target {
		return "", fmt.Errorf("order %s owner %s, want the relocation target %s", rl.orderID, ev.OwnerNode, rl.target)
	}
	found := false
	for _, op := range ev.Relocations {
		if op.Source == rl.source && op.Target == rl.target && op.Generation == rl.generation {
			found = true
		}
	}
	if !found {
		return "", fmt.Errorf("order %s has no relocation record %s -> %s at generation %d: %v", rl.orderID, rl.source, rl.target, rl.generation, ev.Relocations)
	}
	return fmt.Sprintf("order %s %s -> %s at generation %d, reserveCalls=1 (before the move), authorizeCalls=1 (on the target)", rl.orderID, rl.source, rl.target, rl.generation), nil
}

func (r *runner) evSameStream(ctx context.Context) (string, error) {
	if len(r.res.Concurrent) == 0 {
		return "", fmt.Errorf("the client reported no concurrent orders")
	}
	owners := map[string]int{}
	for _, id := range r.res.Concurrent {
		a, err := r.succeeded(ctx, 0, id)
		if err != nil {
			return "", err
		}
		b, err := r.ev(ctx, 1, id)
		if err != nil {
			return "", err
		}
		if !slices.Equal(a.Events, b.Events) {
			return "", fmt.Errorf("order %s: %s sees %v, %s sees %v", id, localcluster.APIA, a.Events, localcluster.APIB, b.Events)
		}
		owners[a.OwnerNode]++
	}
	return fmt.Sprintf("%d orders, identical streams via %s and %s (owners %v)", len(r.res.Concurrent), localcluster.APIA, localcluster.APIB, owners), nil
}

func (r *runner) evKilled(ctx context.Context) (string, error) {
	k := r.killed
	ev, err := r.succeeded(ctx, 1, k.orderID)
	if err != nil {
		return "", err
	}
	if ev.Generation != k.generation || len(ev.Events) != k.events {
		return "", fmt.Errorf("order %s generation %d with %d events, want %d with %d: something recreated it", k.orderID, ev.Generation, len(ev.Events), k.generation, k.events)
	}
	if ev.OwnerNode != "" && ev.OwnerNode != k.owner {
		return "", fmt.Errorf("order %s is now owned by %s, not its dead owner %s: failover", k.orderID, ev.OwnerNode, k.owner)
	}
	started := 0
	for _, wf := range localcluster.WorkflowNodes {
		n, err := localcluster.CountLines(r.cl.LogPath(wf), 0, localcluster.Exact(startedLine(k.orderID)))
		if err != nil {
			return "", err
		}
		started += n
	}
	if started != 1 {
		return "", fmt.Errorf("order %s started %d times across the workflow logs, want 1", k.orderID, started)
	}
	return fmt.Sprintf("order %s still generation %d, %d events, authority %s of the dead %s; started once", k.orderID, ev.Generation, len(ev.Events), ev.Authority, k.owner), nil
}

func (r *runner) evNeverCreated(ctx context.Context) (string, error) {
	id := r.fx.Prepared.NeverCreated.OrderID
	for i := range r.hk {
		if _, found, err := r.hk[i].evidence(ctx, id); err != nil {
			return "", err
		} else if found {
			return "", fmt.Errorf("order %s has a stream via %s after continue/rebuild", id, localcluster.APINodes[i])
		}
	}
	return fmt.Sprintf("order %s has no stream", id), nil
}

// evRepeat runs after every call count was read: repeating the effects
// counts as calls too.
func (r *runner) evRepeat(ctx context.Context) (string, error) {
	var parts []string
	for _, c := range []string{client.CaseSuccess, client.CasePaymentRejected, client.CaseInsufficientInventory} {
		id, err := r.order(c)
		if err != nil {
			return "", err
		}
		rep, raw, err := r.hk[0].repeatEffects(ctx, id)
		if err != nil {
			return "", err
		}
		r.last = "repeat-effects " + id + ": " + raw
		if !rep.SameResults || !rep.NothingMoved {
			return "", fmt.Errorf("order %s (%s): %s", id, c, raw)
		}
		if rep.Reservation == nil {
			return "", fmt.Errorf("order %s (%s): no reservation repeated: %s", id, c, raw)
		}
		if c != client.CaseInsufficientInventory && rep.Payment == nil {
			return "", fmt.Errorf("order %s (%s): no payment repeated: %s", id, c, raw)
		}
		parts = append(parts, c)
	}
	return fmt.Sprintf("%s: sameResults and nothingMoved", strings.Join(parts, ", ")), nil
}

func startedLine(id string) string {
	return fmt.Sprintf("shoppingmall-order started order=%s spot=shoppingmall.order-workflow/%s", id, id)
}

// logStarted: at least one started line of this run's orders in each
// workflow node's log, each log waited on separately.
func (r *runner) logStarted(ctx context.Context) (string, error) {
	m := localcluster.MatchFunc("shoppingmall-order started order=<an order of this run> spot=shoppingmall.order-workflow/<same>", func(l string) bool {
		g := startedLineRE.FindStringSubmatch(l)
		return g != nil && g[1] == g[2] && r.orders[g[1]]
	})
	var parts []string
	for _, wf := range localcluster.WorkflowNodes {
		path := r.cl.LogPath(wf)
		if err := localcluster.WaitLines(ctx, path, 0, r.poll, localcluster.Want{Line: m, AtLeast: 1}); err != nil {
			return "", err
		}
		n, err := localcluster.CountLines(path, 0, m)
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s %d", wf, n))
	}
	return strings.Join(parts, ", "), nil
}

// logEvidence: the API asked for the success order's evidence printed the
// line with that order's real event count.
func (r *runner) logEvidence(ctx context.Context) (string, error) {
	id, err := r.order(client.CaseSuccess)
	if err != nil {
		return "", err
	}
	path := r.cl.LogPath(localcluster.APIA)
	from, err := localcluster.LogSize(path)
	if err != nil {
		return "", err
	}
	ev, err := r.ev(ctx, 0, id)
	if err != nil {
		return "", err
	}
	line := fmt.Sprintf("shoppingmall-evidence order=%s events=%d", id, len(ev.Events))
	if err := localcluster.WaitLines(ctx, path, from, r.poll, localcluster.Lines(localcluster.Exact(line))...); err != nil {
		return "", err
	}
	return fmt.Sprintf("%q in %s", line, path), nil
}

// logReplayed: the relocated order's replay line, exactly once over the
// workflow logs (each counted on its own), and in the target's log.
func (r *runner) logReplayed(ctx context.Context) (string, error) {
	rl := r.relocated
	line := fmt.Sprintf("shoppingmall-order replayed order=%s generation=%d", rl.orderID, rl.generation)
	if err := localcluster.WaitLines(ctx, r.cl.LogPath(rl.target), 0, r.poll, localcluster.Lines(localcluster.Exact(line))...); err != nil {
		return "", err
	}
	total := 0
	var parts []string
	for _, wf := range localcluster.WorkflowNodes {
		n, err := localcluster.CountLines(r.cl.LogPath(wf), 0, localcluster.Exact(line))
		if err != nil {
			return "", err
		}
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", wf, n))
	}
	if total != 1 {
		return "", fmt.Errorf("%q appears %d times (%s), want exactly 1", line, total, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%q: %s", line, strings.Join(parts, ", ")), nil
}

// logRepeated: no workflow log holds an external-effect-repeated line.
// It runs last, after every wait above, so the logs hold everything the
// run produced.
func (r *runner) logRepeated(ctx context.Context) (string, error) {
	m := localcluster.MatchFunc("shoppingmall-order external-effect-repeated order=<any>", repeatedRE.MatchString)
	var parts []string
	for _, wf := range localcluster.WorkflowNodes {
		n, err := localcluster.CountLines(r.cl.LogPath(wf), 0, m)
		if err != nil {
			return "", err
		}
		if n != 0 {
			return "", fmt.Errorf("%s holds %d external-effect-repeated lines, want 0", wf, n)
		}
		parts = append(parts, wf+" 0")
	}
	return strings.Join(parts, ", "), nil
}
