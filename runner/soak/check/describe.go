package check

import (
	"fmt"
	"strings"
)

// Describe renders what the history holds about one order, for the
// operator reading a failed run: its stream with the writers' fences, its
// ownership history, projection, module records and the client's answers.
func (h *History) Describe(orderID string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "order %s\n", orderID)
	rec := h.Orders[orderID]
	if rec == nil {
		b.WriteString("  no stream\n")
	} else {
		for _, e := range rec.Stream {
			fmt.Fprintf(&b, "  v%-2d %-32s fence %d/%d at %d id %s\n", e.Version, e.EventType, e.FenceGeneration, e.FenceEpoch, e.CreatedAtUnixMs, e.EventID)
		}
		for _, o := range rec.Ownership {
			fmt.Fprintf(&b, "  owner %-10s %-12s gen %d at %d\n", o.Kind, o.Member, o.Generation, o.AtUnixMs)
		}
		if rec.LocationGeneration > 0 {
			fmt.Fprintf(&b, "  location generation %d\n", rec.LocationGeneration)
		}
		if rm := rec.ReadModel; rm != nil {
			fmt.Fprintf(&b, "  read model %s v%d %s\n", rm.Status, rm.Version, rm.State)
		} else {
			b.WriteString("  no read model\n")
		}
	}
	if m := h.Modules[orderID]; m != nil {
		fmt.Fprintf(&b, "  inventory: records %d reserved %t refused %t released %t lines %v calls %d/%d\n",
			m.Reservations, m.Reserved, m.ReservationFailed, m.Released, m.Lines, m.ReserveCalls, m.ReleaseCalls)
		fmt.Fprintf(&b, "  payment: records %d authorized %t %s %d %s called %t calls %d\n",
			m.Authorizations, m.Authorized, m.PaymentID, m.PaymentAmount, m.PaymentCurrency, m.PaymentCalled, m.AuthorizeCalls)
	}
	for _, a := range h.Client {
		if a.OrderID != orderID {
			continue
		}
		fmt.Fprintf(&b, "  client %-8s key %s via %s: %d %s %s %s (sent %d, answered %d)\n",
			a.Op, a.Key, a.API, a.StatusCode, a.OrderStatus, a.ErrorCode, a.ErrorReason, a.SentAtUnixMs, a.AtUnixMs)
	}
	return b.String()
}
