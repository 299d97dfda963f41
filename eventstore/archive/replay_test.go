package archive_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/actors/commerce"
	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow"
	"github.com/shoppingmall-go/shoppingmall/actors/workflow/workflowtest"
	"github.com/shoppingmall-go/shoppingmall/eventstore/archive"
	"github.com/shoppingmall-go/shoppingmall/runner/pgserver/pgtest"
)

// The events alone rebuild the state (spec §7.4), from the archive as
// from the hot stream: orders run to Confirmed and to Failed by the
// workflow, their streams and final records archived and read back, fold
// to the very state the hot stream folds to, which is the read model's
// record; and the archived final state is that record, byte for byte.
func TestAnArchivedStreamReplaysToTheHotStreamsState(t *testing.T) {
	a := open(t, pgtest.Start(t), archive.Config{})
	ctx := context.Background()
	d := workflowtest.NewDeps()
	require.NoError(t, d.Inventory.SetStock(ctx, "SKU-1", 10))
	require.NoError(t, d.Payment.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-ok", Approve: true}))
	require.NoError(t, d.Payment.PutMethod(ctx, commerce.PaymentMethod{MethodID: "pm-no", Reason: "card declined"}))
	svc, err := workflow.New(d.Config)
	require.NoError(t, err)

	for id, want := range map[string]contracts.OrderStatus{
		"ord-confirmed": contracts.OrderStatus_Confirmed,
		"ord-failed":    contracts.OrderStatus_Failed,
	} {
		method := "pm-ok"
		if want == contracts.OrderStatus_Failed {
			method = "pm-no"
		}
		o, err := svc.Open(ctx, id, 1)
		require.NoError(t, err)
		_, _, err = svc.Start(ctx, o, d.StartReq(id, "key-"+id, method))
		require.NoError(t, err)
		for range 10 {
			progressed, err := svc.Step(ctx, o)
			require.NoError(t, err)
			if !progressed {
				break
			}
		}
		record, _, err := d.ReadModel.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, record.GetStatus())
		final, err := proto.Marshal(record)
		require.NoError(t, err)
		hot := d.Events.Stream(id)
		require.NoError(t, a.Put(ctxT(t), archive.Record{
			OrderID: id, Status: record.GetStatus().String(), Generation: o.Generation(),
			TerminalAtUnixMs: record.GetUpdatedAtUnixMs(), FinalState: final, Events: hot,
		}))

		got, err := a.Get(ctxT(t), id)
		require.NoError(t, err)
		fromHot, err := workflow.Replay(id, hot)
		require.NoError(t, err)
		fromArchive, err := workflow.Replay(id, got.Events)
		require.NoError(t, err)
		require.True(t, proto.Equal(fromHot, fromArchive), "%s: the archive folds to\n%v\nthe hot stream to\n%v", id, fromArchive, fromHot)
		require.True(t, proto.Equal(record, fromArchive), "%s: the fold is the read model's record", id)
		require.Equal(t, final, got.FinalState)
	}
}
