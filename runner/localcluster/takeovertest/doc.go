// Package takeovertest proves with real processes the takeover contract:
// an owner SIGKILLed with orders held at every step between a module call
// and its append is taken over through the admin API (the commerce-api
// CLI), and every order then reaches a terminal status with each
// reservation and authorization made once (the commerce module's effect
// records and the stock) and a stream without gap or duplicate; and an
// owner paused (SIGSTOP) with a step pending, taken over with force while
// the new owner advances its orders, cannot write once it runs again
// (SIGCONT): its appends are refused and logged, none is accepted, and
// the read model equals the fold of the stream; and with -takeover-after
// on the APIs, a killed owner's order still answers OWNER_GONE first and
// is taken over by the policy once its gone record is old enough, so that
// a new attempt succeeds. It holds only tests.
//
// It owns the clusters it starts (runner/localcluster with -admin and
// -fixtures, in a test's temporary directory, every process stopped by
// PID). It drives them through the public order API (runner/client), the
// admin API and CLI, holds steps with the fixture store's effect gate
// (actors/fixture, armed in Redis before the start), signals processes
// only by the PIDs runner/localcluster reports, and reads Redis through the
// stores' own readers to check invariants.
//
// It must not import edge, actors/grain, actors/node or the framework
// package cluster: nothing of the system runs inside the test binary.
package takeovertest
