package commerce

import (
	"fmt"
	"strings"
)

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "sm:cs:"

// keys spells the store's keys (P = prefix):
//
//	P idem:{<key>}                  hash orderId, status, fingerprint
//	P cart:{<cartId>}               string, JSON of the snapshot
//	P stock:{inventory}:<sku>       string, available quantity
//	P reservation:{inventory}:<id>  hash, first reserve and release results and call counters
//	P paymethod:{payment}:<id>      hash approve, reason
//	P payment:{payment}:<id>        hash, first authorization result and call counter
//
// A multi-SKU reservation is all or nothing, so it is one Lua script over
// every SKU's stock key and the reservation record; Redis Cluster only
// runs a script whose keys share a slot, hence the one shared tag
// {inventory}. Authorize reads the method's seed and records the result in
// one script for the same reason, hence the shared tag {payment}. Both pin
// their module to one slot, which suits a sample's load; a sharded
// inventory would need a reservation protocol across slots instead.
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

func (k keys) idem(key string) string         { return k.prefix + "idem:{" + key + "}" }
func (k keys) cart(cartID string) string      { return k.prefix + "cart:{" + cartID + "}" }
func (k keys) stock(sku string) string        { return k.prefix + "stock:{inventory}:" + sku }
func (k keys) reservation(id string) string   { return k.prefix + "reservation:{inventory}:" + id }
func (k keys) paymentMethod(id string) string { return k.prefix + "paymethod:{payment}:" + id }
func (k keys) paymentRecord(id string) string { return k.prefix + "payment:{payment}:" + id }
