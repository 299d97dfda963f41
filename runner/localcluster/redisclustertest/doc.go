// Package redisclustertest proves with real processes that the system
// runs on a Redis Cluster, in two tests on a local cluster
// (runner/localcluster) whose stores live on a 3-master Redis Cluster.
//
// Under load, orders go through the public API while the slots that hold
// live orders' keys move to another master (CLUSTER SETSLOT
// IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE): the masters' errorstats
// show the ASK and MOVED redirects that followed, no request fails, no
// master ever answers CROSSSLOT, and every master holds keys.
//
// With orders held (the workflows' runner-only effect gate, -fixtures),
// an owner is stopped between a step's module call and its append, its
// order's slot moves meanwhile (all the way, or half-way with the order's
// events already on the new master), and the hold ends while the APIs are
// idle: the owner's own writes meet MOVED and ASK, and every held order
// ends as it must, its stream gapless, each module effect made once.
//
// It prints the figures (moves, keys moved, redirects, orders) as FIGURE
// lines. It holds only tests.
//
// It owns the clusters it starts (in a test's temporary directory, every
// process stopped by PID) and nothing else. It drives them through the
// public HTTP API; it touches Redis only to seed the demo catalogue, to
// arm and release the fixtures, to move slots, to read the masters'
// statistics and, at the end, the orders' streams and the modules'
// records.
//
// It must not import edge, actors/node or the actor runtime: nothing of
// the system runs inside the test binary.
package redisclustertest
