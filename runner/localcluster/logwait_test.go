package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fast is a small budget so failing waits end in milliseconds.
var fast = Poll{Interval: 5 * time.Millisecond, Attempts: 20}

func writeLog(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

func appendLog(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(content)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

const ready = "shoppingmall-ready kind=http node=api-a"

func TestWaitLinesMatchesWholeLinesOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api-a.log")
	// Near misses: quoted inside a structured log, a longer node name, a
	// prefix, trailing text.
	writeLog(t, path, `time=x level=INFO msg="shoppingmall-ready kind=http node=api-a"`+"\n"+
		"shoppingmall-ready kind=http node=api-ab\n"+
		"shoppingmall-ready kind=http node=api-\n"+
		ready+" extra\n"+
		" "+ready+"\n")
	err := WaitLines(context.Background(), path, 0, fast, Lines(Exact(ready))...)
	require.ErrorIs(t, err, ErrNotSeen)
	var ns *NotSeenError
	require.ErrorAs(t, err, &ns)
	assert.Equal(t, []string{ready}, ns.Missing)
	assert.Equal(t, fast.Attempts, ns.Attempts)

	// A CRLF line ending is still the same whole line.
	appendLog(t, path, ready+"\r\n")
	require.NoError(t, WaitLines(context.Background(), path, 0, fast, Lines(Exact(ready))...))
}

func TestWaitLinesIsPerFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "api-a.log"), filepath.Join(dir, "api-b.log")
	writeLog(t, a, ready+"\n")
	writeLog(t, b, "something else\n")
	require.NoError(t, WaitLines(context.Background(), a, 0, fast, Lines(Exact(ready))...))
	// The line is in api-a's log: api-b's wait must not pass because of it.
	require.ErrorIs(t, WaitLines(context.Background(), b, 0, fast, Lines(Exact(ready))...), ErrNotSeen)
}

func TestWaitLinesBudgetIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.log") // never created
	p := Poll{Interval: 10 * time.Millisecond, Attempts: 7}
	start := time.Now()
	err := WaitLines(context.Background(), path, 0, p, Lines(Exact(ready))...)
	took := time.Since(start)
	var ns *NotSeenError
	require.ErrorAs(t, err, &ns)
	assert.Equal(t, 7, ns.Attempts, "every look of the budget is used, no more")
	// 6 intervals between 7 looks.
	assert.GreaterOrEqual(t, took, 60*time.Millisecond, "the wait polled instead of reading once")
	assert.Less(t, took, 2*time.Second)
}

func TestDefaultPollIsTheSpecBudget(t *testing.T) {
	assert.Equal(t, 100*time.Millisecond, DefaultPoll.Interval)
	assert.Equal(t, 300, DefaultPoll.Attempts)
	assert.Equal(t, DefaultPoll, Poll{}.orDefault())
}

func TestWaitLinesSeesLinesAppendedLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-a.log")
	route := "shoppingmall-ready kind=object-route node=api-a target=workflow-a"
	done := make(chan error, 1)
	go func() {
		done <- WaitLines(context.Background(), path, 0, Poll{Interval: 5 * time.Millisecond, Attempts: 2000}, Lines(Exact(ready), Exact(route))...)
	}()
	appendLog(t, path, ready+"\n")
	// Half a line is not a line yet.
	appendLog(t, path, "shoppingmall-ready kind=object-route node=api-a ")
	appendLog(t, path, "target=workflow-a\n")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "wait did not see the appended lines")
	}
}

func TestPartialLineIsNotCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	writeLog(t, path, ready)
	n, err := CountLines(path, 0, Exact(ready))
	require.NoError(t, err)
	assert.Zero(t, n, "a line without its newline may still be being written")
	appendLog(t, path, "\n")
	n, err = CountLines(path, 0, Exact(ready))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestWaitLinesFromOffsetIgnoresEarlierIncarnations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api-a.log")
	writeLog(t, path, ready+"\n")
	off, err := LogSize(path)
	require.NoError(t, err)
	require.ErrorIs(t, WaitLines(context.Background(), path, off, fast, Lines(Exact(ready))...), ErrNotSeen,
		"a line of the previous incarnation must not count for the restarted one")
	appendLog(t, path, ready+"\n")
	require.NoError(t, WaitLines(context.Background(), path, off, fast, Lines(Exact(ready))...))
}

func TestWaitLinesAtLeast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	line := "shoppingmall-order started order=o1 spot=shoppingmall.order-workflow/o1"
	writeLog(t, path, line+"\n")
	require.ErrorIs(t, WaitLines(context.Background(), path, 0, fast, Want{Line: Exact(line), AtLeast: 2}), ErrNotSeen)
	appendLog(t, path, line+"\n")
	require.NoError(t, WaitLines(context.Background(), path, 0, fast, Want{Line: Exact(line), AtLeast: 2}))
}

func TestPatternIsAnchored(t *testing.T) {
	m := Pattern(`shoppingmall-order replayed order=\S+ generation=\d+`)
	assert.True(t, m.Match("shoppingmall-order replayed order=o1 generation=2"))
	assert.False(t, m.Match("x shoppingmall-order replayed order=o1 generation=2"))
	assert.False(t, m.Match("shoppingmall-order replayed order=o1 generation=2 x"))
	f := MatchFunc("odd", func(l string) bool { return len(l)%2 == 1 })
	assert.True(t, f.Match("a"))
	assert.Equal(t, "odd", f.String())
}

func TestWaitLinesStopsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := WaitLines(ctx, path, 0, Poll{Interval: time.Hour, Attempts: 3}, Lines(Exact(ready))...)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.Canceled))
}
