package location

import (
	"github.com/redis/go-redis/v9"
)

// Creation is an identity's creation lock as a script of another store
// takes it, on the same Redis server, for an identity that script has
// just minted (a new order's id winning its idempotency reservation):
// while Record does not exist, Lock is set to the creator's token, if
// absent, for the lock's TTL (SET NX PX), and Record's StatusField to
// Creating. That is BeginCreate's acquisition of a Missing identity, in
// another store's round trip; the creator then activates generation 1
// with its token, as after BeginCreate, and CommitReady or AbortCreate
// end the lock as usual.
type Creation struct {
	Record, Lock          string
	StatusField, Creating string
}

// CreationFor returns kind/id's Creation, or false when the store's
// client is not one server (a Redis Cluster keeps its keys apart from
// any other store's) or id is not a valid identity.
func (s *Redis) CreationFor(kind, id string) (Creation, bool) {
	if !s.SingleServer() || checkIdentity(id) != nil {
		return Creation{}, false
	}
	return Creation{Record: s.keys.record(kind, id), Lock: s.keys.lock(kind, id), StatusField: "status", Creating: string(Creating)}, true
}

// SingleServer reports whether the store's client talks to one server,
// where another store's script may take a creation lock (CreationFor).
func (s *Redis) SingleServer() bool {
	_, ok := s.rdb.(*redis.Client)
	return ok
}
