package jsonfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A file is written whole, indented and newline-terminated, readable by
// others, and replaced whole: concurrent readers of a file being
// rewritten never see a torn one, and no temporary file stays behind.
func TestWriteIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	type doc struct {
		N    int      `json:"n"`
		Pads []string `json:"pads"`
	}
	pad := make([]string, 2000)
	for i := range pad {
		pad[i] = "xxxxxxxxxxxxxxxx"
	}
	require.NoError(t, Write(path, doc{N: 0, Pads: pad}))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, byte('\n'), b[len(b)-1])
	require.Contains(t, string(b), "\n  \"n\": 0,")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				var d doc
				if err := json.Unmarshal(b, &d); err != nil {
					t.Errorf("a reader saw a torn file: %v", err)
					return
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		require.NoError(t, Write(path, doc{N: i, Pads: pad}))
	}
	close(stop)
	wg.Wait()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "a temporary file stayed behind")

	require.ErrorContains(t, Write(path, func() {}), path, "a value that does not encode")
	require.ErrorContains(t, Write(filepath.Join(dir, "missing", "x.json"), 1), "missing")
}
