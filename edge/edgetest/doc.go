// Package edgetest drives CommerceApi over real HTTP: two API members and
// two workflow members in one process against a real redis-server. It
// holds only tests, and runs without -race for the same library reason as
// cluster/clustertest. Nothing may import it.
package edgetest
