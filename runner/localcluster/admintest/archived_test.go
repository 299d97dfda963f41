package admintest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/order"
	"github.com/shoppingmall-go/shoppingmall/runner/client"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
)

// archivedOrder is one order of the test, by its end.
type archivedOrder struct {
	name, key, cart, method string
	want                    contracts.OrderStatus
	id                      string
}

// snapshot is every Redis key that holds a part of the order, with its
// value, as a string each: what "writes nothing" is checked against.
func snapshot(t *testing.T, rdb *redis.Client, id string) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	for _, pat := range []string{"*{" + id + "}*", "*{" + order.ReservationID(id) + "}*", "*{" + order.PaymentID(id) + "}*"} {
		keys, err := rdb.Keys(ctx, pat).Result()
		require.NoError(t, err)
		for _, k := range keys {
			v, err := rdb.Dump(ctx, k).Result()
			require.NoError(t, err, k)
			out[k] = v
		}
	}
	return out
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// archivedTimeline is what the test reads of the timeline's reply.
type archivedTimeline struct {
	Authority struct {
		Status     string `json:"status"`
		Generation int64  `json:"generation"`
	} `json:"authority"`
	State *struct {
		Status string `json:"status"`
	} `json:"state"`
	StateVersion int64 `json:"stateVersion"`
	Entries      []struct {
		Kind      string `json:"kind"`
		EventType string `json:"eventType"`
		Version   int64  `json:"version"`
	} `json:"entries"`
	Archived *struct {
		ArchivedAtUnixMs int64 `json:"archivedAtUnixMs"`
		Version          int64 `json:"version"`
	} `json:"archived"`
}

// An archived order answers every question as before, against real
// processes: a cluster whose workflows archive finished orders one
// second after their end (once their grains passivated), into a real
// PostgreSQL. For a confirmed order,
// one failed for stock and one failed for payment, once each has left
// Redis but for its compact record: GET is its final state; a repeated
// start with its key is 200 with the same order, another request with
// that key 422; continue is its final state; rebuild-projection
// re-derives it from the archive's events; the timeline is the archived
// history, marked archived; relocate is refused. None of these writes a
// byte of the order's keys (no Location record, no generation). An id
// that never existed is still 404 and leaves nothing. With PostgreSQL
// SIGKILLed, the answers from the compact record stay, and the two that
// need the archive are 503 STORE_UNAVAILABLE; once it is back, they
// answer again.
func TestAnArchivedOrderAnswersEveryQuestionAsBefore(t *testing.T) {
	e := startWith(t, func(c *localcluster.Config) {
		c.Archive, c.Retention, c.ArchiveEvery = true, time.Second, 250*time.Millisecond
		// An order is archived once its grain passivated.
		c.WorkflowIdleTimeout = 500 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opt, err := redis.ParseURL(e.c.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	api := e.public[localcluster.APIA]
	other := e.public[localcluster.APIB]

	orders := []*archivedOrder{
		{name: "confirmed", key: "archived-confirmed", cart: cartID, method: methodOK, want: contracts.OrderStatus_Confirmed},
		{name: "no stock", key: "archived-no-stock", cart: cartScarce, method: methodOK, want: contracts.OrderStatus_Failed},
		{name: "declined", key: "archived-declined", cart: cartID, method: methodDeclined, want: contracts.OrderStatus_Failed},
	}
	startReq := func(o *archivedOrder) *contracts.StartOrderReq {
		return &contracts.StartOrderReq{CartId: o.cart, ShippingAddressId: addressID, PaymentMethodId: o.method, IdempotencyKey: o.key}
	}
	for _, o := range orders {
		res, rep, err := api.StartOrder(ctx, startReq(o))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, rep.Status, "%s: %s", o.name, rep)
		o.id = res.GetOrderId()
		st, done, rep, err := api.WaitTerminal(ctx, o.id, 20*time.Second)
		require.NoError(t, err)
		require.True(t, done, "%s: %s", o.name, rep)
		require.Equal(t, o.want, st.GetStatus(), o.name)
	}
	for _, o := range orders {
		require.Eventually(t, func() bool {
			archived, err := rdb.HExists(ctx, "sm:es:{"+o.id+"}:fence", "archived").Result()
			return err == nil && archived
		}, 60*time.Second, 100*time.Millisecond, "%s: archived by the workflows' archivers", o.name)
		require.Zero(t, rdb.Exists(ctx, "sm:es:{"+o.id+"}:stream", "sm:rm:{"+o.id+"}", "sm:loc:order:{"+o.id+"}").Val(),
			"%s: its hot keys left Redis", o.name)
	}

	before := map[string]map[string]string{}
	for _, o := range orders {
		before[o.id] = snapshot(t, rdb, o.id)
		t.Logf("%s %s: compact record %v", o.name, o.id, keysOf(before[o.id]))
	}
	unchanged := func(when string) {
		t.Helper()
		for _, o := range orders {
			require.Equal(t, before[o.id], snapshot(t, rdb, o.id), "%s, %s: nothing written to the archived order", o.name, when)
		}
	}

	for _, o := range orders {
		st, rep, err := api.GetOrder(ctx, o.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s GET: %s", o.name, rep)
		require.Equal(t, o.want, st.GetStatus())
		t.Logf("%s GET /orders/%s -> %d %s", o.name, o.id, rep.Status, rep.Body)

		res, rep, err := other.StartOrder(ctx, startReq(o))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s: a repeated start: %s", o.name, rep)
		require.Equal(t, o.id, res.GetOrderId(), "%s: the same order", o.name)
		require.Equal(t, o.want, res.GetState().GetStatus())
		t.Logf("%s POST /orders (same key) -> %d %s", o.name, rep.Status, rep.Body)

		reused := startReq(o)
		reused.ShippingAddressId = "addr-elsewhere"
		_, rep, err = api.StartOrder(ctx, reused)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnprocessableEntity, rep.Status, "%s: the key with another request: %s", o.name, rep)
		t.Logf("%s POST /orders (same key, other address) -> %s", o.name, rep)

		st, rep, err = api.Continue(ctx, o.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s continue: %s", o.name, rep)
		require.Equal(t, o.want, st.GetStatus())
		t.Logf("%s POST /orders/%s/continue -> %d %s", o.name, o.id, rep.Status, rep.Body)

		st, rep, err = other.Rebuild(ctx, o.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s rebuild: %s", o.name, rep)
		require.Equal(t, o.want, st.GetStatus())
		t.Logf("%s POST /orders/%s/rebuild-projection -> %d %s", o.name, o.id, rep.Status, rep.Body)

		got := e.call("GET", e.admin[localcluster.APIA]+"/admin/orders/"+o.id+"/timeline", e.bearer(), "")
		require.Equal(t, http.StatusOK, got.status, "%s timeline: %s", o.name, got.body)
		var tl archivedTimeline
		require.NoError(t, json.Unmarshal(got.body, &tl))
		require.NotNil(t, tl.Archived, "%s: the timeline is marked archived", o.name)
		require.Equal(t, "Archived", tl.Authority.Status)
		require.Positive(t, tl.Authority.Generation, "the generation it was sealed at")
		require.Equal(t, o.want.String(), tl.State.Status)
		events := 0
		for _, en := range tl.Entries {
			if en.Kind == "event" {
				events++
			}
		}
		require.EqualValues(t, tl.Archived.Version, events, "%s: the whole history, from the archive", o.name)
		require.Equal(t, tl.Archived.Version, tl.StateVersion)
		code, text := e.cli("timeline", "-api", e.admin[localcluster.APIB], "-order", o.id)
		require.Zero(t, code, text)
		require.Contains(t, text, "archived at")
		require.Contains(t, text, "authority Archived at generation")
		t.Logf("%s admin timeline:\n%s", o.name, text)

		got = e.call("POST", e.admin[localcluster.APIA]+"/admin/orders/"+o.id+"/relocate", e.bearer(), "{}")
		require.Equal(t, http.StatusConflict, got.status, "%s relocate: %s", o.name, got.body)
		require.Equal(t, "FAILED_PRECONDITION", got.code())
	}
	unchanged("after every question")

	// An id that never existed.
	never := "ord-never-" + fmt.Sprint(time.Now().UnixNano())
	_, rep, err := api.GetOrder(ctx, never)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, rep.Status, rep.String())
	_, rep, err = api.Continue(ctx, never)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, rep.Status, rep.String())
	_, rep, err = api.Rebuild(ctx, never)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, rep.Status, rep.String())
	require.Empty(t, snapshot(t, rdb, never), "an unknown id leaves nothing behind")

	// The archive is down.
	require.NoError(t, e.c.KillArchive())
	for _, o := range orders {
		st, rep, err := api.GetOrder(ctx, o.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s GET, archive down: %s", o.name, rep)
		require.Equal(t, o.want, st.GetStatus())
		res, rep, err := api.StartOrder(ctx, startReq(o))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s start, archive down: %s", o.name, rep)
		require.Equal(t, o.id, res.GetOrderId())
		st, rep, err = api.Continue(ctx, o.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, rep.Status, "%s continue, archive down: %s", o.name, rep)
		require.Equal(t, o.want, st.GetStatus())

		_, rep, err = api.Rebuild(ctx, o.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, rep.Status, "%s rebuild, archive down: %s", o.name, rep)
		require.Equal(t, "STORE_UNAVAILABLE", rep.Error.Reason)
		t.Logf("%s rebuild-projection, archive down -> %s", o.name, rep)
		got := e.call("GET", e.admin[localcluster.APIA]+"/admin/orders/"+o.id+"/timeline", e.bearer(), "")
		require.Equal(t, http.StatusServiceUnavailable, got.status, "%s timeline, archive down: %s", o.name, got.body)
		p, err := client.DecodeError(got.body)
		require.NoError(t, err)
		require.Equal(t, "STORE_UNAVAILABLE", p.Reason)
		require.True(t, strings.Contains(p.Detail, "archive"), p.Detail)
		t.Logf("%s timeline, archive down -> %d %s", o.name, got.status, got.body)
	}
	unchanged("with the archive down")

	require.NoError(t, e.c.RestartArchive(ctx))
	for _, o := range orders {
		require.Eventually(t, func() bool {
			st, rep, err := api.Rebuild(ctx, o.id)
			return err == nil && rep.Status == http.StatusOK && st.GetStatus() == o.want
		}, 30*time.Second, 200*time.Millisecond, "%s: rebuild answers once the archive is back", o.name)
	}
	unchanged("once the archive is back")

	// An operator deleted an archived order's idempotency mapping: a
	// start with its key asks for the order's grain, whose activation the
	// Location Store refuses, reading the order's seal mark (nor does the
	// key's reservation take a creation lock for it). The start is
	// refused as the archived order's (409), and leaves nothing: no
	// mapping, no Location record, no generation.
	o := orders[0]
	mapping := "sm:cs:idem:order:{" + o.id + "}"
	require.NoError(t, rdb.Del(ctx, mapping).Err())
	delete(before[o.id], mapping)
	_, rep, err = api.StartOrder(ctx, startReq(o))
	require.NoError(t, err)
	t.Logf("%s POST /orders, its mapping deleted -> %s", o.name, rep)
	require.Equal(t, http.StatusConflict, rep.Status, rep.String())
	require.Equal(t, "FAILED_PRECONDITION", rep.Error.Code)
	unchanged("after a start whose mapping was deleted")
}
