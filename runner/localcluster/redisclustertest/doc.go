// Package redisclustertest proves with real processes that the system
// runs on a Redis Cluster: a local cluster (runner/localcluster) whose
// stores live on a 3-master Redis Cluster takes orders through the public
// API while the slots that hold live orders' keys move to another master
// (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE). The
// masters' errorstats show the ASK and MOVED redirects that followed, no
// request fails, no master ever answers CROSSSLOT, and every master holds
// keys. It prints the figures (moves, redirects, keys per master) as
// FIGURE lines. It holds only tests.
//
// It owns the cluster it starts (in a test's temporary directory, every
// process stopped by PID) and nothing else. It drives the cluster through
// the public HTTP API and touches Redis only to seed the demo catalogue,
// to move slots and to read the masters' statistics.
//
// It must not import edge, actors/node or the actor runtime: nothing of
// the system runs inside the test binary.
package redisclustertest
