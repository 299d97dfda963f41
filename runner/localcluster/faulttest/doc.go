// Package faulttest proves with real processes that infrastructure faults
// wedge nothing: a redis-server SIGKILLed under load and restarted from its
// append-only file leaves no order short of a terminal status and no
// idempotency key that answers TIMEOUT forever, with every order started
// once and stock taken once per confirmed order; and a cold activation
// whose round-robin choice is a frozen (SIGSTOP) workflow member moves on
// to the next member instead of failing or waiting for it. It holds only
// tests.
//
// It owns the clusters it starts (runner/localcluster, in a test's temporary
// directory, every process stopped by PID) and nothing else. It drives
// them only through the public HTTP order API (runner/client), signals
// processes only by the PIDs runner/localcluster reports, and reads Redis
// directly (through the stores' own readers, for their key layout) only
// to seed and to check invariants at the end.
//
// It must not import edge, actors/grain, actors/workflow, actors/node,
// readmodel, or the framework packages cluster and cluster/...: nothing of
// the system runs inside the test binary, and it never calls a grain or
// the Location Store. Its project imports are runner/localcluster,
// runner/client, actors/contracts, actors/commerce (seed and the
// CommerceStateStore readers), actors/order (event names, the start's
// sourceCommandId) and eventstore (the stream reader).
package faulttest
