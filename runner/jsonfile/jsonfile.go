// Package jsonfile owns how the runners write a JSON file: indented,
// newline-terminated, and atomically (a temporary file renamed over the
// target), so a reader (an operator's jq, a supervisor reading state, a
// CI step reading results) sees the old file or the whole new one,
// never half of one.
//
// It is a leaf: it imports the standard library only and must not
// import any package of this module.
package jsonfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes v's indented JSON encoding to path, atomically, with
// mode 0644. The error names path.
func Write(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
