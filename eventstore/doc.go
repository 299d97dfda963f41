// Package eventstore owns the OrderEventStore: one append-only stream per
// order, its gapless version, source-command dedupe and the owner fence.
//
// It stores opaque event bodies and knows nothing of the order domain, the
// actor runtime or HTTP; it must not import actors/..., cluster, edge or
// readmodel.
//
// # The store convention
//
// Every Redis store package (eventstore, readmodel, actors/commerce,
// actors/fixture, cluster/location, cluster/relocation) has this shape, so
// whoever knows one store can read all of them:
//
//   - <pkg>.go: the store's interface(s), each method stating its
//     contract, and the package's sentinels, ErrConfig among them.
//   - redis.go: the Redis implementation, type Redis, its Config and
//     NewRedis (below).
//   - keys.go: type keys, built once from the prefix; the only code that
//     spells the store's keys.
//   - <pkg>test/: the contract suite, RunContract(t, newStore), which the
//     package's own tests run against Redis (a real redis-server) and the
//     fakes' tests run against every fake.
//
// The constructor is always
//
//	type Config struct {
//		Client    redis.UniversalClient // required
//		KeyPrefix string                // "" means DefaultKeyPrefix
//		// ...options of this store only
//	}
//
//	func NewRedis(cfg Config) (*Redis, error)
//
// NewRedis validates cfg (no client, a prefix with a hash-tag brace) and
// refuses it with an error wrapping ErrConfig: a store that was built
// works, and a wiring mistake stops the process at start-up instead of
// failing every call or panicking.
//
// A store's scripts touch only its own keys. A write that spans stores is
// one order's Unit (unit.go): each store adds its own writes to it through
// a method of its own package, and this package commits it as one script
// (Commit); the read model's part, with the rule for its index, is
// readmodel.RedisCommitter.Commit.
package eventstore
