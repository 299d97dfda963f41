// Package placement owns where grains run and how calls reach them, on
// protoactor: the IdentityLookup (Lookup) that resolves an identity
// through the Location Store and cold-activates a Missing one, each
// member's activator that hosts grains and answers an activation only
// once the grain opened its state (and, for an activation that carries
// its identity's first command, once the grain was recorded Ready, by the
// activator or by a ReadyCarrier grain's first write (ready.go), and
// answered that command), the cluster context that turns a dead
// owner into a fast, typed ErrUnavailable, planned relocation (move.go),
// the gone records' in-memory view and self-fencing (gone.go,
// selffence.go), the bounds of what a member hosts (Limits: a capacity of
// requests per grain mailbox, mailbox.go; a cap on hosted grains, beyond
// which only grains that reported no work left are passivated, and on
// activations in progress; past any of them the member answers
// Overloaded at once, never queues, and the caller gets ErrOverloaded,
// never ErrNoMember), and the activator's metrics (activations by cause,
// aborted activations, grains hosted, overload refusals by limit,
// passivations to make room: metrics.go) in the process's
// telemetry.Registry, and how a grain call carries its trace: a client
// span per call, the W3C trace context in the envelope's headers, read
// back on the grain's side (trace.go). It never fails over: a Ready
// identity whose owner left the topology stays where it is until an
// operator acts. A member seen leaving is recorded gone, so that every
// member treats its identities alike and the member itself, should it
// still run, fences itself.
//
// The records themselves are package location's: this package reads and
// changes them only through location.Store, and keeps no Redis code of
// its own. It knows nothing of orders, HTTP or the event stream; it must
// not import actors/..., edge, eventstore or go-redis. Nothing under
// runner/ may import it: it links the actor runtime.
package placement
