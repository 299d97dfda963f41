package readmodel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// t0 is the projections' clock in these tests; Stuck gets its "now"
// explicitly, so no test waits for time to pass.
var t0 = time.UnixMilli(1_700_000_000_000)

func withStatus(orderID string, s contracts.OrderStatus, at time.Time) *contracts.OrderState {
	return &contracts.OrderState{OrderId: orderID, Status: s, UpdatedAtUnixMs: at.UnixMilli()}
}

func stuckIDs(t *testing.T, s *readmodel.Redis, olderThan time.Duration, now time.Time) []string {
	t.Helper()
	got, err := s.Stuck(ctxT(t), olderThan, now, 0)
	require.NoError(t, err)
	ids := []string{}
	for _, o := range got {
		ids = append(ids, o.OrderID)
	}
	return ids
}

// indexed reports whether any active-index set of the default prefix
// holds the order: the index, read from Redis itself.
func indexed(t *testing.T, c *redis.Client, orderID string) bool {
	t.Helper()
	ctx := ctxT(t)
	keys, err := c.Keys(ctx, readmodel.DefaultKeyPrefix+"active:*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		_, err := c.ZScore(ctx, k, orderID).Result()
		if err == nil {
			return true
		}
		require.ErrorIs(t, err, redis.Nil)
	}
	return false
}

func TestStuckListsNonTerminalOrdersOlderThanTheAge(t *testing.T) {
	s, c := setup(t)
	mustApply(t, s, "o-old", 1, withStatus("o-old", contracts.OrderStatus_InventoryReserved, t0))
	mustApply(t, s, "o-new", 1, withStatus("o-new", contracts.OrderStatus_Created, t0.Add(50*time.Second)))
	mustApply(t, s, "o-done", 3, withStatus("o-done", contracts.OrderStatus_Confirmed, t0))
	mustApply(t, s, "o-failed", 2, withStatus("o-failed", contracts.OrderStatus_Failed, t0))

	require.Equal(t, []string{"o-old"}, stuckIDs(t, s, time.Minute, t0.Add(90*time.Second)))
	require.Equal(t, []string{"o-old", "o-new"}, stuckIDs(t, s, time.Minute, t0.Add(2*time.Minute)), "oldest first")
	require.Empty(t, stuckIDs(t, s, time.Minute, t0.Add(30*time.Second)))
	require.False(t, indexed(t, c, "o-done"), "a terminal projection is never indexed")
	require.False(t, indexed(t, c, "o-failed"))

	got, err := s.Stuck(ctxT(t), time.Minute, t0.Add(2*time.Minute), 0)
	require.NoError(t, err)
	require.Equal(t, contracts.OrderStatus_InventoryReserved, got[0].State.GetStatus())
	require.Equal(t, int64(1), got[0].Version)

	limited, err := s.Stuck(ctxT(t), time.Minute, t0.Add(2*time.Minute), 1)
	require.NoError(t, err)
	require.Len(t, limited, 1)
	require.Equal(t, "o-old", limited[0].OrderID)
}

func TestAnOrderLeavesTheIndexOnceTerminal(t *testing.T) {
	s, c := setup(t)
	mustApply(t, s, "o-1", 1, withStatus("o-1", contracts.OrderStatus_Created, t0))
	mustApply(t, s, "o-1", 2, withStatus("o-1", contracts.OrderStatus_InventoryReserved, t0.Add(time.Second)))
	require.True(t, indexed(t, c, "o-1"))
	require.Equal(t, []string{"o-1"}, stuckIDs(t, s, time.Minute, t0.Add(time.Hour)))

	mustApply(t, s, "o-1", 4, withStatus("o-1", contracts.OrderStatus_Confirmed, t0.Add(2*time.Second)))
	require.False(t, indexed(t, c, "o-1"))
	require.Empty(t, stuckIDs(t, s, time.Minute, t0.Add(time.Hour)))

	// A late, refused write of an older projection does not bring it back.
	mustIgnore(t, s, "o-1", 3, withStatus("o-1", contracts.OrderStatus_PaymentAuthorized, t0.Add(time.Second)))
	require.False(t, indexed(t, c, "o-1"))
}

func TestDeleteDropsTheOrderFromTheIndex(t *testing.T) {
	s, c := setup(t)
	mustApply(t, s, "o-del", 1, withStatus("o-del", contracts.OrderStatus_Created, t0))
	require.True(t, indexed(t, c, "o-del"))
	require.NoError(t, s.Delete(ctxT(t), "o-del"))
	require.False(t, indexed(t, c, "o-del"))
}

// The record is the truth: index entries it contradicts are dropped or
// ignored by the query itself.
func TestStuckChecksEveryCandidateAgainstItsRecord(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	// An entry without a record (its write raced a delete).
	require.NoError(t, s.IndexActive(ctx, "o-ghost", withStatus("o-ghost", contracts.OrderStatus_Created, t0)))
	// An entry left behind by a terminal projection (a lost ZREM).
	mustApply(t, s, "o-term", 5, withStatus("o-term", contracts.OrderStatus_Confirmed, t0))
	require.NoError(t, s.IndexActive(ctx, "o-term", withStatus("o-term", contracts.OrderStatus_PaymentAuthorized, t0)))
	// An entry older than its record (a lost index update): the record was
	// written later without the index.
	mustApply(t, s, "o-lag", 1, withStatus("o-lag", contracts.OrderStatus_Created, t0))
	raw, err := proto.Marshal(withStatus("o-lag", contracts.OrderStatus_InventoryReserved, t0.Add(90*time.Second)))
	require.NoError(t, err)
	require.NoError(t, c.HSet(ctx, readmodel.DefaultKeyPrefix+"{o-lag}", "version", 2, "state", raw).Err())

	require.Empty(t, stuckIDs(t, s, time.Minute, t0.Add(2*time.Minute)))
	require.False(t, indexed(t, c, "o-ghost"), "an entry without a record is dropped")
	require.False(t, indexed(t, c, "o-term"), "an entry of a terminal record is dropped")
	require.Equal(t, []string{"o-lag"}, stuckIDs(t, s, time.Minute, t0.Add(3*time.Minute)),
		"the lagging entry now carries its record's time")
}

func TestIndexScoreNeverGoesBack(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	require.NoError(t, s.IndexActive(ctx, "o-gt", withStatus("o-gt", contracts.OrderStatus_InventoryReserved, t0.Add(time.Minute))))
	require.NoError(t, s.IndexActive(ctx, "o-gt", withStatus("o-gt", contracts.OrderStatus_Created, t0)))
	keys, err := c.Keys(ctx, readmodel.DefaultKeyPrefix+"active:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	score, err := c.ZScore(ctx, keys[0], "o-gt").Result()
	require.NoError(t, err)
	require.Equal(t, float64(t0.Add(time.Minute).UnixMilli()), score)
}

func TestRebuildActiveIndexFromAScanOfTheRecords(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	var want []string
	for i, st := range []contracts.OrderStatus{contracts.OrderStatus_Created, contracts.OrderStatus_InventoryReserved,
		contracts.OrderStatus_PaymentAuthorized, contracts.OrderStatus_Confirmed, contracts.OrderStatus_Failed} {
		id := "o-rb-" + st.String()
		mustApply(t, s, id, int64(i+1), withStatus(id, st, t0.Add(time.Duration(i)*time.Second)))
		if !readmodel.Terminal(st) {
			want = append(want, id)
		}
	}
	// Lose the whole index.
	keys, err := c.Keys(ctx, readmodel.DefaultKeyPrefix+"active:*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, c.Del(ctx, keys...).Err())
	require.Empty(t, stuckIDs(t, s, time.Minute, t0.Add(time.Hour)))

	n, err := s.RebuildActiveIndex(ctx)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	require.Equal(t, want, stuckIDs(t, s, time.Minute, t0.Add(time.Hour)))
	// Repeating it changes nothing.
	n, err = s.RebuildActiveIndex(ctx)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	require.Equal(t, want, stuckIDs(t, s, time.Minute, t0.Add(time.Hour)))
}

func TestStuckIndexSpreadsOverShardsWithOneHashTagEach(t *testing.T) {
	s, c := setup(t)
	ctx := ctxT(t)
	for i := range 64 {
		id := fmt.Sprintf("o-shard-%d", i)
		mustApply(t, s, id, 1, withStatus(id, contracts.OrderStatus_Created, t0))
	}
	keys, err := c.Keys(ctx, readmodel.DefaultKeyPrefix+"active:*").Result()
	require.NoError(t, err)
	require.Greater(t, len(keys), 1, "one set would be one hot slot")
	require.LessOrEqual(t, len(keys), readmodel.ActiveShards)
	for _, k := range keys {
		require.Regexp(t, `^sm:rm:active:\{[0-9]+\}$`, k, "each shard is its own hash tag, valid on Redis Cluster")
	}
}

func TestStuckRefusesANegativeAge(t *testing.T) {
	s, _ := setup(t)
	_, err := s.Stuck(context.Background(), -time.Second, t0, 0)
	require.Error(t, err)
}
