package admintest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

type schemaReport struct {
	Level struct {
		Level int `json:"level"`
	} `json:"level"`
	Members []struct {
		Node       string `json:"node"`
		Schema     int    `json:"schema"`
		Advertised bool   `json:"advertised"`
		Workflow   bool   `json:"workflow"`
	} `json:"members"`
	Readable int `json:"readable"`
}

// Real members advertise what they read: every workflow member its
// build's schema, counted as live; the APIs nothing. The level starts at
// the base schema; a raise to it changes nothing, and a raise past what
// the members read is refused, naming them, with nothing changed.
func TestMembersAdvertiseTheSchemaTheyRead(t *testing.T) {
	e := start(t)
	api := e.admin[localcluster.APIA]
	var rep schemaReport
	require.Eventually(t, func() bool {
		code, out := e.cli("schema", "-api", api, "-json")
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			return false
		}
		live := 0
		for _, m := range rep.Members {
			if m.Workflow && m.Advertised && m.Schema == workflow.SchemaVersion {
				live++
			}
		}
		return live == len(localcluster.WorkflowNodes)
	}, 30*time.Second, 200*time.Millisecond, "every workflow member advertises schema %d: %+v", workflow.SchemaVersion, rep)
	require.Equal(t, 1, rep.Level.Level)
	require.Equal(t, workflow.SchemaVersion, rep.Readable)
	for _, m := range rep.Members {
		for _, a := range localcluster.APINodes {
			if m.Node == a {
				require.False(t, m.Workflow, "%s hosts no orders", a)
				require.Zero(t, m.Schema, "%s advertises nothing", a)
			}
		}
	}

	code, out := e.cli("schema", "raise", "-api", api, "-to", "1", "-by", "admintest")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "unchanged: compatibility level 1")

	code, out = e.cli("schema", "raise", "-api", api, "-to", "2", "-by", "admintest")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "FAILED_PRECONDITION")
	for _, n := range localcluster.WorkflowNodes {
		require.Contains(t, out, n+" reads up to 1")
	}
	code, out = e.cli("schema", "-api", e.admin[localcluster.APIB])
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "compatibility level 1 (never raised)")
	t.Logf("admin schema:\n%s", out)
}
