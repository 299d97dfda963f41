package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// liveSchema is the wiring's SchemaControl over a real Location Store,
// with the live workflow members given by the test.
type liveSchema struct {
	store compat.Store
	live  []string
}

func (c *liveSchema) SchemaStatus(ctx context.Context) (compat.Report, error) {
	return compat.Status(ctx, c.store, c.live)
}

func (c *liveSchema) RaiseSchema(ctx context.Context, to int, by string) (location.SchemaLevel, bool, error) {
	return compat.Raise(ctx, c.store, c.live, to, by, false, time.UnixMilli(1_765_000_000_000))
}

func newSchemaEnv(t *testing.T, c redis.UniversalClient) (*env, *location.Redis, *liveSchema) {
	t.Helper()
	st, err := location.NewRedis(location.Config{Client: c})
	require.NoError(t, err)
	ctl := &liveSchema{store: st}
	e := newEnv(t, withAdmin(), func(cfg *Config) { cfg.Mounts = append(cfg.Mounts, SchemaAdmin{Control: ctl}) })
	return e, st, ctl
}

// The operator's view and raise of the level: the report, a raise every
// live workflow member reads (recorded with who), a repeat, and each
// refusal answered 409 FAILED_PRECONDITION in the operator's words, with
// nothing changed.
func TestAdminSchema_ReportRaiseAndRefusals(t *testing.T) {
	c := redistest.Start(t).Client()
	t.Cleanup(func() { _ = c.Close() })
	e, st, ctl := newSchemaEnv(t, c)
	ctx := t.Context()
	require.NoError(t, st.PutMember(ctx, "m-a", "workflow-a", 2))
	require.NoError(t, st.PutMember(ctx, "m-b", "workflow-b", 1))
	require.NoError(t, st.PutMember(ctx, "m-api", "api-a", 0))
	ctl.live = []string{"m-a", "m-b"}

	w := e.admin(http.MethodGet, "/admin/schema", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rep compat.Report
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rep))
	require.Equal(t, 1, rep.Level.Level)
	require.Equal(t, 1, rep.Readable)
	require.Len(t, rep.Members, 3)
	require.Equal(t, "workflow-a", rep.Members[0].Node)

	w = e.admin(http.MethodPost, "/admin/schema/raise", `{"to":2,"by":"alice"}`)
	require.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	p := decodeError(t, w)
	require.Equal(t, CodeFailedPrecondition, p.Code)
	require.Contains(t, p.Message, "workflow-b reads up to 1")

	ctl.live = []string{"m-a"} // workflow-b stopped
	w = e.admin(http.MethodPost, "/admin/schema/raise", `{"to":2,"by":"alice"}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var raised SchemaRaiseReply
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &raised))
	require.True(t, raised.Raised)
	require.Equal(t, location.SchemaLevel{Level: 2, RaisedBy: "alice", RaisedAtUnixMs: 1_765_000_000_000, From: 1}, raised.Level)

	w = e.admin(http.MethodPost, "/admin/schema/raise", `{"to":2}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &raised))
	require.False(t, raised.Raised, "a repeat changes nothing")
	require.Equal(t, "alice", raised.Level.RaisedBy)

	w = e.admin(http.MethodPost, "/admin/schema/raise", `{"to":1}`)
	require.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	require.Contains(t, decodeError(t, w).Message, "the compatibility level is 2 and never drops")

	ctl.live = nil
	w = e.admin(http.MethodPost, "/admin/schema/raise", `{"to":3}`)
	require.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	require.Contains(t, decodeError(t, w).Message, "no live workflow member")

	for body, field := range map[string]string{`{"to":0}`: "to", `{"by":"x"}`: "to", `{"to":2,"by":"` + strings.Repeat("x", 200) + `"}`: "by"} {
		w = e.admin(http.MethodPost, "/admin/schema/raise", body)
		require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
		require.Equal(t, field, decodeError(t, w).Field)
	}
	w = e.admin(http.MethodPost, "/admin/schema/raise", `{"to":2,"extra":1}`)
	require.Equal(t, http.StatusBadRequest, w.Code, "unknown fields are refused")

	l, err := st.SchemaLevel(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, l.Level, "no refusal changed the level")
}

// A store that does not answer is 503 STORE_UNAVAILABLE, never a 409 or
// a 500.
func TestAdminSchema_StoreDownIsUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	e, _, ctl := newSchemaEnv(t, c)
	ctl.live = []string{"m-a"}
	for _, r := range []struct{ method, path, body string }{
		{http.MethodGet, "/admin/schema", ""},
		{http.MethodPost, "/admin/schema/raise", `{"to":2}`},
	} {
		w := e.admin(r.method, r.path, r.body)
		require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
		require.Equal(t, ReasonStoreUnavailable, decodeError(t, w).Reason)
	}
}
