package workflow_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// TestEffectMadeThenTakenOverIsNeverRecorded: an owner stopped between
// the phases of a step (its reservation made, its event not recorded) is
// taken over (fence raised above its generation); the new owner replays,
// gets the reservation's first result and goes on; the old owner's
// Record is refused and logged, and nothing it did is recorded twice.
func TestEffectMadeThenTakenOverIsNeverRecorded(t *testing.T) {
	e := newEnv(t)
	d, ctx := e.d, e.ctx
	var logs bytes.Buffer
	var logMu sync.Mutex
	cfg := d.Config
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	e.svc = mustService(t, cfg)

	old, _ := e.start("ord-g", "key-g", methodOK)
	before, err := d.Inventory.Stock(ctx, "SKU-1")
	require.NoError(t, err)
	appends := d.Events.Appends.Load()
	eff, err := e.svc.MakeEffect(ctx, old)
	require.NoError(t, err)
	require.NotNil(t, eff)
	require.Equal(t, order.StepReserveInventory, eff.Step())
	after, err := d.Inventory.Stock(ctx, "SKU-1")
	require.NoError(t, err)
	require.Less(t, after, before, "the effect is made: the reservation exists")
	require.Equal(t, appends, d.Events.Appends.Load(), "and nothing was appended")
	require.Equal(t, []string{order.TypeOrderStarted}, d.Events.Types("ord-g"))

	// A takeover: fence past generation 1; the next owner opens at 3.
	_, err = d.Events.RaiseFence(ctx, "ord-g", 2)
	require.NoError(t, err)
	next := e.open("ord-g", 3)
	e.drive(next)
	require.Equal(t, successOrder, d.Events.Types("ord-g"), "the new owner finished")
	final, err := d.Inventory.Stock(ctx, "SKU-1")
	require.NoError(t, err)
	require.Equal(t, after, final, "its reservation got the first result: stock taken once")
	calls, err := d.Inventory.ReserveCalls(ctx, order.ReservationID("ord-g"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls, "both owners called the module")

	progressed, err := e.svc.Record(ctx, old, eff, workflow.Project)
	require.ErrorIs(t, err, workflow.ErrFenced)
	require.ErrorIs(t, err, eventstore.ErrFenced)
	require.False(t, progressed)
	require.Equal(t, successOrder, d.Events.Types("ord-g"), "the old owner's append was not accepted")
	logMu.Lock()
	defer logMu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), `msg="append refused: fenced"`), "the refusal is logged:\n%s", logs.String())
	require.Contains(t, logs.String(), "order=ord-g step=ReserveInventory generation=1")
}

// TestRecordOfASupersededEffectRecordsNothing: when the fold moved on
// between the phases (a command ran the step whole), the effect is not
// recorded on top of it: the stream is right and stays as it is.
func TestRecordOfASupersededEffectRecordsNothing(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-s", "key-s", methodOK)
	eff, err := e.svc.MakeEffect(e.ctx, o)
	require.NoError(t, err)
	progressed, err := e.svc.Step(e.ctx, o)
	require.NoError(t, err)
	require.True(t, progressed)
	appends := e.d.Events.Appends.Load()

	progressed, err = e.svc.Record(e.ctx, o, eff, workflow.Project)
	require.NoError(t, err)
	assert.False(t, progressed)
	assert.Equal(t, appends, e.d.Events.Appends.Load(), "no append tried")
	assert.Equal(t, []string{order.TypeOrderStarted, order.TypeInventoryReserved}, e.d.Events.Types("ord-s"))

	other := e.open("ord-other", 1)
	_, err = e.svc.Record(e.ctx, other, eff, workflow.Project)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument, "an effect belongs to its order")
	_, err = e.svc.Record(e.ctx, o, nil, workflow.Project)
	require.ErrorIs(t, err, workflow.ErrInvalidArgument)
}

// TestRecordCanLeaveTheProjectionBehind: with LeaveProjectionBehind the
// event is recorded and the read model keeps the previous version, for
// any step; the next projection write catches up.
func TestRecordCanLeaveTheProjectionBehind(t *testing.T) {
	e := newEnv(t)
	o, _ := e.start("ord-b", "key-b", methodOK)
	puts := e.d.ReadModel.Puts.Load()
	eff, err := e.svc.MakeEffect(e.ctx, o)
	require.NoError(t, err)
	progressed, err := e.svc.Record(e.ctx, o, eff, workflow.LeaveProjectionBehind)
	require.NoError(t, err)
	require.True(t, progressed)
	assert.Equal(t, puts, e.d.ReadModel.Puts.Load(), "no projection write")
	_, v := e.projection("ord-b")
	assert.EqualValues(t, 1, v, "the read model stays at the start")
	assert.EqualValues(t, 2, o.State().Version)

	e.drive(o)
	_, v = e.projection("ord-b")
	assert.EqualValues(t, 4, v, "the next steps' projections catch up")
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
