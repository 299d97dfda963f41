// Package stalltest proves with real processes that a store that stops
// answering for longer than the workflow members' lease is an ordinary
// event: redis-server frozen with SIGSTOP, or SIGKILLed and restarted
// from its append-only file (appendfsync always), for longer than the
// lease while a few closed-loop clients start orders. The members suspend
// instead of fencing themselves; once the store answers they read their
// gone records, serve again with the same member ids and the same grains,
// and every acknowledged order reaches a terminal status by itself (no
// continue, no operator), no member restarts or self-fences, and every
// key whose start failed during the outage reaches a terminal status
// when it is retried with the same key and body. The other case of a
// lease without a read is told apart: a workflow process that was itself
// SIGSTOPped for longer than the lease fences on the gap, before it reads
// anything, and exits 3 for a restart. It holds only tests.
//
// It owns the clusters it starts (runner/localcluster, in a test's
// temporary directory, every process stopped by PID) and nothing else. It
// drives them only through the public HTTP order API (runner/client),
// signals processes only by the PIDs runner/localcluster reports, and
// reads Redis directly only to seed the catalogue.
//
// It must not import edge, actors/grain, actors/workflow, actors/node,
// or the framework packages cluster and cluster/...: nothing of the
// system runs inside the test binary.
package stalltest
