package procflags

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/telemetry"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestOpenTelemetryEnvironment(t *testing.T) {
	cfg, err := tracingConfig(envOf(nil), "order-workflow", "workflow-a")
	require.NoError(t, err)
	require.False(t, cfg.On(), "no endpoint: no exporter")
	require.Equal(t, "order-workflow", cfg.ServiceName, "the process kind by default")
	require.Equal(t, "workflow-a", cfg.NodeName)

	cfg, err = tracingConfig(envOf(map[string]string{
		EnvOTLPEndpoint:       " http://collector:4318 ",
		EnvOTLPProtocol:       "http/protobuf",
		EnvOTLPTracesProtocol: "grpc",
		EnvServiceName:        "shop",
		EnvResourceAttributes: "deployment.environment=staging",
	}), "order-workflow", "workflow-a")
	require.NoError(t, err)
	require.True(t, cfg.On())
	require.Equal(t, telemetry.TracingConfig{
		Endpoint: "http://collector:4318", Protocol: telemetry.ProtocolGRPC, ServiceName: "shop",
		NodeName: "workflow-a", ResourceAttributes: "deployment.environment=staging",
	}, cfg, "the signal's own protocol wins")

	for _, off := range []map[string]string{
		{EnvOTLPEndpoint: "http://collector:4318", EnvSDKDisabled: "TRUE"},
		{EnvOTLPTracesEndpoint: "http://collector:4318/v1/traces", EnvTracesExporter: "none"},
	} {
		cfg, err = tracingConfig(envOf(off), "commerce-api", "api-a")
		require.NoError(t, err)
		require.False(t, cfg.On(), "%v", off)
	}
	_, err = tracingConfig(envOf(map[string]string{EnvTracesExporter: "zipkin"}), "commerce-api", "api-a")
	require.Error(t, err, "an exporter this process does not have")
}
