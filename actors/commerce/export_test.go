package commerce

// SetStepHook makes every later Reserve and Release of r call f after
// each protocol step; an error from f ends the call there, as a crash of
// the caller would. nil removes the hook.
func SetStepHook(r *Redis, f func(step string) error) { r.step = f }
