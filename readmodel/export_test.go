package readmodel

import "time"

// ParseNotice exposes parseNotice to the external tests, which read the
// terminal channel as any subscriber would.
var ParseNotice = parseNotice

// SetFeedClock sets the clock a feed rotates its tracked starts by.
func SetFeedClock(f *TerminalFeed, now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
}
