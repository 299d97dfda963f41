package workflow_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// heldFixtures is workflowtest's fixtures plus an effect gate that holds
// one step of owners at or below a generation until released.
type heldFixtures struct {
	*workflowtest.Fixtures
	step   string
	maxGen int64

	mu       sync.Mutex
	released chan struct{}
	holds    []string // "<step>@<generation>" of every hold that began
	reached  chan struct{}
}

func (f *heldFixtures) HoldBeforeAppend(ctx context.Context, _ string, step string, generation int64) error {
	if step != f.step || generation > f.maxGen {
		return nil
	}
	f.mu.Lock()
	f.holds = append(f.holds, step)
	f.mu.Unlock()
	select {
	case f.reached <- struct{}{}:
	default:
	}
	select {
	case <-f.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ workflow.EffectGate = (*heldFixtures)(nil)

// TestEffectGateHoldsBetweenModuleCallAndAppend: an owner held after its
// reservation and before its append is taken over (fence raised above its
// generation); the new owner replays, gets the reservation's first result
// and goes on; the old owner's append, once released, is refused and
// logged, and nothing it did is recorded twice.
func TestEffectGateHoldsBetweenModuleCallAndAppend(t *testing.T) {
	e := newEnv(t)
	d, ctx := e.d, e.ctx
	fx := &heldFixtures{Fixtures: d.Fixtures, step: order.StepReserveInventory.String(), maxGen: 1,
		released: make(chan struct{}), reached: make(chan struct{}, 1)}
	var logs bytes.Buffer
	var logMu sync.Mutex
	cfg := d.Config
	cfg.Fixtures = fx
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	e.svc = mustService(t, cfg)

	old, _ := e.start("ord-g", "key-g", methodOK)
	before, err := d.Inventory.Stock(ctx, "SKU-1")
	require.NoError(t, err)
	stepped := make(chan error, 1)
	go func() {
		_, err := e.svc.Step(ctx, old)
		stepped <- err
	}()
	select {
	case <-fx.reached:
	case <-time.After(5 * time.Second):
		t.Fatal("the step never reached the effect gate")
	}
	after, err := d.Inventory.Stock(ctx, "SKU-1")
	require.NoError(t, err)
	require.Less(t, after, before, "held after the module call: the reservation is made")
	require.Equal(t, []string{order.TypeOrderStarted}, d.Events.Types("ord-g"), "and not recorded")

	// A takeover: fence past generation 1; the next owner opens at 3.
	_, err = d.Events.RaiseFence(ctx, "ord-g", 2)
	require.NoError(t, err)
	next := e.open("ord-g", 3)
	e.drive(next)
	require.Equal(t, successOrder, d.Events.Types("ord-g"), "the new owner passed the gate and finished")
	final, err := d.Inventory.Stock(ctx, "SKU-1")
	require.NoError(t, err)
	require.Equal(t, after, final, "its reservation got the first result: stock taken once")
	calls, err := d.Inventory.ReserveCalls(ctx, order.ReservationID("ord-g"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls, "both owners called the module")

	close(fx.released)
	select {
	case err = <-stepped:
	case <-time.After(5 * time.Second):
		t.Fatal("the held step did not return after its release")
	}
	require.ErrorIs(t, err, workflow.ErrFenced)
	require.ErrorIs(t, err, eventstore.ErrFenced)
	require.Equal(t, successOrder, d.Events.Types("ord-g"), "the old owner's append was not accepted")
	logMu.Lock()
	defer logMu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), `msg="append refused: fenced"`), "the refusal is logged:\n%s", logs.String())
	require.Contains(t, logs.String(), "order=ord-g step=ReserveInventory generation=1")
	fx.mu.Lock()
	require.Equal(t, []string{"ReserveInventory"}, fx.holds, "only the old generation was held")
	fx.mu.Unlock()
}

// TestEffectGateEndsWithTheTurn: a hold ends with the step's context, as a
// transient failure, and nothing is recorded.
func TestEffectGateEndsWithTheTurn(t *testing.T) {
	e := newEnv(t)
	fx := &heldFixtures{Fixtures: e.d.Fixtures, step: order.StepReserveInventory.String(), maxGen: 0,
		released: make(chan struct{}), reached: make(chan struct{}, 1)}
	cfg := e.d.Config
	cfg.Fixtures = fx
	e.svc = mustService(t, cfg)
	fx.maxGen = 5
	o, _ := e.start("ord-t", "key-t", methodOK)
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	progressed, err := e.svc.Step(c, o)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, progressed)
	require.False(t, workflow.Permanent(err), "retried like any transient failure")
	require.Equal(t, []string{order.TypeOrderStarted}, e.d.Events.Types("ord-t"))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
