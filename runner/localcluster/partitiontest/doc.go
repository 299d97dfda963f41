// Package partitiontest proves with real processes what a network
// partition between one API and one workflow member does, while both
// still reach Redis and every other process (all traffic on loopback; the
// cut is runner/localcluster/partition's, by cgroup): the workflow member
// is not recorded gone and neither fences nor restarts; its orders are
// served through the other API during the partition, and the cut API
// answers them with a fast 503 UNAVAILABLE (OWNER_UNREACHABLE) from its
// first answer on, never a 504, OWNER_GONE or a 500; once the partition
// heals, the cut API rejoins the cluster as a new member (it exits 4 and
// the supervisor starts it) and every API serves the member's orders
// again. And the isolation rule: a workflow member cut from every API is
// recorded gone and fences, while the other member serves on. It holds
// only tests, and
// needs root, cgroup v2 and iptables (make partition-test installs it).
//
// It owns the clusters it starts (runner/localcluster, in a test's
// temporary directory, every process stopped by PID) and the partition's
// rules and cgroups, which it always removes. It drives the cluster
// through the public HTTP API and reads the Location Store directly only
// to find each order's owner and the gone records.
//
// It must not import edge (beyond its error codes), actors/node or the
// framework package cluster: nothing of the system runs inside the test
// binary.
package partitiontest
