package readmodel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "sm:rm:"

// ErrInvalidOrderID: the order id cannot name a record: it is empty or
// contains '{' or '}', which would break the per-order hash tag.
var ErrInvalidOrderID = errkind.New(errkind.InvalidArgument, "readmodel: invalid order id")

// keys spells the store's keys:
//
//	<prefix>{<orderId>}        hash version, state: the order's record
//	<prefix>active:{<shard>}   sorted set: the ActiveIndex shard
//	<prefix>finished:{<shard>} sorted set: the FinishedIndex shard
//	<prefix>finished:{<shard>}:lease string: the archiver holding the shard
type keys struct{ prefix string }

// newKeys refuses a prefix with braces: the order id must be the record
// key's only hash tag.
func newKeys(prefix string) (keys, error) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return keys{}, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrConfig, prefix)
	}
	return keys{prefix: prefix}, nil
}

func (k keys) record(orderID string) (string, error) {
	if orderID == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidOrderID)
	}
	if strings.ContainsAny(orderID, "{}") {
		return "", fmt.Errorf("%w: %q contains '{' or '}'", ErrInvalidOrderID, orderID)
	}
	return k.prefix + "{" + orderID + "}", nil
}

// recordPattern matches every record key and no index key.
func (k keys) recordPattern() string { return k.prefix + "{*}" }

// orderOf is the order id of a record key, "" for any other key.
func (k keys) orderOf(key string) string {
	id, ok := strings.CutPrefix(key, k.prefix+"{")
	if !ok {
		return ""
	}
	id, ok = strings.CutSuffix(id, "}")
	if !ok || id == "" || strings.ContainsAny(id, "{}") {
		return ""
	}
	return id
}

func (k keys) active(shard int) string {
	return k.prefix + "active:{" + strconv.Itoa(shard) + "}"
}

func (k keys) finished(shard int) string {
	return k.prefix + "finished:{" + strconv.Itoa(shard) + "}"
}

func (k keys) finishedLease(shard int) string { return k.finished(shard) + ":lease" }
