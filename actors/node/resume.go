package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/shoppingmall-go/shoppingmall/actors/contracts"
	"github.com/shoppingmall-go/shoppingmall/actors/grain"
	"github.com/shoppingmall-go/shoppingmall/cluster/compat"
	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore"
	"github.com/shoppingmall-go/shoppingmall/readmodel"
)

// resumeScanLimit bounds the active orders one resume looks at.
const resumeScanLimit = 10000

// ResumeReadable continues, once, the orders that waited for a build of
// this member's event schema: after a rollback below the compatibility
// level, an order holding a newer schema than every live workflow member
// reads answers 503 VERSION_UNSUPPORTED and, without a client's next
// command, would wait for good. A member that reads more than every
// other live workflow member runs this when it joins (the order-workflow
// main does), so such an order continues without an operator: every
// non-terminal order of the read model's active index that no member
// owns and whose highest schema only this member's build reads is
// continued through the cluster (placement sends it to a member that
// reads it). Orders of the base schema, and owned orders (Ready, Moving,
// Creating: their owner drives them, or a takeover is the operator's),
// are left alone. In a cluster of one build it reads two small keys and
// nothing else. It returns how many orders it continued.
func (w *Workflow) ResumeReadable(ctx context.Context) (int, error) {
	st := w.stores
	active, ok := st.ReadModel.(interface {
		Stuck(ctx context.Context, olderThan time.Duration, now time.Time, limit int) ([]readmodel.StuckOrder, error)
	})
	schemaOf, ok2 := st.Events.(eventstore.SchemaReader)
	if !ok || !ok2 {
		return 0, nil
	}
	schemas, err := st.Location.MemberSchemas(ctx)
	if err != nil {
		return 0, err
	}
	self := w.Member.ID()
	own, others := schemas[self], location.BaseSchema
	for _, id := range w.Member.Lookup.EligibleIDs(grain.KindName) {
		if id != self {
			others = max(others, compat.Reads(schemas, id))
		}
	}
	if own <= others {
		return 0, nil
	}
	orders, err := active.Stuck(ctx, 0, time.Now(), resumeScanLimit)
	if err != nil {
		return 0, err
	}
	resumed := 0
	for _, o := range orders {
		rec, err := st.Location.Get(ctx, grain.KindName, o.OrderID)
		if err != nil {
			return resumed, err
		}
		if rec.Owner != "" && rec.Status != location.Missing {
			continue
		}
		need, err := schemaOf.HighestSchema(ctx, o.OrderID)
		if err != nil {
			return resumed, err
		}
		if need <= others || need > own {
			continue
		}
		res, err := w.Client.ContinueOrderWorkflow(ctx, &contracts.ContinueOrderWorkflowReq{
			OrderId: o.OrderID, SourceCommandId: "schema-resume-" + self + "-" + o.OrderID,
		})
		if err != nil {
			w.log.Warn("an order waiting for a build of its schema did not continue", slog.String("order", o.OrderID),
				slog.Int("schema", need), slog.Any("error", err))
			continue
		}
		resumed++
		w.log.Info("continued an order that waited for a build of its schema", slog.String("order", o.OrderID),
			slog.Int("schema", need), slog.String("status", res.GetState().GetStatus().String()))
	}
	return resumed, nil
}
