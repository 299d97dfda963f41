package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Projection is another store's record that AppendProjected writes in the
// same atomic step as the append. Its owner names the key and both
// fields; this package applies only the guard stated here, which the
// owner's own writes of the record must share: the hash at Key gets
// VersionField = Version and StateField = State, unless VersionField
// already holds a number greater than Version (a value that is not a
// number is damage and does not block the write). Key must carry the
// order's hash tag, so the step stays one script on one Redis Cluster
// slot.
//
// Notify, when set, is a Pub/Sub channel on which the same step publishes
// NotifyMessage if, and only if, it wrote the record: the owner's notice
// of its own write, which a subscriber can only hear once the record is
// readable. PUBLISH names no key, so the step stays on the order's slot;
// what the notice means is the owner's business.
//
// Index, when set, is a sorted-set entry of the owner's that the same
// step updates once the append passed its checks, whether or not the
// guard let the record be written: IndexAdd adds Member with Score
// unless a greater score is stored (ZADD GT), IndexRemove drops it. Its
// key need not carry the order's hash tag, so only an owner whose client
// talks to one server (not a Redis Cluster, not a ring) may set it:
// AppendProjected refuses it otherwise.
type Projection struct {
	Key           string
	VersionField  string
	StateField    string
	Version       int64
	State         []byte
	Notify        string
	NotifyMessage string
	Index         IndexEntry
}

// IndexEntry is Projection.Index; the zero value updates nothing.
type IndexEntry struct {
	Op     IndexOp
	Key    string
	Member string
	Score  int64
}

// IndexOp is what IndexEntry does to its sorted set.
type IndexOp uint8

const (
	// IndexNone leaves every sorted set alone.
	IndexNone IndexOp = iota
	// IndexAdd adds the member, keeping the greater of both scores.
	IndexAdd
	// IndexRemove drops the member.
	IndexRemove
)

// luaOp is the op as appendProjectedScript reads it.
func (o IndexOp) luaOp() string {
	switch o {
	case IndexAdd:
		return "add"
	case IndexRemove:
		return "rem"
	}
	return ""
}

// projectedArgs is how many ARGV precede the events in
// appendProjectedScript: appendScript's, then versionField, stateField,
// version, state, notify channel (empty: none), notify message, index op
// ("", add, rem), index member, index score.
const projectedArgs = appendArgs + 9

// appendProjectedScript is appendLua, then the caller's projection under
// the Projection guard, then its index entry. Nothing is written when a
// check fails.
//
// KEYS: stream, fence, cmds, projection[, index].
// Reply: {0, newVersion} or appendLua's.
var appendProjectedScript = redis.NewScript(`local base = ` + strconv.Itoa(projectedArgs) + appendLua + `
local cur = tonumber(redis.call('HGET', KEYS[4], ARGV[5]))
if not cur or cur <= tonumber(ARGV[7]) then
  redis.call('HSET', KEYS[4], ARGV[5], ARGV[7], ARGV[6], ARGV[8])
  if ARGV[9] ~= '' then
    redis.call('PUBLISH', ARGV[9], ARGV[10])
  end
end
if ARGV[11] == 'add' then
  redis.call('ZADD', KEYS[5], 'GT', ARGV[13], ARGV[12])
elseif ARGV[11] == 'rem' then
  redis.call('ZREM', KEYS[5], ARGV[12])
end
return {0, version}
`)

// AppendProjected is Append (same checks in the same order, same errors)
// that also writes proj, another store's record of the fold the events
// lead to, in the same script: one round trip records an event and its
// projection, and nothing is written when a check fails. proj.Version
// must be the stream's new version; an empty batch writes nothing.
//
// It is this store's half of the one write that spans two stores; the
// owner of that write, readmodel.ProjectedAppend, builds proj from its own
// record contract. Plain Append never writes outside this store.
func (r *Redis) AppendProjected(ctx context.Context, orderID string, expectedVersion int64, fence Fence, events []Envelope, proj Projection) (int64, error) {
	k, err := r.keys.order(orderID)
	if err != nil {
		return 0, err
	}
	if want := expectedVersion + int64(len(events)); proj.Version != want {
		return 0, fmt.Errorf("eventstore: append %s: projection of version %d, the append leads to %d", orderID, proj.Version, want)
	}
	if !strings.Contains(proj.Key, "{"+orderID+"}") {
		return 0, fmt.Errorf("%w: projection key %q lacks the order's hash tag", ErrInvalidOrderID, proj.Key)
	}
	if proj.VersionField == "" || proj.StateField == "" || proj.VersionField == proj.StateField {
		return 0, errors.New("eventstore: append " + orderID + ": projection needs two distinct field names")
	}
	keys := []string{k.stream, k.fence, k.cmds, proj.Key}
	ix := proj.Index
	if ix.Op != IndexNone {
		if !singleServer(r.client) {
			return 0, fmt.Errorf("%w: append %s: an index entry in the append needs a single-server client, not %T", ErrConfig, orderID, r.client)
		}
		if ix.Key == "" || ix.Member == "" || ix.Op.luaOp() == "" {
			return 0, fmt.Errorf("eventstore: append %s: index entry needs an op, a key and a member", orderID)
		}
		keys = append(keys, ix.Key)
	}
	args := make([]any, 0, projectedArgs+5*len(events))
	args = append(args, expectedVersion, fence.Generation, fence.Epoch, orderID,
		proj.VersionField, proj.StateField, proj.Version, proj.State, proj.Notify, proj.NotifyMessage,
		ix.Op.luaOp(), ix.Member, ix.Score)
	if args, err = appendEvents(args, orderID, events); err != nil {
		return 0, err
	}
	return r.runAppend(ctx, appendProjectedScript, keys, args, orderID, expectedVersion, fence)
}

// singleServer reports whether every key the client names lives on one
// server, so that a script may touch keys of different hash slots.
func singleServer(c redis.UniversalClient) bool {
	_, ok := c.(*redis.Client)
	return ok
}

// SingleServer reports whether the store's client talks to one server (a
// plain client, not a Redis Cluster or a ring): only then may a
// Projection carry an Index entry.
func (r *Redis) SingleServer() bool { return singleServer(r.client) }
