package readmodel

// ParseNotice exposes parseNotice to the external tests, which read the
// terminal channel as any subscriber would.
var ParseNotice = parseNotice
