package relocation

import (
	"fmt"
	"strings"
)

// DefaultKeyPrefix is the Relocation Store's keyspace when Config leaves it
// empty.
const DefaultKeyPrefix = "sm:rel:"

// locationDefaultPrefix is the Location Store's default keyspace, repeated
// here rather than imported so this package stays independent of it.
const locationDefaultPrefix = "sm:loc:"

// keys spells the store's keys (the layout is in the package doc).
type keys struct{ prefix string }

func newKeys(prefix string) (keys, error) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.HasPrefix(prefix, locationDefaultPrefix) {
		return keys{}, fmt.Errorf("%w: key prefix %q lies inside the Location Store keyspace %q", ErrConfig, prefix, locationDefaultPrefix)
	}
	if strings.ContainsAny(prefix, "{}") {
		return keys{}, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrConfig, prefix)
	}
	return keys{prefix: prefix}, nil
}

func (k keys) envelope(orderID string) string { return k.prefix + "envelope:{" + orderID + "}" }

func (k keys) op(orderID, opID string) string { return k.prefix + "op:{" + orderID + "}:" + opID }

func (k keys) ops(orderID string) string { return k.prefix + "ops:{" + orderID + "}" }

// opIndex is tagged by the operation id: GetOperation is addressed by it
// alone.
func (k keys) opIndex(opID string) string { return k.prefix + "opid:{" + opID + "}" }
