package takeovertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/fixture"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/relocation"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// kind is the order grain kind, as the Location Store keys it.
const kind = "shoppingmall.order-workflow"

// The catalogue: a cart with stock for every order a run starts, one
// whose SKU has none (its reservation fails), a method that approves and
// one that declines.
const (
	cartOK        = "cart-tk-ok"
	cartShort     = "cart-tk-short"
	skuA          = "sku-tk-a"
	skuB          = "sku-tk-b"
	skuNone       = "sku-tk-none"
	qtyA          = 2
	qtyB          = 1
	methodOK      = "pm-tk-ok"
	methodDecline = "pm-tk-decline"
	addressID     = "addr-tk"
	initialStock  = 10_000
)

func seed() commerce.Seed {
	return commerce.Seed{
		Carts: []commerce.Cart{
			{CartID: cartOK, Lines: []*contracts.OrderLine{{Sku: skuA, Quantity: qtyA}, {Sku: skuB, Quantity: qtyB}},
				Amount: qtyA*1990 + qtyB*890, Currency: "EUR"},
			{CartID: cartShort, Lines: []*contracts.OrderLine{{Sku: skuNone, Quantity: 1}}, Amount: 500, Currency: "EUR"},
		},
		Stock: map[string]int64{skuA: initialStock, skuB: initialStock, skuNone: 0},
		Methods: []commerce.PaymentMethod{
			{MethodID: methodOK, Approve: true},
			{MethodID: methodDecline, Approve: false, Reason: "card declined"},
		},
	}
}

// heldCase is one step an order is held at, between its module call and
// its append, and what the order must end as.
type heldCase struct {
	step   order.Step
	cart   string
	method string
	final  string
	events []string
	// reserved and paid: the order's reservation was accepted, and its
	// payment authorized; released: the reservation was given back.
	reserved, paid, released bool
	// payCalled: the payment module was asked at all.
	payCalled bool
	// recordedWhenHeld is how many events the stream holds while the step
	// is held; effect is the effect record the held step has made by
	// then, unrecorded ("" for a step without one).
	recordedWhenHeld int
	effect           string
}

var (
	successEvents = []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentAuthorized, order.TypeOrderConfirmed}
	declineEvents = []string{order.TypeOrderStarted, order.TypeInventoryReserved, order.TypePaymentFailed, order.TypeInventoryReleased, order.TypeOrderFailed}
	shortEvents   = []string{order.TypeOrderStarted, order.TypeInventoryReservationFailed, order.TypeOrderFailed}
)

// everyStep holds an order at each step with an external effect, on each
// path. Confirm and Fail are recorded in the append of the effect that
// leads to them (the payment, the refused reservation, the release), so
// holding that effect holds them too.
var everyStep = []heldCase{
	{step: order.StepReserveInventory, cart: cartOK, method: methodOK, final: "Confirmed", events: successEvents,
		reserved: true, paid: true, payCalled: true, recordedWhenHeld: 1, effect: "reservation"},
	{step: order.StepAuthorizePayment, cart: cartOK, method: methodOK, final: "Confirmed", events: successEvents,
		reserved: true, paid: true, payCalled: true, recordedWhenHeld: 2, effect: "payment"},
	{step: order.StepReleaseInventory, cart: cartOK, method: methodDecline, final: "Failed", events: declineEvents,
		reserved: true, released: true, payCalled: true, recordedWhenHeld: 3, effect: "release"},
	{step: order.StepReserveInventory, cart: cartShort, method: methodOK, final: "Failed", events: shortEvents,
		recordedWhenHeld: 1, effect: "refusal"},
}

// checkHeld checks a held order: its stream stops before the held step,
// and the step's effect is already in the module's records.
func (e *env) checkHeld(h heldOrder) {
	t := e.t
	ctx := ctxT(t, 10*time.Second)
	evs, err := e.events.Load(ctx, h.orderID)
	require.NoError(t, err)
	require.Len(t, evs, h.c.recordedWhenHeld, "order %s held at %s: the step is not recorded", h.orderID, h.c.step)
	switch h.c.effect {
	case "reservation":
		rsv, err := e.rdb.HGet(ctx, commerce.DefaultKeyPrefix+"reservation:{"+order.ReservationID(h.orderID)+"}", "accepted").Result()
		require.NoError(t, err, "order %s: the reservation is made", h.orderID)
		require.Equal(t, "1", rsv)
	case "refusal":
		rsv, err := e.rdb.HGet(ctx, commerce.DefaultKeyPrefix+"reservation:{"+order.ReservationID(h.orderID)+"}", "accepted").Result()
		require.NoError(t, err, "order %s: the refusal is made", h.orderID)
		require.Equal(t, "0", rsv)
	case "payment":
		pay, err := e.rdb.HGet(ctx, commerce.DefaultKeyPrefix+"payment:{"+order.PaymentID(h.orderID)+"}", "accepted").Result()
		require.NoError(t, err, "order %s: the authorization is made", h.orderID)
		require.Equal(t, "1", pay)
	case "release":
		rel, err := e.rdb.HGet(ctx, commerce.DefaultKeyPrefix+"reservation:{"+order.ReservationID(h.orderID)+"}", "released").Result()
		require.NoError(t, err, "order %s: the release is made", h.orderID)
		require.Equal(t, "1", rel)
	}
}

// env is one started cluster with its clients and store readers.
type env struct {
	t      *testing.T
	c      *localcluster.Cluster
	apiBin string
	api    *client.API // api-a's public API
	rdb    *redis.Client
	fx     *fixture.Store
	loc    location.Store
	rel    relocation.Store
	events *eventstore.Redis
	rm     *readmodel.Redis
	cs     *commerce.Redis
	run    string
}

// startCluster starts redis-server, api-a, api-b (with -admin) and
// workflow-a, workflow-b (with -fixtures) through runner/localcluster, seeds
// the catalogue first, and stops everything by PID at the end. env adds
// SHOPPINGMALL_<FLAG>=value settings to every node.
func startCluster(t *testing.T, extraEnv ...string) *env {
	t.Helper()
	apiBin, wfBin := proctest.Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{
		RunDir: t.TempDir(), APIBin: apiBin, WorkflowBin: wfBin,
		Admin: true, Fixtures: true,
		RequestTimeout: 10 * time.Second,
		Env:            append(localcluster.ChildEnv(os.Environ()), extraEnv...),
		StopGrace:      10 * time.Second,
		Logf:           t.Logf,
		BeforeNodes: func(ctx context.Context, u string) error {
			rdb, err := newRedis(u)
			if err != nil {
				return err
			}
			defer rdb.Close()
			cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
			if err != nil {
				return err
			}
			return cs.ApplySeed(ctx, seed())
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
				t.Logf("---- %s (%s), last lines:\n%s", n, c.LogPath(n), localcluster.Tail(c.LogPath(n), 30))
			}
		}
		for _, n := range append(append([]string{}, localcluster.APINodes...), localcluster.WorkflowNodes...) {
			_ = c.Kill(n)
		}
		if err := c.Stop(); err != nil {
			t.Logf("stop: %v", err)
		}
	})
	rdb, err := newRedis(c.RedisURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	hc := &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	fx, err := fixture.NewRedis(fixture.Config{Client: rdb})
	require.NoError(t, err)
	events, err := eventstore.NewRedis(eventstore.Config{Client: rdb})
	require.NoError(t, err)
	rm, err := readmodel.NewRedis(readmodel.Config{Client: rdb})
	require.NoError(t, err)
	cs, err := commerce.NewRedis(commerce.Config{Client: rdb})
	require.NoError(t, err)
	loc, err := location.NewRedis(location.Config{Client: rdb})
	require.NoError(t, err)
	rel, err := relocation.NewRedis(relocation.Config{Client: rdb})
	require.NoError(t, err)
	return &env{
		t: t, c: c, apiBin: apiBin, rdb: rdb,
		api:    &client.API{BaseURL: c.APIURL(localcluster.APIA), HTTP: hc},
		fx:     fx,
		loc:    loc,
		rel:    rel,
		events: events,
		rm:     rm,
		cs:     cs,
		run:    strconv.FormatInt(time.Now().UnixNano()&0xffffffffff, 36),
	}
}

func newRedis(u string) (*redis.Client, error) {
	opt, err := redis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// heldOrder is an order held at its case's step by a generation-1 owner.
type heldOrder struct {
	c       heldCase
	key     string
	orderID string
	node    string // the owner's node name when it was held
	member  string // the owner's member id
}

// holdOn starts orders of each case, each armed to be held at the case's
// step by its first owner (generation 1), until every case has one held
// order owned by node; orders held elsewhere are returned too. The API
// picks a member round-robin, so it takes about two starts a case.
func (e *env) holdOn(node string, cases []heldCase) (onNode, elsewhere []heldOrder) {
	t := e.t
	for i, hc := range cases {
		for attempt := 0; ; attempt++ {
			require.Less(t, attempt, 8, "no %s order landed on %s", hc.step, node)
			h := e.holdOne(hc, fmt.Sprintf("tk-%s-%d-%s-%d", e.run, i, hc.step, attempt))
			if h.node == node {
				onNode = append(onNode, h)
				break
			}
			elsewhere = append(elsewhere, h)
		}
	}
	return onNode, elsewhere
}

// holdOne arms the effect gate, starts the order and waits until its owner
// holds the step.
func (e *env) holdOne(hc heldCase, key string) heldOrder {
	t := e.t
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, e.fx.ArmEffectGate(ctx, key, hc.step.String(), 1))
	res, rep, err := e.api.StartOrder(ctx, &contracts.StartOrderReq{CartId: hc.cart, ShippingAddressId: addressID,
		PaymentMethodId: hc.method, IdempotencyKey: key})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, rep.Status, "start %s: %s", key, rep)
	h := heldOrder{c: hc, key: key, orderID: res.GetOrderId()}
	require.Eventually(t, func() bool {
		step, gen, held, err := e.fx.EffectHeld(ctx, key)
		return err == nil && held && step == hc.step.String() && gen == 1
	}, 15*time.Second, 10*time.Millisecond, "order %s never held at %s", h.orderID, hc.step)
	rec, err := e.loc.Get(ctx, kind, h.orderID)
	require.NoError(t, err)
	require.Equal(t, location.Ready, rec.Status)
	names, err := e.loc.MemberNames(ctx)
	require.NoError(t, err)
	h.member, h.node = rec.Owner, names[rec.Owner]
	t.Logf("order %s held at %s on %s (generation %d)", h.orderID, hc.step, h.node, rec.Generation)
	return h
}

// admin sends a request to api-a's admin listener with the cluster's token.
func (e *env) admin(method, path string) (int, []byte) {
	t := e.t
	req, err := http.NewRequest(method, e.c.AdminURL(localcluster.APIA)+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.c.AdminToken())
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b
}

// takeoverReply is the admin takeover reply, as the API documents it.
type takeoverReply struct {
	DryRun bool `json:"dryRun"`
	Force  bool `json:"force"`
	Member string
	Orders []struct {
		OrderID       string `json:"orderId"`
		OperationID   string `json:"operationId"`
		Member        string `json:"member"`
		Node          string `json:"node"`
		OldGeneration int64  `json:"oldGeneration"`
		NewGeneration int64  `json:"newGeneration"`
		Outcome       string `json:"outcome"`
		OwnerLive     bool   `json:"ownerLive"`
	} `json:"orders"`
	Failed []json.RawMessage `json:"failed"`
}

func decodeReply(t *testing.T, b []byte) takeoverReply {
	t.Helper()
	var rep takeoverReply
	require.NoError(t, json.Unmarshal(b, &rep), "reply %s", b)
	return rep
}

// cli runs `commerce-api admin <args>` against api-a's admin listener and
// returns its stdout; it must exit 0.
func (e *env) cli(args ...string) []byte {
	t := e.t
	full := append([]string{"admin"}, args...)
	full = append(full, "-api", e.c.AdminURL(localcluster.APIA))
	cmd := exec.Command(e.apiBin, full...)
	cmd.Env = append(localcluster.ChildEnv(os.Environ()), localcluster.AdminTokenEnv+"="+e.c.AdminToken(), "USER=takeovertest")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "commerce-api %s\nstdout: %s\nstderr: %s", strings.Join(full, " "), out.String(), errOut.String())
	return out.Bytes()
}

// waitTerminal polls the read model through the public API until every
// order is Confirmed or Failed; it returns each order's status.
func (e *env) waitTerminal(ids []string, within time.Duration) map[string]string {
	t := e.t
	ctx := ctxT(t, within+10*time.Second)
	final := map[string]string{}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if st := final[id]; st == "Confirmed" || st == "Failed" {
				continue
			}
			st, _, err := e.api.GetOrder(ctx, id)
			if err != nil || st == nil {
				return false
			}
			final[id] = st.GetStatus().String()
			if s := final[id]; s != "Confirmed" && s != "Failed" {
				return false
			}
		}
		return true
	}, within, 50*time.Millisecond, "orders not terminal: %v", final)
	return final
}

// checkStream loads the order's stream and checks it holds exactly want,
// versions 1..n without gap, no event or source command twice. It
// returns the stream.
func (e *env) checkStream(orderID string, want []string) []eventstore.Envelope {
	t := e.t
	evs, err := e.events.Load(ctxT(t, 10*time.Second), orderID) // Load refuses a version that is not its position
	require.NoError(t, err)
	var types []string
	ids, cmds := map[string]bool{}, map[string]bool{}
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Version, "order %s: gapless versions", orderID)
		require.False(t, ids[ev.EventID], "order %s: event %s twice", orderID, ev.EventID)
		ids[ev.EventID] = true
		if ev.SourceCommandID != "" {
			// Each step records one event under its own source command.
			require.False(t, cmds[ev.SourceCommandID], "order %s: source command %s twice", orderID, ev.SourceCommandID)
			cmds[ev.SourceCommandID] = true
		}
		types = append(types, ev.EventType)
	}
	require.Equal(t, want, types, "order %s: the stream", orderID)
	return evs
}

// checkReadModelIsTheFold folds the stream with the domain and checks the
// read model (through the public API, and its stored version) equals it.
func (e *env) checkReadModelIsTheFold(orderID string, evs []eventstore.Envelope) {
	t := e.t
	events := make([]order.Event, len(evs))
	at := make([]int64, len(evs))
	for i, env := range evs {
		ev, err := workflow.DecodeEvent(env.EventType, env.Schema, env.Data)
		require.NoError(t, err)
		events[i], at[i] = ev, env.CreatedAtUnixMs
	}
	fold, err := order.Fold(events, at)
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	st, rep, err := e.api.GetOrder(ctx, orderID)
	require.NoError(t, err)
	require.NotNil(t, st, "GET %s: %s", orderID, rep)
	require.Equal(t, string(fold.Status), st.GetStatus().String(), "order %s: status", orderID)
	require.Equal(t, fold.ReservationID, st.GetReservationId(), "order %s: reservation", orderID)
	require.Equal(t, fold.PaymentID, st.GetPaymentId(), "order %s: payment", orderID)
	require.Equal(t, fold.Amount, st.GetAmount(), "order %s: amount", orderID)
	require.Equal(t, fold.Currency, st.GetCurrency(), "order %s: currency", orderID)
	require.Equal(t, fold.Reason, st.GetReason(), "order %s: reason", orderID)
	require.Equal(t, fold.UpdatedAtUnixMs, st.GetUpdatedAtUnixMs(), "order %s: updatedAt", orderID)
	_, version, err := e.rm.Get(ctx, orderID)
	require.NoError(t, err)
	require.Equal(t, fold.Version, version, "order %s: the read model reflects the whole stream", orderID)
}

// checkEffects reads the commerce module's effect records of each order
// and the stock: every reservation and authorization exists once, and the
// stock moved exactly once per reservation kept.
func (e *env) checkEffects(orders []heldOrder) {
	t := e.t
	ctx := ctxT(t, 10*time.Second)
	var keptA, keptB int64
	reservations, payments := 0, 0
	for _, h := range orders {
		rsv, err := e.rdb.HGetAll(ctx, commerce.DefaultKeyPrefix+"reservation:{"+order.ReservationID(h.orderID)+"}").Result()
		require.NoError(t, err)
		require.NotEmpty(t, rsv, "order %s: a reservation record", h.orderID)
		require.Equal(t, h.orderID, rsv["orderId"])
		reservations++
		if h.c.reserved {
			require.Equal(t, "1", rsv["accepted"], "order %s: reservation accepted", h.orderID)
		} else {
			require.Equal(t, "0", rsv["accepted"], "order %s: reservation refused", h.orderID)
		}
		if h.c.released {
			require.Equal(t, "1", rsv["released"], "order %s: reservation released", h.orderID)
		} else {
			require.Empty(t, rsv["released"], "order %s: reservation kept", h.orderID)
		}
		if h.c.reserved && !h.c.released {
			keptA, keptB = keptA+qtyA, keptB+qtyB
		}
		pay, err := e.rdb.HGetAll(ctx, commerce.DefaultKeyPrefix+"payment:{"+order.PaymentID(h.orderID)+"}").Result()
		require.NoError(t, err)
		if !h.c.payCalled {
			require.Empty(t, pay, "order %s: payment never called", h.orderID)
			continue
		}
		payments++
		require.Equal(t, h.orderID, pay["orderId"])
		want := "0"
		if h.c.paid {
			want = "1"
		}
		require.Equal(t, want, pay["accepted"], "order %s: authorization", h.orderID)
		captured, err := e.cs.Payment().Captured(ctx, order.PaymentID(h.orderID))
		require.NoError(t, err)
		if h.c.paid {
			require.EqualValues(t, qtyA*1990+qtyB*890, captured, "order %s: authorized once, for the amount", h.orderID)
		}
	}
	// No reservation or payment record of any other id: one per order.
	for pattern, n := range map[string]int{"reservation:{*": reservations, "payment:{*": payments} {
		keys, err := e.rdb.Keys(ctx, commerce.DefaultKeyPrefix+pattern).Result()
		require.NoError(t, err)
		require.Len(t, keys, n, "%s records", pattern)
	}
	inv := e.cs.Inventory()
	a, err := inv.Stock(ctx, skuA)
	require.NoError(t, err)
	b, err := inv.Stock(ctx, skuB)
	require.NoError(t, err)
	require.Equal(t, initialStock-keptA, a, "stock of %s: taken once per kept reservation", skuA)
	require.Equal(t, initialStock-keptB, b, "stock of %s: taken once per kept reservation", skuB)
	t.Logf("effects: %d reservation records, %d payment records; stock %s %d (-%d), %s %d (-%d)",
		reservations, payments, skuA, a, keptA, skuB, b, keptB)
}

// refusedAppends returns the orders of the structured log lines
// `append refused: fenced` in the log at path, from offset from, written
// by an owner at generation gen.
func refusedAppends(t *testing.T, path string, from int64, gen int64) []string {
	t.Helper()
	cur := localcluster.NewLogCursor(path, from)
	require.NoError(t, cur.Refresh())
	var orders []string
	for _, line := range cur.Lines(localcluster.MatchFunc("append refused: fenced", func(l string) bool {
		return strings.Contains(l, `"append refused: fenced"`)
	})) {
		var rec struct {
			Msg        string `json:"msg"`
			Order      string `json:"order"`
			Generation int64  `json:"generation"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "append refused: fenced" && rec.Generation == gen {
			orders = append(orders, rec.Order)
		}
	}
	return orders
}

func TestMain(m *testing.M) { proctest.Main(m) }
