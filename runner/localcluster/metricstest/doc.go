// Package metricstest proves with real processes that the order-workflow
// binary serves the order workflow's metrics on its metrics listener: one
// order moves the scraped text of the workflow nodes by exactly its own
// deltas. It holds only tests; nothing of the system runs in the test
// binary.
package metricstest
