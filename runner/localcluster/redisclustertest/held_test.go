package redisclustertest

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/redisurl"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
)

// orderKind is the order grain kind, as the Location Store keys it.
const orderKind = "shoppingmall.order-workflow"

// The metric families read from the processes' /metrics.
const (
	metricRoundTrips  = "shoppingmall_redis_round_trips_total"
	metricStepRetries = "shoppingmall_step_retries_total"
)

// storesOfAnOrder are the stores whose keys share the order's slot and
// whose clients would meet its redirects, apart from the location record.
var storesOfAnOrder = []string{"events", "readmodel"}

// movedFirst picks the keys a half-way move migrates first: the order's
// events (stream, fence, command index) and its read-model record, which
// the owner's next append writes together; the order's location record
// stays on the old master.
func movedFirst(key string) bool {
	return strings.HasPrefix(key, eventstore.DefaultKeyPrefix) || strings.HasPrefix(key, readmodel.DefaultKeyPrefix)
}

// heldOrder is an order held by its owner between a step's module call
// and its append, and what it must end as.
type heldOrder struct {
	name   string
	method string
	step   order.Step // held at first
	final  contracts.OrderStatus
	events []string
	// declined: the payment was refused, the reservation given back.
	declined bool

	key, id, owner string
	slot           int
}

// resume is one resume window: while the order is held, its slot moves
// (all the way, or half-way: MIGRATING/IMPORTING with the order's events
// and read-model record on the target); then the hold ends (released, or
// moved on to the next step) and the window lasts until the owner has
// appended the events expected by then. The APIs get no request meanwhile.
type resume struct {
	order          *heldOrder
	released       order.Step // the step whose record the window lets through
	next           order.Step // held next, StepNone: run to the end
	half           bool
	extraSlots     []int // other slots the owner writes next, moved all the way first
	slot, from, to int
	keys           int // keys migrated before the hold ended
	total          int // keys the move migrated in all
	events         int // stream length that ends the window
	ask, moved     int64
	askFrom        int64 // ASK answered by the slot's old master
	movedFrom      int64 // MOVED answered by the slot's old master
	ownerTrips     float64
	took           time.Duration
}

// heldEnv is the cluster with fixtures and the test's readers.
type heldEnv struct {
	t     *testing.T
	c     *localcluster.Cluster
	rc    *redisserver.Cluster
	cc    redis.UniversalClient
	fx    *fixture.Store
	cs    *commerce.Redis
	es    *eventstore.Redis
	loc   *location.Redis
	api   *client.API
	nodes []*redis.Client // one plain client per master, as rc.Nodes()
}

// TestHeldOrdersWriteAcrossSlotMoves: orders are held by their owner
// between a step's module call and its append (the runner-only effect
// gate), and while each is held the slot of its keys moves to another
// master: all the way (the owner's next write meets MOVED), or half-way,
// the slot MIGRATING at the old master and IMPORTING at the new one with
// the order's events and read-model record already migrated and its
// location record not (the owner's next append meets ASK; the move is
// finished after the order ran on). One order is held twice and moves
// twice. Each hold then ends while the APIs get no request; the masters'
// errorstats grow in that window, nobody but the owner's process touched
// the order's data then (the APIs' and the other workflow's events and
// read-model round trips stand still, the slot holds only the order's
// keys, the test reads it only where no redirect is due), and every held
// order ends as it must, with a gapless stream holding one
// OrderStartedEvent, each module effect made once, no step retried and no
// CROSSSLOT.
func TestHeldOrdersWriteAcrossSlotMoves(t *testing.T) {
	e := startHeldEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	orders := []*heldOrder{
		{name: "reserved-unrecorded", method: commerce.DemoMethodOK, step: order.StepReserveInventory,
			final:  contracts.OrderStatus_Confirmed,
			events: []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentAuthorized, order.TypeOrderConfirmed}},
		{name: "paid-unrecorded", method: commerce.DemoMethodOK, step: order.StepAuthorizePayment,
			final:  contracts.OrderStatus_Confirmed,
			events: []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentAuthorized, order.TypeOrderConfirmed}},
		{name: "declined-twice-held", method: commerce.DemoMethodDeclined, step: order.StepAuthorizePayment, declined: true,
			final:  contracts.OrderStatus_Failed,
			events: []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentFailed, order.TypeInventoryReleased, order.TypeOrderFailed}},
	}
	for _, h := range orders {
		e.hold(ctx, h)
	}
	retriesBefore := e.sumAll(metricStepRetries, e.c.Workflows())

	o1, o2, o3 := orders[0], orders[1], orders[2]
	windows := []*resume{
		// Reserved, not recorded: its first background append, and the
		// payment it makes next, go to slots that moved meanwhile.
		{order: o1, released: order.StepReserveInventory, next: order.StepNone, events: 4,
			extraSlots: []int{redisserver.Slot("{" + order.PaymentID(o1.id) + "}")}},
		// Paid, not recorded: the slot is half-moved when the hold ends.
		{order: o2, released: order.StepAuthorizePayment, next: order.StepNone, half: true, events: 4},
		// Declined, not recorded: moved all the way (and the reservation
		// it releases next), held again once the release is made...
		{order: o3, released: order.StepAuthorizePayment, next: order.StepReleaseInventory, events: 3,
			extraSlots: []int{redisserver.Slot("{" + order.ReservationID(o3.id) + "}")}},
		// ...and moved on half-way while it is held there.
		{order: o3, released: order.StepReleaseInventory, next: order.StepNone, half: true, events: 5},
	}
	for _, w := range windows {
		e.run(ctx, w)
	}

	statsAfter, err := e.rc.ErrorStats(ctx)
	require.NoError(t, err)
	retriesAfter := e.sumAll(metricStepRetries, e.c.Workflows())

	var ask, moved, movedFull int64
	for _, w := range windows {
		kind := "all the way"
		if w.half {
			kind = "half-way (MIGRATING/IMPORTING)"
		}
		t.Logf("FIGURE held move: order %s (%s) held at %s by %s: slot %5d master %d -> %d %s, %d keys moved before the hold ended (%d in all), %d other slot(s) it writes next moved; in the window ASK %d (%d from the old master), MOVED %d (%d from the old master), owner's events/readmodel round trips %.0f, %d ms",
			w.order.id, w.order.name, w.released, w.order.owner, w.slot, w.from+1, w.to+1, kind, w.keys, w.total, len(w.extraSlots),
			w.ask, w.askFrom, w.moved, w.movedFrom, w.ownerTrips, w.took.Milliseconds())
		ask += w.ask
		moved += w.moved
		if !w.half {
			movedFull += w.moved
		}
	}

	completed := 0
	for _, h := range orders {
		st, rep, err := e.api.GetOrder(ctx, h.id)
		require.NoError(t, err)
		require.True(t, rep.OK(), "GET %s: %s", h.id, rep)
		require.Equal(t, h.final, st.GetStatus(), "order %s (%s) ends %s", h.id, h.name, h.final)
		e.checkStream(ctx, h)
		e.checkEffects(ctx, h)
		completed++
	}
	t.Logf("FIGURE held orders: %d held, %d completed as expected; %d moves (%d half-way); redirects in the resume windows: ASK %d, MOVED %d; step retries %.0f; CROSSSLOT over the run: %d",
		len(orders), completed, len(windows), countHalf(windows), ask, moved, retriesAfter-retriesBefore, statsAfter["CROSSSLOT"])

	for _, w := range windows {
		if w.half {
			require.Positive(t, w.askFrom, "order %s: the old master answered ASK while the owner resumed on a half-moved slot", w.order.id)
		}
		require.Positive(t, w.ownerTrips, "order %s: its owner %s wrote events in the window", w.order.id, w.order.owner)
	}
	require.Positive(t, movedFull, "an owner met MOVED after its slot moved all the way while it was held")
	require.Zero(t, retriesAfter-retriesBefore, "no step failed and was retried")
	require.Zero(t, statsAfter["CROSSSLOT"], "no CROSSSLOT reply")
}

func countHalf(ws []*resume) int {
	n := 0
	for _, w := range ws {
		if w.half {
			n++
		}
	}
	return n
}

func startHeldEnv(t *testing.T) *heldEnv {
	c := startCluster(t, true, 0)
	rc := c.RedisCluster()
	require.NotNil(t, rc)
	cc, err := redisurl.NewClient(c.RedisURL(), redisurl.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	e := &heldEnv{t: t, c: c, rc: rc, cc: cc}
	e.fx, err = fixture.NewRedis(fixture.Config{Client: cc})
	require.NoError(t, err)
	e.cs, err = commerce.NewRedis(commerce.Config{Client: cc})
	require.NoError(t, err)
	e.es, err = eventstore.NewRedis(eventstore.Config{Client: cc})
	require.NoError(t, err)
	e.loc, err = location.NewRedis(location.Config{Client: cc})
	require.NoError(t, err)
	hc := &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	e.api = &client.API{BaseURL: c.APIURL(c.APIs()[0]), HTTP: hc}
	for _, s := range rc.Nodes() {
		n := s.Client()
		t.Cleanup(func() { _ = n.Close() })
		e.nodes = append(e.nodes, n)
	}
	return e
}

// hold arms the order's effect gate at its step, starts it and waits
// until its owner holds the step's effect unrecorded.
func (e *heldEnv) hold(ctx context.Context, h *heldOrder) {
	t := e.t
	h.key = fmt.Sprintf("rc-held-%s-%d", h.name, time.Now().UnixNano())
	require.NoError(t, e.fx.ArmEffectGate(ctx, h.key, h.step.String(), 0))
	res, rep, err := e.api.StartOrder(ctx, &contracts.StartOrderReq{CartId: commerce.DemoCartOK,
		ShippingAddressId: "addr-rc", PaymentMethodId: h.method, IdempotencyKey: h.key})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, rep.Status, "start %s: %s", h.key, rep)
	h.id = res.GetOrderId()
	h.slot = redisserver.Slot("{" + h.id + "}")
	e.waitHeld(ctx, h, h.step)
	rec, err := e.loc.Get(ctx, orderKind, h.id)
	require.NoError(t, err)
	names, err := e.loc.MemberNames(ctx)
	require.NoError(t, err)
	h.owner = names[rec.Owner]
	require.NotEmpty(t, h.owner, "order %s: owner %s is a known member", h.id, rec.Owner)
	t.Logf("order %s (%s) held at %s by %s, slot %d", h.id, h.name, h.step, h.owner, h.slot)
}

func (e *heldEnv) waitHeld(ctx context.Context, h *heldOrder, step order.Step) {
	require.Eventually(e.t, func() bool {
		s, _, held, err := e.fx.EffectHeld(ctx, h.key)
		return err == nil && held && s == step.String()
	}, 20*time.Second, 10*time.Millisecond, "order %s (%s) never held at %s", h.id, h.name, step)
}

// run is one resume window (see resume).
func (e *heldEnv) run(ctx context.Context, w *resume) {
	t := e.t
	h := w.order
	var err error
	w.slot = h.slot
	w.from, err = e.rc.Owner(ctx, w.slot)
	require.NoError(t, err)
	w.to = (w.from + 1) % len(e.nodes)
	e.onlyOrderKeys(ctx, h, w.from)
	for _, s := range w.extraSlots {
		from, err := e.rc.Owner(ctx, s)
		require.NoError(t, err)
		_, err = e.rc.MoveSlots(ctx, []int{s}, (from+1)%len(e.nodes), redisserver.MoveOptions{})
		require.NoError(t, err, "move slot %d", s)
	}
	var half *redisserver.SlotMove
	if w.half {
		half, err = e.rc.BeginMove(ctx, w.slot, w.to, movedFirst)
		require.NoError(t, err)
		w.keys = half.Moved()
		require.Positive(t, w.keys, "order %s: its events moved ahead", h.id)
		left, err := e.rc.CountKeysInSlot(ctx, w.from, w.slot)
		require.NoError(t, err)
		require.Positive(t, left, "order %s: its location record stays behind for now", h.id)
	} else {
		n, err := e.rc.MoveSlots(ctx, []int{w.slot}, w.to, redisserver.MoveOptions{})
		require.NoError(t, err)
		w.keys = n[w.slot]
	}

	before := e.perMaster(ctx)
	apis, others := e.c.APIs(), otherThan(e.c.Workflows(), h.owner)
	apiBefore := e.sumStores(apis)
	othersBefore := e.sumStores(others)
	ownerBefore := e.sumStores([]string{h.owner})
	began := time.Now()
	if w.next == order.StepNone {
		require.NoError(t, e.fx.ReleaseEffectGate(ctx, h.key))
	} else {
		// Re-arming the gate at the next step lets the held record
		// through and holds the next one.
		require.NoError(t, e.fx.ArmEffectGate(ctx, h.key, w.next.String(), 0))
	}
	require.Eventually(t, func() bool { return e.streamLen(ctx, h, w.to, w.half) >= int64(w.events) },
		20*time.Second, 5*time.Millisecond, "order %s (%s): %d events after its hold at %s ended", h.id, h.name, w.events, w.released)
	if w.next != order.StepNone {
		e.waitHeld(ctx, h, w.next)
	}
	w.took = time.Since(began)
	after := e.perMaster(ctx)
	require.Equal(t, apiBefore, e.sumStores(apis), "the APIs touched no order's events or read model in the window")
	require.Equal(t, othersBefore, e.sumStores(others), "no other workflow touched an order's events or read model in the window")
	w.ownerTrips = e.sumStores([]string{h.owner}) - ownerBefore
	for i := range after {
		w.ask += after[i]["ASK"] - before[i]["ASK"]
		w.moved += after[i]["MOVED"] - before[i]["MOVED"]
	}
	w.askFrom = after[w.from]["ASK"] - before[w.from]["ASK"]
	w.movedFrom = after[w.from]["MOVED"] - before[w.from]["MOVED"]
	if half != nil {
		w.total, err = half.Finish(ctx)
		require.NoError(t, err)
	} else {
		w.total = w.keys
	}
	owner, err := e.rc.Owner(ctx, w.slot)
	require.NoError(t, err)
	require.Equal(t, w.to, owner)
	left, err := e.rc.CountKeysInSlot(ctx, w.from, w.slot)
	require.NoError(t, err)
	require.Zero(t, left, "slot %d: no key left on the old master", w.slot)
}

// onlyOrderKeys checks that every key in the order's slot is the order's
// own, so that a redirect of that slot is a redirect of the order's keys.
func (e *heldEnv) onlyOrderKeys(ctx context.Context, h *heldOrder, master int) {
	keys, err := e.nodes[master].ClusterGetKeysInSlot(ctx, h.slot, 1000).Result()
	require.NoError(e.t, err)
	require.NotEmpty(e.t, keys)
	for _, k := range keys {
		require.Contains(e.t, k, "{"+h.id+"}", "slot %d holds only order %s's keys", h.slot, h.id)
	}
}

// streamLen reads the order's stream length from the master the slot
// moves to, with ASKING while it only imports it: the test itself is never
// redirected and adds nothing to the errorstats.
func (e *heldEnv) streamLen(ctx context.Context, h *heldOrder, master int, asking bool) int64 {
	key := eventstore.DefaultKeyPrefix + "{" + h.id + "}:stream"
	var n *redis.IntCmd
	_, err := e.nodes[master].Pipelined(ctx, func(p redis.Pipeliner) error {
		if asking {
			p.Do(ctx, "ASKING")
		}
		n = p.XLen(ctx, key)
		return nil
	})
	if err != nil {
		e.t.Logf("XLEN %s on master %d: %v", key, master+1, err)
		return -1
	}
	return n.Val()
}

func (e *heldEnv) perMaster(ctx context.Context) []map[string]int64 {
	out := make([]map[string]int64, len(e.nodes))
	for i, s := range e.rc.Nodes() {
		st, err := s.ErrorStats(ctx)
		require.NoError(e.t, err)
		out[i] = st
	}
	return out
}

// sumStores is the Redis round trips the nodes' events and read-model
// clients made so far.
func (e *heldEnv) sumStores(nodes []string) float64 {
	var sum float64
	for _, n := range nodes {
		for _, m := range e.scrape(n)[metricRoundTrips].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "store" && contains(storesOfAnOrder, l.GetValue()) {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// sumAll is a counter family summed over every series of the nodes.
func (e *heldEnv) sumAll(family string, nodes []string) float64 {
	var sum float64
	for _, n := range nodes {
		for _, m := range e.scrape(n)[family].GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func (e *heldEnv) scrape(node string) map[string]*dto.MetricFamily {
	t := e.t
	res, err := http.Get(e.c.MetricsURL(node) + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return mfs
}

// checkStream: versions 1..n without gap, each event and step recorded
// once, exactly the events the order's path leads to (one
// OrderStartedEvent first).
func (e *heldEnv) checkStream(ctx context.Context, h *heldOrder) {
	t := e.t
	evs, err := e.es.Load(ctx, h.id)
	require.NoError(t, err)
	var types []string
	ids, cmds := map[string]bool{}, map[string]bool{}
	started := 0
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Version, "order %s: gapless versions", h.id)
		require.False(t, ids[ev.EventID], "order %s: event %s twice", h.id, ev.EventID)
		ids[ev.EventID] = true
		if ev.SourceCommandID != "" {
			require.False(t, cmds[ev.SourceCommandID], "order %s: source command %s twice", h.id, ev.SourceCommandID)
			cmds[ev.SourceCommandID] = true
		}
		if ev.EventType == order.TypeOrderStarted {
			started++
		}
		types = append(types, ev.EventType)
	}
	require.Equal(t, 1, started, "order %s: one OrderStartedEvent", h.id)
	require.Equal(t, h.events, types, "order %s (%s): the stream", h.id, h.name)
}

// checkEffects reads the modules' records: the reservation made once
// (and released once when the payment was declined), the payment
// authorized or declined once, and each SKU's ledger moved once per
// reservation and release.
func (e *heldEnv) checkEffects(ctx context.Context, h *heldOrder) {
	t := e.t
	rsvID, payID := order.ReservationID(h.id), order.PaymentID(h.id)
	rsv, err := e.cs.Inventory().(commerce.ReservationRecords).Reservation(ctx, rsvID)
	require.NoError(t, err)
	require.True(t, rsv.Reserve.GetAccepted(), "order %s: reservation accepted", h.id)
	require.EqualValues(t, 1, rsv.ReserveCalls, "order %s: reserved once", h.id)
	pay, err := e.cs.Payment().(commerce.AuthorizationRecords).Authorization(ctx, payID)
	require.NoError(t, err)
	require.EqualValues(t, 1, pay.Calls, "order %s: authorization asked once", h.id)
	cart, err := e.cs.Carts().GetCart(ctx, commerce.DemoCartOK)
	require.NoError(t, err)
	if h.declined {
		require.False(t, pay.Result.GetAccepted(), "order %s: payment declined", h.id)
		require.Zero(t, pay.Captured)
		require.NotNil(t, rsv.Release, "order %s: reservation released", h.id)
		require.True(t, rsv.Release.GetReleased())
		require.EqualValues(t, 1, rsv.ReleaseCalls, "order %s: released once", h.id)
	} else {
		require.True(t, pay.Result.GetAccepted(), "order %s: payment authorized", h.id)
		require.Equal(t, cart.Amount, pay.Captured, "order %s: captured once, the cart's amount", h.id)
		require.Nil(t, rsv.Release, "order %s: reservation kept", h.id)
		require.Zero(t, rsv.ReleaseCalls)
	}
	for _, line := range cart.Lines {
		movs, err := e.cs.Ledger().Movements(ctx, line.GetSku())
		require.NoError(t, err)
		kinds := map[string]int{}
		for _, m := range movs {
			if m.ReservationID == rsvID {
				kinds[m.Kind]++
			}
		}
		want := map[string]int{commerce.MovementReserve: 1}
		if h.declined {
			want[commerce.MovementRelease] = 1
		}
		require.Equal(t, want, kinds, "order %s: ledger of %s", h.id, line.GetSku())
	}
}

func otherThan(names []string, skip string) []string {
	var out []string
	for _, n := range names {
		if n != skip {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
