// Package check owns the soak's history format and its invariant checker:
// the History a soak run records (client log, every order's stream,
// ownership, idempotency mapping, module records, stock, faults) and Check,
// which decides from that history alone whether the run kept the
// invariants of issue 12. It reads no store and starts nothing, so a saved
// history re-checks offline to the same report.
//
// It imports only the standard library, the domain (actors/order),
// actors/workflow for decoding stored events and the leaf runner/jsonfile;
// it must not import the
// cluster, the edge, the event store or any Redis client.
package check
