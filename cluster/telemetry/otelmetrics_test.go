package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMeterProviderServesThroughTheRegistry(t *testing.T) {
	reg := NewRegistry()
	mp, err := reg.MeterProvider()
	require.NoError(t, err)
	m := mp.Meter("t")
	c, err := m.Int64Counter("lib_things_count")
	require.NoError(t, err)
	c.Add(context.Background(), 3)
	h, err := m.Float64Histogram("lib_turn_duration_seconds")
	require.NoError(t, err)
	h.Record(context.Background(), 0.0003)
	got, err := Sum(reg.Gatherer(), "lib_things_count_total", nil)
	require.NoError(t, err)
	require.Equal(t, 3.0, got, "an OpenTelemetry counter is served by the registry, Prometheus-named")
	mfs, err := reg.Gatherer().Gather()
	require.NoError(t, err)
	var bounds []float64
	for _, mf := range mfs {
		if mf.GetName() == "lib_turn_duration_seconds" {
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
		}
		require.NotEqual(t, "target_info", mf.GetName())
	}
	require.Equal(t, secondsBuckets, bounds, "a seconds histogram gets seconds' buckets")
	_, err = (*Registry)(nil).MeterProvider()
	require.Error(t, err)
}
