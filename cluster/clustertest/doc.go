// Package clustertest runs several protoactor members in one process, on
// protoactor's in-memory test provider, against a real redis-server: the
// order grains, the Location Store lookup, relocation and the failure
// boundary end to end. It holds only tests and benchmarks.
//
// It lives apart because protoactor's remote.Start writes grpc's global
// logger at every member start, which the race detector reports when one
// process starts a second member; the Makefile runs this package without
// -race and every other package with it. Nothing may import it.
package clustertest
