//go:build !strictreader

package contracts

// tolerantReader: UnmarshalStoredJSON ignores a field or an enum name it
// does not know (see there).
const tolerantReader = true
