package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/shoppingmall-go/shoppingmall/actors/order"
)

// projection is the OrderState the read model must hold for a fold, in
// contract JSON (docs/contract.md, "Wire form"), written here from the
// contract rather than taken from the workflow's own writer, so that a
// writer that drops, renames or garbles a field is caught: an optional field
// is present exactly when the fold knows it; amount once the order started;
// updatedAtUnixMs is the last event's createdAt.
func projection(st order.State) map[string]any {
	p := map[string]any{
		"orderId":         st.OrderID,
		"status":          string(st.Status),
		"updatedAtUnixMs": st.UpdatedAtUnixMs,
	}
	opt := func(name, v string) {
		if v != "" {
			p[name] = v
		}
	}
	opt("shippingAddressId", st.ShippingAddressID)
	opt("reservationId", st.ReservationID)
	opt("paymentId", st.PaymentID)
	if st.Started {
		p["amount"] = st.Amount
	}
	opt("currency", st.Currency)
	opt("reason", st.Reason)
	return p
}

// projectionDiff lists, field by field, where the stored projection
// differs from the fold's: a missing, extra or different field each get
// a line. A projection with no captured state cannot be shown equal and
// is one difference.
func projectionDiff(state json.RawMessage, st order.State) []string {
	if len(bytes.TrimSpace(state)) == 0 {
		return []string{"projected state not captured"}
	}
	got, err := decodeNumbers(state)
	if err != nil {
		return []string{fmt.Sprintf("projected state does not decode: %v", err)}
	}
	raw, err := json.Marshal(projection(st))
	if err != nil {
		return []string{fmt.Sprintf("fold does not encode: %v", err)}
	}
	want, err := decodeNumbers(raw)
	if err != nil {
		return []string{fmt.Sprintf("fold does not decode: %v", err)}
	}
	names := map[string]bool{}
	for k := range got {
		names[k] = true
	}
	for k := range want {
		names[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(names)) {
		g, inGot := got[k]
		w, inWant := want[k]
		switch {
		case !inGot:
			out = append(out, fmt.Sprintf("%s missing, fold has %v", k, w))
		case !inWant:
			out = append(out, fmt.Sprintf("%s is %v, fold has none", k, g))
		case !reflect.DeepEqual(g, w):
			out = append(out, fmt.Sprintf("%s is %v, fold has %v", k, g, w))
		}
	}
	return out
}

// decodeNumbers decodes a JSON object keeping numbers exact.
func decodeNumbers(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not an object: %s", b)
	}
	return m, nil
}
