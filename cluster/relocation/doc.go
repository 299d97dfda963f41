// Package relocation owns the Relocation Store: per order, the first
// activation envelope (the serialized command that first activated it) and
// the records of its operations: planned relocations and takeovers of a
// lost owner's authority (Operation.Kind).
//
// The store keeps envelopes as opaque bytes, so it must not import
// actors/..., edge, eventstore or readmodel; callers encode and decode. Its
// keyspace is separate from the Location Store's (default prefix "sm:loc:"):
// the spec lets both share a Redis deployment but never a key, so NewRedis
// refuses a prefix inside the Location Store's default keyspace.
//
// Keys (prefix default "sm:rel:"):
//
//	<prefix>envelope:{<orderId>}        string: first activation envelope
//	<prefix>op:{<orderId>}:<opId>       hash: one operation record
//	<prefix>ops:{<orderId>}             sorted set: opIds by startedAt
//	<prefix>opid:{<opId>}               string: the orderId that owns opId
//
// Per-order keys share the {orderId} hash tag so the script that writes an
// operation touches a single Redis Cluster slot. The opid index exists only
// because GetOperation is addressed by operation id alone; it is tagged by
// the operation id so it, too, is valid on Redis Cluster.
//
// The store never reads the clock: every time comes in on the Operation.
//
// It follows the store convention described in package eventstore:
// relocation.go holds the Store interface with its contract and the
// sentinels, redis.go the Redis implementation and NewRedis, keys.go the
// only code that spells keys, and relocationtest the contract suite.
package relocation
