package commerce

import (
	"fmt"
	"strings"
)

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "sm:cs:"

// keys spells the store's keys (P = prefix):
//
//	P idem:order:{<orderId>}        hash key, orderId, status, fingerprint: the mapping of the key orderId derives from
//	P idem:{<key>}                  hash orderId, status, fingerprint: the layout before, read only (Config.SkipLegacyIdempotency)
//	P cart:{<cartId>}               string, JSON of the snapshot
//	P stock:{<sku>}                 string, available quantity
//	P stockledger:{<sku>}           stream, one entry per stock movement of the SKU
//	P hold:{<sku>}:<reservationId>  hash, one reservation line on the SKU: qty, state, ledger entry
//	P reservation:{<reservationId>} hash, the reservation's progress, first reserve and release results, call counters
//	P paymethod:{<methodId>}        hash approve, reason (seed data, read before authorizing)
//	P payment:{<paymentId>}         hash, first authorization result and call counter
//
// The idempotency mapping sits under the tag of the order its key derives
// (order.OrderIDFor), so that it shares the order's slot with the order's
// stream, record and Location; the caller passes that OrderId with the
// key. The "order:" keeps the two layouts apart: an idempotency key is
// the client's and may itself look like an OrderId.
//
// Every key carries the tag of the one thing it belongs to, so Redis
// Cluster spreads SKUs, reservations and payments over all slots. Every
// script touches the keys of one tag only: a SKU's stock, ledger and hold
// records move together; a reservation's record alone; a payment's record
// alone. What spans several SKUs is the reservation protocol in
// redis_inventory.go, a sequence of such scripts.
type keys struct{ prefix string }

// newKeys refuses a prefix with braces: the first braces of a key choose
// its Redis Cluster slot, and the layout relies on choosing them itself.
func newKeys(prefix string) (keys, error) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return keys{}, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrConfig, prefix)
	}
	return keys{prefix: prefix}, nil
}

func (k keys) idem(orderID string) string   { return k.prefix + "idem:order:{" + orderID + "}" }
func (k keys) legacyIdem(key string) string { return k.prefix + "idem:{" + key + "}" }
func (k keys) cart(cartID string) string    { return k.prefix + "cart:{" + cartID + "}" }
func (k keys) stock(sku string) string      { return k.prefix + "stock:{" + sku + "}" }
func (k keys) ledger(sku string) string     { return k.prefix + "stockledger:{" + sku + "}" }
func (k keys) reservation(id string) string { return k.prefix + "reservation:{" + id + "}" }

// hold is the line of reservation id on sku, under the SKU's tag so that
// the line moves with the SKU's stock and ledger in one script.
func (k keys) hold(sku, reservationID string) string {
	return k.prefix + "hold:{" + sku + "}:" + reservationID
}

// sku is what one line step touches, in the order its scripts take them.
func (k keys) sku(sku, reservationID string) []string {
	return []string{k.hold(sku, reservationID), k.stock(sku), k.ledger(sku)}
}

func (k keys) paymentMethod(id string) string { return k.prefix + "paymethod:{" + id + "}" }
func (k keys) paymentRecord(id string) string { return k.prefix + "payment:{" + id + "}" }
