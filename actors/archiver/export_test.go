package archiver

// SetStepHook makes every later archival of a call f after each step
// (seal, write, verify, reservation, payment, compact, forget); an
// error from f ends the archival there, as a crash of the archiver would.
func SetStepHook(a *Archiver, f func(step string) error) { a.after = f }
