package location

import (
	"fmt"
	"strings"
)

// DefaultKeyPrefix is the key prefix used when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "sm:loc:"

// keys spells the store's keys. Per identity, under the hash tag {id}, so
// a record's scripts touch one Redis Cluster slot:
//
//	<prefix><kind>:{<id>}          hash: the Record
//	<prefix><kind>:{<id>}:lock     string: the creation lock's token
//	<prefix><kind>:{<id>}:history  list: the ownership history
//
// Per member, each in its own slot:
//
//	<prefix>members                hash: member id -> node name
//	<prefix>{<prefix>members}schemas hash: member id -> newest event schema
//	                               it reads (members that host orders), in
//	                               the names' slot, written with the name
//	<prefix>gone                   hash: member id -> GoneMember (JSON)
//	<prefix>{<prefix>gone}heartbeat hash: member id -> "<ms>:<bound ms>", and
//	                               "~up" and "~judge:<member id>" (gone.go),
//	                               in the gone record's slot
//	<prefix>owned:<memberId>       set: "<kind>/<id>" the member was made owner of
//
// Cluster-wide, in one slot:
//
//	<prefix>schema:level           string: the compatibility level (JSON SchemaLevel)
//	<prefix>{<prefix>schema:level}history list: its changes, newest first
type keys struct{ prefix string }

// newKeys refuses a prefix with braces: the identity must be the keys'
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

func (k keys) record(kind, id string) string { return k.prefix + kind + ":{" + id + "}" }

func (k keys) lock(kind, id string) string { return k.record(kind, id) + ":lock" }

// history shares the record's hash tag, so the scripts that change a
// record append to it in the same step, on the same Redis Cluster slot.
func (k keys) history(kind, id string) string { return k.record(kind, id) + ":history" }

func (k keys) members() string { return k.prefix + "members" }

// memberSchemas shares the names' slot (tagged with that key's whole
// name, as heartbeat is with gone's), so a member's name and schema are
// written in one MULTI on Redis Cluster too.
func (k keys) memberSchemas() string { return k.prefix + "{" + k.members() + "}schemas" }

func (k keys) schemaLevel() string { return k.prefix + "schema:level" }

func (k keys) schemaHistory() string { return k.prefix + "{" + k.schemaLevel() + "}history" }

func (k keys) gone() string { return k.prefix + "gone" }

// heartbeat is hash-tagged with the gone key's whole name, which is what
// Redis Cluster hashes for a key without a tag, so both share a slot: the
// self-fence probe and the stale-heartbeat mark read and write both in
// one script, which a Redis Cluster refuses (CROSSSLOT) across slots. The
// gone key keeps its untagged name, so existing records stay where they
// are.
func (k keys) heartbeat() string { return k.prefix + "{" + k.gone() + "}heartbeat" }

func (k keys) owned(memberID string) string { return k.prefix + "owned:" + memberID }

// recordPattern matches every record key of kind for SCAN (and, with
// the lock and history keys, nothing else: see recordID).
func (k keys) recordPattern(kind string) string { return k.prefix + kind + ":{*}" }

// recordID answers the identity of a record key of kind, or false for
// any other key recordPattern matched.
func (k keys) recordID(kind, key string) (string, bool) {
	id, ok := strings.CutPrefix(key, k.prefix+kind+":{")
	if !ok || !strings.HasSuffix(id, "}") {
		return "", false
	}
	return strings.TrimSuffix(id, "}"), true
}
