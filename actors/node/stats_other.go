//go:build !unix

package node

// DumpStatsOnSIGUSR1 does nothing where there is no SIGUSR1: the stats
// file is then written at exit only.
func DumpStatsOnSIGUSR1(path, nodeName string, rt *RoundTrips, onErr func(error)) (stop func()) {
	return func() {}
}
