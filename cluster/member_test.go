package cluster

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// Info is the zero Level; it must be choosable, not read as "unset".
func TestFrameworkLogLevel(t *testing.T) {
	require.Equal(t, slog.LevelWarn, Config{}.frameworkLevel())
	require.Equal(t, slog.LevelInfo, Config{FrameworkLogLevel: slog.LevelInfo}.frameworkLevel())
	require.Equal(t, slog.LevelDebug, Config{FrameworkLogLevel: slog.LevelDebug}.frameworkLevel())
}
