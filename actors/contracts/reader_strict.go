//go:build strictreader

package contracts

// tolerantReader is off in the strictreader test build: a stored body with
// a field this build does not declare is refused. Only the upgrade proof's
// negative run builds it.
const tolerantReader = false
