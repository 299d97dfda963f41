// Package overloadtest proves with real processes that a burst far above
// capacity is an ordinary event (issue 26, points 1, 3 and 8): it
// measures the local cluster's closed-loop capacity, then offers an open
// loop of POST /orders at several times that rate for a bounded time and
// count, and asserts functional outcomes only. Every answer is 201/200,
// or 503/504 with a reason and a Retry-After (a shed one 503 OVERLOADED
// with 1–3 s); none is 500 INTERNAL or NO_ELIGIBLE_MEMBER; no workflow
// member fences itself or restarts; and every acknowledged order reaches
// a terminal status within a stated bound after the burst, with no
// continue and no operator. It prints the figures (capacity, offered
// rate, answers, the servers' own shed latency) and holds only tests.
//
// It owns the clusters it starts (runner/localcluster, in a test's
// temporary directory, every process stopped by PID) and nothing else.
// All traffic is on loopback. It drives them only through the public HTTP
// order API (runner/client) and reads the nodes' logs, the supervisor's
// restarts and the APIs' /metrics.
//
// It must not import edge (beyond its error codes and metric names),
// actors/grain, actors/workflow, actors/node, readmodel, or the framework
// packages cluster and cluster/...: nothing of the system runs inside the
// test binary. Its project imports are runner/localcluster (and its
// proctest), runner/client, actors/contracts, actors/commerce (the seed)
// and edge's constants.
package overloadtest
