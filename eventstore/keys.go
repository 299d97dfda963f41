package eventstore

import (
	"fmt"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "sm:es:"

// ErrInvalidOrderID: the order id cannot name a stream: it is empty or
// contains '{' or '}', which would break the per-order hash tag that keeps
// an order's keys in one Redis Cluster slot.
var ErrInvalidOrderID = errkind.New(errkind.InvalidArgument, "eventstore: invalid order id")

// keys spells the store's keys. Per order, under the hash tag {orderId}:
//
//	<prefix>{<orderId>}:stream  the events, one entry per version
//	<prefix>{<orderId>}:fence   hash gen, epoch: the current writer's token; schema:
//	                            the highest event schema the stream holds
//	                            (absent: 1); sealed (seal.go)
//	<prefix>{<orderId>}:cmds    hash sourceCommandId -> first version
//	<prefix>{<orderId>}:barrier string, the replication barrier's write (Barrier)
type keys struct{ prefix string }

// newKeys refuses a prefix with braces: the order id must be the keys'
// only hash tag.
func newKeys(prefix string) (keys, error) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return keys{}, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrConfig, prefix)
	}
	return keys{prefix: prefix}, nil
}

type orderKeys struct{ stream, fence, cmds, barrier string }

func (k keys) order(orderID string) (orderKeys, error) {
	if orderID == "" {
		return orderKeys{}, fmt.Errorf("%w: empty", ErrInvalidOrderID)
	}
	if strings.ContainsAny(orderID, "{}") {
		return orderKeys{}, fmt.Errorf("%w: %q contains '{' or '}'", ErrInvalidOrderID, orderID)
	}
	base := k.prefix + "{" + orderID + "}:"
	return orderKeys{stream: base + "stream", fence: base + "fence", cmds: base + "cmds", barrier: base + "barrier"}, nil
}
