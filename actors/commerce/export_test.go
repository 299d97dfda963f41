package commerce

// SetStepHook makes every later Reserve and Release of r call f after
// each protocol step; an error from f ends the call there, as a crash of
// the caller would. nil removes the hook.
func SetStepHook(r *Redis, f func(step string) error) { r.step = f }

// UseSteppedPaths makes r take the stepped, one-tag-per-script paths even
// on a single server, as it does on a Redis Cluster.
func UseSteppedPaths(r *Redis) { r.oneSlot = false }
