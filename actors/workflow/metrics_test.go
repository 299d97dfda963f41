package workflow_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// metered swaps the env's service for one that counts into a registry of
// its own, and returns a reader of the registry's current values.
func (e *env) metered() func() map[string]float64 {
	e.t.Helper()
	reg := telemetry.NewRegistry()
	cfg := e.d.Config
	cfg.Metrics = reg
	e.svc = mustService(e.t, cfg)
	return func() map[string]float64 {
		e.t.Helper()
		out := map[string]float64{}
		read := func(key, name string, labels map[string]string) {
			v, err := telemetry.Sum(reg.Gatherer(), name, labels)
			require.NoError(e.t, err)
			out[key] = v
		}
		read("started", workflow.MetricOrdersStarted, nil)
		for _, outcome := range []string{workflow.OutcomeConfirmed, workflow.OutcomeFailed} {
			read("terminal/"+outcome, workflow.MetricOrdersTerminal, map[string]string{workflow.LabelOutcome: outcome})
		}
		for _, s := range workflow.Steps {
			read("step/"+workflow.StepLabel(s), workflow.MetricStepDuration, map[string]string{workflow.LabelStep: workflow.StepLabel(s)})
		}
		return out
	}
}

// counts is the expected reading: the keys given, every other one zero.
func counts(set map[string]float64) map[string]float64 {
	out := map[string]float64{"started": 0, "terminal/confirmed": 0, "terminal/failed": 0}
	for _, s := range workflow.Steps {
		out["step/"+workflow.StepLabel(s)] = 0
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}

// Each order counts once when its start is recorded (a repeated start is
// not) and once when its terminal event is, by outcome; each step whose
// event was recorded adds one latency sample under its name.
func TestMetricsCountEachOrderOnceByOutcomeAndEachRecordedStep(t *testing.T) {
	e := newEnv(t)
	read := e.metered()
	require.Equal(t, counts(nil), read(), "every series exists at zero")

	o, req := e.start("ord-ok", "key-ok", methodOK)
	_, recorded, err := e.svc.Start(e.ctx, o, req)
	require.NoError(t, err)
	require.False(t, recorded)
	require.Equal(t, counts(map[string]float64{"started": 1}), read(), "a repeated start is not counted")

	e.drive(o)
	_, err = e.svc.Continue(e.ctx, o)
	require.NoError(t, err)
	confirmed := counts(map[string]float64{"started": 1, "terminal/confirmed": 1,
		"step/reserve_inventory": 1, "step/authorize_payment": 1, "step/confirm": 1})
	require.Equal(t, confirmed, read(), "a confirmed order, continued once more")

	declined, _ := e.start("ord-declined", "key-declined", methodDecline)
	e.drive(declined)
	require.Equal(t, counts(map[string]float64{"started": 2, "terminal/confirmed": 1, "terminal/failed": 1,
		"step/reserve_inventory": 2, "step/authorize_payment": 2, "step/release_inventory": 1, "step/confirm": 1, "step/fail": 1}), read(),
		"a declined payment: released, then failed")

	// A second owner of a terminal order replays it and records nothing.
	again := e.open("ord-ok", 2)
	e.drive(again)
	require.Equal(t, 2.0, read()["started"])
	require.Equal(t, 1.0, read()["terminal/confirmed"])
}

// An append whose reply was lost is counted once, when the reload that
// follows finds it in the stream; its latency is not known, so it adds no
// sample.
func TestMetricsCountALostAppendReplyOnceItIsFoundRecorded(t *testing.T) {
	e := newEnv(t)
	read := e.metered()
	o := e.open("ord-lost", 1)
	e.d.Events.LoseNextAppendReply(errors.New("connection reset"))
	_, _, err := e.svc.Start(e.ctx, o, e.d.StartReq("ord-lost", "key-lost", methodOK))
	require.Error(t, err)
	require.Equal(t, counts(nil), read(), "not counted while in doubt")

	e.drive(o)
	require.Equal(t, successOrder, e.d.Events.Types("ord-lost"))
	require.Equal(t, counts(map[string]float64{"started": 1, "terminal/confirmed": 1,
		"step/reserve_inventory": 1, "step/authorize_payment": 1, "step/confirm": 1}), read())

	// The dedupe answer to an append that an earlier attempt landed (the
	// payment with its confirmation): the stream holds this owner's
	// events, counted once; the step's latency is not observed.
	p, _ := e.start("ord-dup", "key-dup", methodOK)
	progressed, err := e.svc.Step(e.ctx, p)
	require.NoError(t, err)
	require.True(t, progressed)
	e.d.Events.LoseNextAppendReply(eventstore.ErrDuplicateCommand)
	progressed, err = e.svc.Step(e.ctx, p)
	require.NoError(t, err)
	require.False(t, progressed)
	require.Equal(t, order.StatusConfirmed, p.State().Status)
	e.drive(p)
	require.Equal(t, counts(map[string]float64{"started": 2, "terminal/confirmed": 2,
		"step/reserve_inventory": 2, "step/authorize_payment": 1, "step/confirm": 1}), read())

	// A write that never reached the store counts nothing until the
	// retry records it.
	q, _ := e.start("ord-failed-append", "key-failed-append", methodOK)
	e.d.Events.FailNextAppend(errors.New("connection refused"))
	_, err = e.svc.Step(e.ctx, q)
	require.Error(t, err)
	require.Equal(t, 2.0, read()["step/reserve_inventory"])
	e.drive(q)
	require.Equal(t, counts(map[string]float64{"started": 3, "terminal/confirmed": 3,
		"step/reserve_inventory": 3, "step/authorize_payment": 2, "step/confirm": 2}), read())
}
