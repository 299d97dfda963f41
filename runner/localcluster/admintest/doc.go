// Package admintest proves with real processes that the admin surface is
// locked and that the stuck-order report finds and resumes a held order:
// a local cluster (runner/localcluster) with the admin listeners on loopback
// and the generated token, the commerce-api admin CLI against it, and the
// runner's GateStop fixture holding an order at InventoryReserved. It also
// proves that every process serves /metrics on a loopback listener of its
// own whose Redis figures move by exactly what a request costs, and that a
// workflow's /debug/pprof/ needs the cluster's token, and that both
// process kinds refuse, with -require-durable-store, a Redis that keeps
// nothing on disk. It holds only tests.
package admintest
