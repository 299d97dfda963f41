package workflow

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
)

// The workflow's metrics' full names. They count what this process's
// owners recorded: an event another owner recorded (before a relocation
// or a takeover) is that owner's process's.
const (
	// MetricOrdersStarted counts orders whose OrderStartedEvent an owner
	// here recorded: once per order, never for a repeated start.
	MetricOrdersStarted = telemetry.Namespace + "_orders_started_total"
	// MetricOrdersTerminal counts orders whose terminal event an owner
	// here recorded, by LabelOutcome.
	MetricOrdersTerminal = telemetry.Namespace + "_orders_terminal_total"
	// MetricStepDuration is the latency of one workflow step whose event
	// an owner here recorded, by LabelStep: from deciding the step to its
	// event recorded (module call, append and projection included).
	MetricStepDuration = telemetry.Namespace + "_step_duration_seconds"
)

// LabelOutcome is how an order ended: OutcomeConfirmed or OutcomeFailed.
const LabelOutcome = "outcome"

// The values of LabelOutcome.
const (
	OutcomeConfirmed = "confirmed"
	OutcomeFailed    = "failed"
)

// LabelStep names a workflow step (StepLabel).
const LabelStep = "step"

// StepLabel is the LabelStep value of a step: reserve_inventory,
// authorize_payment, release_inventory, confirm or fail. StepNone, the
// work an owner has left when no step is due (a projection or an
// idempotency mark to repair after its event was recorded), is "repair".
func StepLabel(s order.Step) string {
	switch s {
	case order.StepNone:
		return "repair"
	case order.StepReserveInventory:
		return "reserve_inventory"
	case order.StepAuthorizePayment:
		return "authorize_payment"
	case order.StepReleaseInventory:
		return "release_inventory"
	case order.StepConfirm:
		return "confirm"
	case order.StepFail:
		return "fail"
	}
	return "unknown"
}

// Steps are the steps Decide can return, in no particular order: every
// StepLabel series a process shows from its first scrape on.
var Steps = []order.Step{
	order.StepReserveInventory, order.StepAuthorizePayment, order.StepReleaseInventory,
	order.StepConfirm, order.StepFail,
}

// stepBuckets span a step on a local Redis (a few milliseconds) up to
// one that waits on a slow module or store for seconds.
var stepBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

type metrics struct {
	started  prometheus.Counter
	terminal *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg *telemetry.Registry) *metrics {
	f := reg.Factory()
	m := &metrics{
		started: f.NewCounter(prometheus.CounterOpts{Name: MetricOrdersStarted,
			Help: "Orders whose OrderStartedEvent an owner in this process recorded (a repeated start is not counted)."}),
		terminal: f.NewCounterVec(prometheus.CounterOpts{Name: MetricOrdersTerminal,
			Help: "Orders whose terminal event (OrderConfirmedEvent or OrderFailedEvent) an owner in this process recorded, by outcome."},
			[]string{LabelOutcome}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: MetricStepDuration,
			Help:    "Latency of a workflow step whose event an owner in this process recorded, from deciding it to its event recorded, by step.",
			Buckets: stepBuckets},
			[]string{LabelStep}),
	}
	m.terminal.WithLabelValues(OutcomeConfirmed)
	m.terminal.WithLabelValues(OutcomeFailed)
	for _, s := range Steps {
		m.duration.WithLabelValues(StepLabel(s))
	}
	return m
}

// recorded counts an event this owner recorded, by its type.
func (m *metrics) recorded(eventType string) {
	switch eventType {
	case order.TypeOrderStarted:
		m.started.Inc()
	case order.TypeOrderConfirmed:
		m.terminal.WithLabelValues(OutcomeConfirmed).Inc()
	case order.TypeOrderFailed:
		m.terminal.WithLabelValues(OutcomeFailed).Inc()
	}
}

func (m *metrics) stepDone(step order.Step, began time.Time) {
	m.duration.WithLabelValues(StepLabel(step)).Observe(time.Since(began).Seconds())
}

// inDoubt is an append whose outcome is unknown: the next read of the
// stream tells whether it landed, and so whether to count its events. Its
// first event stands for the batch, which lands whole or not at all.
type inDoubt struct {
	version    int64
	eventID    string
	eventTypes []string
}

// settleInDoubt counts the order's event in doubt if envs, the stream as
// just read, holds it where its append put it. Event ids are
// deterministic and a fenced stream has one writer, so the entry is this
// owner's append.
func (s *Service) settleInDoubt(o *Order, envs []eventstore.Envelope) {
	d := o.inDoubt
	if d == nil {
		return
	}
	o.inDoubt = nil
	if d.version >= 1 && int64(len(envs)) >= d.version && envs[d.version-1].EventID == d.eventID {
		for _, t := range d.eventTypes {
			s.metrics.recorded(t)
		}
	}
}
