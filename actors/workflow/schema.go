//go:build !upgradetest

package workflow

// SchemaVersion is the event schema this build writes, and the newest it
// reads. A change that only adds optional fields needs a new version (so
// that a reader of the old one is never handed an event whose new fields
// it would drop) but no upcaster; a change that renames or reshapes a
// field also registers an Upcaster from the old version.
//
// The upgrade proof builds this package a second time with the
// upgradetest tag (schema_upgradetest.go): a schema 2 with one more
// optional field, its upcaster and its downcaster. A release build is
// this file's.
const SchemaVersion = 1

// This build's reshaping steps between schemas: none, with one schema.
var (
	buildUpcasters   []Upcaster
	buildDowncasters []Downcaster
)

// addBuildFields adds to an encoded body the fields this build writes
// beyond its generated contract message: none.
func addBuildFields(_ string, data []byte) []byte { return data }

// checkBuildFields checks, on a decoded body of a codec of the given
// schema, after its upcasting, the fields this build requires beyond its
// generated contract message: none.
func checkBuildFields(int, string, []byte) error { return nil }
