package grain

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

// withMetrics gives the grains a registry of their own, read with value.
func (e *env) withMetrics() *telemetry.Registry {
	reg := telemetry.NewRegistry()
	e.cfg.Metrics = reg
	return reg
}

// value is the metric's current value (a sum over the series whose
// labels include labels; nil sums all).
func value(t *testing.T, reg *telemetry.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := telemetry.Sum(reg.Gatherer(), name, labels)
	require.NoError(t, err)
	return v
}

func atStep(s order.Step) map[string]string {
	return map[string]string{workflow.LabelStep: workflow.StepLabel(s)}
}
