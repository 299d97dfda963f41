// Package crashtest proves the failure boundary with real processes: the
// owner of a Ready order gets SIGKILL, and the order answers UNAVAILABLE
// fast, is never re-created elsewhere, and stays so after the same node
// name starts again as a new incarnation. It holds only tests.
package crashtest
