package telemetry

import (
	"errors"
	"fmt"

	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MeterProvider returns an OpenTelemetry meter provider whose instruments
// r serves with the rest (through the OpenTelemetry Prometheus exporter,
// which r collects at each scrape), for libraries that report through
// OpenTelemetry rather than a Prometheus registry: protoactor's actor
// metrics (protoactor_...). Names are translated the Prometheus way
// (a counter gains _total); no target_info or scope labels are added.
// Call it once per registry: a second exporter's collector would collide
// with the first. Shut the provider down with the process.
func (r *Registry) MeterProvider() (*sdkmetric.MeterProvider, error) {
	if r == nil {
		return nil, errors.New("telemetry: MeterProvider on a nil Registry")
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(r.reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: OpenTelemetry Prometheus exporter: %w", err)
	}
	// The SDK's default histogram buckets (0, 5, 10, ... 10000) suit
	// milliseconds; a *_seconds histogram gets seconds' buckets instead.
	seconds := sdkmetric.NewView(
		sdkmetric.Instrument{Name: "*_seconds", Kind: sdkmetric.InstrumentKindHistogram},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: secondsBuckets}})
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(seconds)), nil
}

// secondsBuckets span an actor turn's tens of microseconds up to a
// request timeout.
var secondsBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10}
