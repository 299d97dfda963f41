// Package pausetest proves with real processes what a long pause does to
// an order-workflow member that owns orders, as a long GC pause or a VM
// stall would: after a 3.5 s SIGSTOP, longer than the 2 s after which the
// other members drop a silent member, the member is recorded gone in the
// Location Store, finds that record once it runs again, fences itself
// (its grains stop, nothing is released or relocated) and exits 3; the
// local cluster's supervisor starts the same node name again as a new
// member, and the APIs count two workflow members again within a few
// seconds. The paused member's old orders answer 503 UNAVAILABLE
// (OWNER_GONE) from both APIs, their records untouched, until an operator
// takes them over; the other workflow member is not disturbed. It holds
// only tests.
//
// It owns the clusters it starts (runner/localcluster, in a test's temporary
// directory, every process stopped by PID) and nothing else. It drives
// them through the public HTTP API and /readyz, signals processes only by
// the PIDs runner/localcluster reports, and reads the Location Store directly
// only to find each order's owner and to check the records.
//
// It must not import edge (beyond its error codes), actors/grain's
// running parts, actors/node or the framework package cluster: nothing of
// the system runs inside the test binary.
package pausetest
