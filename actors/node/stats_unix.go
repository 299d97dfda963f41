//go:build unix

package node

import (
	"os"
	"os/signal"
	"syscall"
)

// DumpStatsOnSIGUSR1 writes the stats file each time the process receives
// SIGUSR1, so a runner can read counters before and after a load without
// stopping the process. The returned func stops listening. Failures go to
// onErr (may be nil).
func DumpStatsOnSIGUSR1(path, nodeName string, rt *RoundTrips, onErr func(error)) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				if err := WriteStats(path, nodeName, rt, false); err != nil && onErr != nil {
					onErr(err)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
