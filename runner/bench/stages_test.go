package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/runner/redisserver/redistest"
)

// The legs come from the streams' two clocks, against a real server: an
// order whose start waited 40 ms before its owner decided it and whose
// steps took 30 ms is split so, and the slowest by each measure are the
// ones read.
func TestStagesSplitTheSlowestOrdersFromTheirStreams(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	phaseStart := time.UnixMilli(1_800_000_000_000)
	var rs []orderResult
	for i := range 200 {
		id := fmt.Sprintf("o%d", i)
		due := phaseStart.Add(time.Duration(i) * 10 * time.Millisecond)
		// decided +1 ms, recorded +2, terminal +5, 201 at +3, answer +6
		decided, started, terminal, ack, answer := 1, 2, 5, 3, 6
		if i == 7 { // slow before its owner and in its steps
			decided, started, terminal, ack, answer = 40, 42, 72, 43, 75
		}
		at := func(ms int) time.Time { return due.Add(time.Duration(ms) * time.Millisecond) }
		key := eventstore.DefaultKeyPrefix + "{" + id + "}:stream"
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", at(started).UnixMilli()),
			Values: []any{"eventType", "OrderStartedEvent", "createdAtUnixMs", at(decided).UnixMilli()}}).Err())
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", at(terminal).UnixMilli()),
			Values: []any{"eventType", "OrderConfirmedEvent", "createdAtUnixMs", at(terminal).UnixMilli()}}).Err())
		rs = append(rs, orderResult{OrderID: id, Start: due.Sub(phaseStart), StartLat: at(ack).Sub(due),
			E2E: at(answer).Sub(due), Status: "Confirmed", Path: "success"})
	}
	sts := readStages(ctx, rdb, rs, phaseStart)
	require.Len(t, sts, 2)
	for _, st := range sts {
		require.Empty(t, st.Err)
		require.Equal(t, 2, st.Orders, "1 % of 200")
		require.Equal(t, 2, st.Read)
		require.Equal(t, 40.0, st.MaxMs["beforeOwner"], st.By)
		require.Equal(t, 30.0, st.MaxMs["steps"], st.By)
		require.Equal(t, 3.0, st.MaxMs["notice"], st.By)
		require.Equal(t, 2.0, st.MaxMs["startCommit"], st.By)
		require.Equal(t, 1.0, st.MaxMs["startAck"], st.By)
	}
	// by StartOrder: 43 + 3 ms, of which beforeOwner 40 + 1
	require.InDelta(t, 41.0/46, sts[0].Share["beforeOwner"], 1e-9)
	require.NotContains(t, sts[0].Share, "steps")
	// by start → terminal: 75 + 6 ms, of which steps 30 + 3
	require.InDelta(t, 33.0/81, sts[1].Share["steps"], 1e-9)
	require.Contains(t, formatStages(sts[1]), "beforeOwner")
}
