// Package location owns the Location Store: the Redis data model of who
// hosts which grain. Per identity it keeps the authority record
// (Missing, Creating, Ready, Moving, with owner, pid and generation, and
// a takeover's mark until the next activation commits), the
// creation lock and the ownership history; per member, its node name and
// the event schema it reads, its gone record and the takeover index of
// what it was made owner of; cluster-wide, the event schema's
// compatibility level and its history (schema.go; the rules that raise it
// live in cluster/compat).
// Every change of a record is one Lua script that also appends to its
// history (redis.go, history.go); two are spelled out for another store's
// script on the same server instead: taking a minted identity's creation
// lock (Creation) and committing its activation Ready (ReadyWrites)
// (creation.go). Gone records (gone.go) and the takeover's index, scan
// and reset (takeover.go) sit beside them.
//
// It is the store only: the protoactor IdentityLookup that reads it, the
// activator that hosts grains, the cluster context, relocation and
// self-fencing live in cluster/placement, which uses this package through
// its Store interface. It must not import protoactor, actors/..., edge,
// eventstore or any package of this module but errkind: runners and offline
// tools read the store without linking the actor runtime.
//
// It follows the store convention described in package eventstore:
// location.go holds the Store interface with its contract and the
// sentinels, redis.go the Redis implementation and NewRedis, keys.go the
// only code that spells keys, and locationtest the contract suite.
package location
