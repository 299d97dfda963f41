package location

import (
	"strconv"

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
	// Sealed and SealedField, when set, are the identity's seal mark
	// (Config.Sealed): while the field exists the lock is not taken.
	Sealed, SealedField string
}

// CreationFor returns kind/id's Creation, or false when the store's
// client is not one server (a Redis Cluster keeps its keys apart from
// any other store's), id is not a valid identity or its seal mark is
// misplaced.
func (s *Redis) CreationFor(kind, id string) (Creation, bool) {
	if !s.SingleServer() || checkIdentity(id) != nil {
		return Creation{}, false
	}
	c := Creation{Record: s.keys.record(kind, id), Lock: s.keys.lock(kind, id), StatusField: "status", Creating: string(Creating)}
	mark, field, ok, err := s.sealMark(kind, id)
	if err != nil {
		return Creation{}, false
	}
	if ok {
		c.Sealed, c.SealedField = mark, field
	}
	return c, true
}

// SingleServer reports whether the store's client talks to one server,
// where another store's script may take a creation lock (CreationFor).
func (s *Redis) SingleServer() bool {
	_, ok := s.rdb.(*redis.Client)
	return ok
}

// ReadyWrites is CommitReady spelled out as plain writes, for a writer
// that makes them inside a step of its own on the same Redis server (an
// order's first append carries them: the activation is recorded in the
// round trip that records the order's first event). The step must check
// that Lock holds Token before it writes anything, its own writes
// included, and then apply, in this order: Set's fields to Record, Clear's
// fields removed from Record, Lock deleted, HistoryEntry pushed to History
// keeping its HistoryCap newest entries, OwnedEntry added to the owner's
// index Owned. Applied that way they leave what CommitReady leaves; a
// step that finds another token in Lock has lost the lock, as
// CommitReady's ErrLockLost.
type ReadyWrites struct {
	Lock, Token  string
	Record       string
	Set          [][2]string
	Clear        []string
	History      string
	HistoryEntry string
	HistoryCap   int
	Owned        string
	OwnedEntry   string
}

// Writer is the part of an order's unit of work (eventstore.Writes and
// eventstore.Unit, which this store does not import) that a Ready commit
// rides in: each method adds one write and returns its position.
type Writer interface {
	Require(key string, value []byte) int
	HashSet(key, field string, value []byte) int
	HashDelete(key, field string) int
	Delete(key string) int
	ListPushCapped(key string, value []byte, capacity int) int
	SetAdd(key string, value []byte) int
}

// AddTo adds w to u in the order the type's doc gives: the lock's check
// first, then Set, Clear, the lock's removal, the history entry and the
// owner's index entry. This package alone spells them.
func (w ReadyWrites) AddTo(u Writer) {
	u.Require(w.Lock, []byte(w.Token))
	for _, f := range w.Set {
		u.HashSet(w.Record, f[0], []byte(f[1]))
	}
	for _, f := range w.Clear {
		u.HashDelete(w.Record, f)
	}
	u.Delete(w.Lock)
	u.ListPushCapped(w.History, []byte(w.HistoryEntry), w.HistoryCap)
	u.SetAdd(w.Owned, []byte(w.OwnedEntry))
}

// ReadyWritesFor returns CommitReady(kind, id, token, rec) as
// ReadyWrites, or false when the store's client is not one server or id
// is not a valid identity (as CreationFor).
func (s *Redis) ReadyWritesFor(kind, id, token string, rec Record) (ReadyWrites, bool) {
	if !s.SingleServer() || checkIdentity(id) != nil || token == "" {
		return ReadyWrites{}, false
	}
	return ReadyWrites{
		Lock: s.keys.lock(kind, id), Token: token,
		Record: s.keys.record(kind, id),
		Set: [][2]string{
			{"status", string(Ready)}, {"owner", rec.Owner}, {"pidAddress", rec.PIDAddress},
			{"pidId", rec.PIDID}, {"generation", strconv.FormatInt(rec.Generation, 10)},
		},
		Clear:        []string{"takeover"},
		History:      s.keys.history(kind, id),
		HistoryEntry: historyEntry(OwnershipActivated, rec.Owner, rec.Generation, nowUnixMs()),
		HistoryCap:   HistoryCap,
		Owned:        s.keys.owned(rec.Owner),
		OwnedEntry:   ownedEntry(kind, id),
	}, true
}

// Forgetting is the part of an order's compaction (eventstore.Compaction,
// which this store does not import) that a finished identity's keys leave
// in.
type Forgetting interface {
	// Delete adds the removal of key.
	Delete(key string)
}

// AddForget adds the removal of kind/id's record, creation lock and
// history to c: the identity's keys, all in its hash slot. Its entry in
// its owner's index (another slot) is left for Unindex, or for the next
// takeover, which drops an entry whose record is gone.
func (s *Redis) AddForget(c Forgetting, kind, id string) error {
	if err := checkIdentity(id); err != nil {
		return err
	}
	c.Delete(s.keys.record(kind, id))
	c.Delete(s.keys.lock(kind, id))
	c.Delete(s.keys.history(kind, id))
	return nil
}
