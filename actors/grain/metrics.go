package grain

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// The grain's metrics' full names: what the order grains of a member
// could not do by themselves. Their step label is workflow.LabelStep,
// valued by workflow.StepLabel.
const (
	// MetricStepRetries counts the owner's retries of an order's
	// background work after a transient failure (a store or module that
	// did not answer), by the step the order was at.
	MetricStepRetries = telemetry.Namespace + "_step_retries_total"
	// MetricStepPermanentFailures counts steps that failed for a reason
	// retrying cannot fix (a corrupt record, a refused release), by step:
	// each leaves its order stuck until an operator resumes it.
	MetricStepPermanentFailures = telemetry.Namespace + "_step_permanent_failures_total"
	// MetricGrainRestarts counts order grains restarted after a panic.
	MetricGrainRestarts = telemetry.Namespace + "_grain_restarts_total"
)

type metrics struct {
	retries   *prometheus.CounterVec
	permanent *prometheus.CounterVec
	restarts  prometheus.Counter
}

func newMetrics(reg *telemetry.Registry) *metrics {
	f := reg.Factory()
	m := &metrics{
		retries: f.NewCounterVec(prometheus.CounterOpts{Name: MetricStepRetries,
			Help: "Retries of an order's background work after a transient failure, by the step the order was at (repair: a write left after its event)."},
			[]string{workflow.LabelStep}),
		permanent: f.NewCounterVec(prometheus.CounterOpts{Name: MetricStepPermanentFailures,
			Help: "Steps that failed for a reason retrying cannot fix, by step; each order waits for an operator."},
			[]string{workflow.LabelStep}),
		restarts: f.NewCounter(prometheus.CounterOpts{Name: MetricGrainRestarts,
			Help: "Order grains restarted after a panic."}),
	}
	for _, s := range workflow.Steps {
		m.retries.WithLabelValues(workflow.StepLabel(s))
		m.permanent.WithLabelValues(workflow.StepLabel(s))
	}
	return m
}

// stepOf is the step an order's failed work was at: the fold has not
// moved past a step that failed, and a failed reload leaves it where it
// was.
func stepOf(o *workflow.Order) string {
	if o == nil {
		return workflow.StepLabel(order.StepNone)
	}
	return workflow.StepLabel(order.Decide(o.State()))
}

func (m *metrics) retried(o *workflow.Order) { m.retries.WithLabelValues(stepOf(o)).Inc() }

func (m *metrics) failedPermanently(o *workflow.Order) {
	m.permanent.WithLabelValues(stepOf(o)).Inc()
}
