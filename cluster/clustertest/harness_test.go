package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/actors/node"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/cluster"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/cluster/placement"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// harness runs several members in one process on the in-memory test
// provider, against a real redis-server.
type harness struct {
	t      testing.TB
	redis  *redisserver.Server
	agent  *test.InMemAgent
	stores *node.Stores
	mu     sync.Mutex
	logs   map[string]*workflowtest.Evidence
	// slogs holds each node's warnings and errors as logged, for tests
	// that assert what a member said.
	slogs map[string]*workflowtest.Evidence
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stores, err := node.OpenStores(ctx, node.RedisURLs{Default: srv.URL()}, node.StoreOptions{Fixtures: true})
	require.NoError(t, err)
	t.Cleanup(stores.Close)
	h := &harness{t: t, redis: srv, agent: test.NewInMemAgent(), stores: stores, logs: map[string]*workflowtest.Evidence{}, slogs: map[string]*workflowtest.Evidence{}}
	require.NoError(t, stores.Commerce.ApplySeed(ctx, commerce.DemoSeed()))
	return h
}

func (h *harness) logger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(tlogWriter{h.t}, h.logged(name)), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)
}

// logged is what the node's logger wrote.
func (h *harness) logged(name string) *workflowtest.Evidence {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.slogs[name]
	if !ok {
		b = &workflowtest.Evidence{}
		h.slogs[name] = b
	}
	return b
}

func (h *harness) evidence(name string) *workflowtest.Evidence {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.logs[name]
	if !ok {
		b = &workflowtest.Evidence{}
		h.logs[name] = b
	}
	return b
}

// quietFramework hides protoactor's connection errors at member shutdown.
const quietFramework = slog.LevelError + 4

type wfOpt func(*node.WorkflowConfig)

func withIdle(d time.Duration) wfOpt { return func(c *node.WorkflowConfig) { c.IdleTimeout = d } }
func withFixtures() wfOpt            { return func(c *node.WorkflowConfig) { c.Fixtures = true } }
func withLimits(l placement.Limits) wfOpt {
	return func(c *node.WorkflowConfig) { c.Cluster.Limits = l }
}

func (h *harness) startWorkflow(name string, opts ...wfOpt) *node.Workflow {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := node.WorkflowConfig{
		Cluster: cluster.Config{
			NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
			RefreshTTL: 100 * time.Millisecond, Logger: h.logger(name),
			FrameworkLogLevel: quietFramework,
		},
		Stores:   h.stores,
		Evidence: io.MultiWriter(h.evidence(name), tlogWriter{h.t}),
		Logger:   h.logger(name),
	}
	for _, o := range opts {
		o(&cfg)
	}
	w, err := node.StartWorkflow(ctx, cfg)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { w.Member.Crash() })
	return w
}

// api is a member without kinds, as CommerceApi is.
type api struct {
	member *cluster.Member
	client *grain.Client
}

func (h *harness) startAPI(name string) *api { return h.startAPIOn(name, h.stores.Location) }

// startAPIWith is startAPI with edit's changes to its member's Config.
func (h *harness) startAPIWith(name string, edit func(*cluster.Config)) *api {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := cluster.Config{
		NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: h.stores.Location, Logger: h.logger(name),
		FrameworkLogLevel: quietFramework,
	}
	edit(&cfg)
	m, err := cluster.Start(ctx, cfg)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { m.Crash() })
	return &api{member: m, client: grain.NewClient(m.Lookup)}
}

// startAPIOn starts an API member whose lookup uses loc: a Location Store
// client of its own, to count the API's round trips apart.
func (h *harness) startAPIOn(name string, loc location.Store) *api {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := cluster.Start(ctx, cluster.Config{
		NodeName: name, Provider: cluster.ProviderTest, TestAgent: h.agent,
		RefreshTTL: 100 * time.Millisecond, Location: loc, Logger: h.logger(name),
		FrameworkLogLevel: quietFramework,
	})
	require.NoError(h.t, err)
	h.t.Cleanup(func() { m.Crash() })
	return &api{member: m, client: grain.NewClient(m.Lookup)}
}

// waitMembers waits until the lookup sees n members hosting the kind.
func waitMembers(t testing.TB, l *placement.Lookup, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.Eligible(grain.KindName)) == n }, 10*time.Second, 10*time.Millisecond,
		"expected %d workflow members", n)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var orderSeq struct {
	sync.Mutex
	n int
}

// startReq builds a start command for a fresh order of the demo catalogue.
func (h *harness) startReq(t testing.TB, cartID, method string) *contracts.StartOrderWorkflowReq {
	return startReqOn(t, h.stores, cartID, method)
}

// startReqOn is startReq on stores of their own.
func startReqOn(t testing.TB, stores *node.Stores, cartID, method string) *contracts.StartOrderWorkflowReq {
	orderSeq.Lock()
	orderSeq.n++
	n := orderSeq.n
	orderSeq.Unlock()
	ctx := ctxT(t, 5*time.Second)
	cart, err := stores.Commerce.Carts().GetCart(ctx, cartID)
	require.NoError(t, err)
	key := fmt.Sprintf("%s-key-%d-%d", t.Name(), n, time.Now().UnixNano())
	orderID := fmt.Sprintf("ord-%d-%d", n, time.Now().UnixNano())
	_, _, err = stores.Commerce.Idempotency().Reserve(ctx, key, commerce.Mapping{
		OrderID: orderID, Status: commerce.MappingPending,
		Fingerprint: commerce.Fingerprint(cartID, "addr-1", method),
	})
	require.NoError(t, err)
	return &contracts.StartOrderWorkflowReq{
		OrderId: orderID, CartId: cartID,
		ShippingAddressId: "addr-1", PaymentMethodId: method, IdempotencyKey: key,
		SourceCommandId: order.StartSourceCommandID(key), Lines: cart.Lines,
		Amount: cart.Amount, Currency: cart.Currency,
	}
}

// eventTypes returns the order's stream as event type names.
func (h *harness) eventTypes(t *testing.T, orderID string) []string {
	envs, err := h.stores.Events.Load(ctxT(t, 5*time.Second), orderID)
	require.NoError(t, err)
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.EventType
	}
	return out
}

// waitStatus polls the read model until the order reaches status.
func (h *harness) waitStatus(t *testing.T, orderID string, status contracts.OrderStatus) *contracts.OrderState {
	t.Helper()
	return waitStatusOn(t, h.stores, orderID, status)
}

// waitStatusOn is waitStatus on stores of their own.
func waitStatusOn(t *testing.T, stores *node.Stores, orderID string, status contracts.OrderStatus) *contracts.OrderState {
	t.Helper()
	var last *contracts.OrderState
	require.Eventually(t, func() bool {
		st, _, err := stores.ReadModel.Get(context.Background(), orderID)
		if err == nil {
			last = st
		}
		return err == nil && st.GetStatus() == status
	}, 15*time.Second, 10*time.Millisecond, "order %s to reach %s (last %v)", orderID, status, &last)
	return last
}

var (
	success         = []string{"OrderStartedEvent", "InventoryReservedEvent", "PaymentAuthorizedEvent", "OrderConfirmedEvent"}
	inventoryFailed = []string{"OrderStartedEvent", "InventoryReservationFailedEvent", "OrderFailedEvent"}
	paymentFailed   = []string{"OrderStartedEvent", "InventoryReservedEvent", "PaymentFailedEvent", "InventoryReleasedEvent", "OrderFailedEvent"}
)

// answered repeats call while it fails with location.ErrTimeout and
// returns its first other outcome. The first request over a fresh remote
// connection may time out at the activation on a loaded machine
// (Unavailable, a retryable answer); a test about what the order answers
// asks until it gets that answer, and its side-effect checks cover every
// attempt.
func answered(t *testing.T, call func() error) error {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		err = call()
		return !errors.Is(err, location.ErrTimeout)
	}, 8*time.Second, 50*time.Millisecond, "no answer but timeouts: %v", err)
	return err
}
