package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// ErrNotSeen: a log wait used its whole budget without seeing every line
// it waited for.
var ErrNotSeen = errors.New("cluster: log lines not seen")

// Poll is a bounded polling budget: at most Attempts looks, Interval apart.
type Poll struct {
	Interval time.Duration
	Attempts int
}

// DefaultPoll is the budget for every log wait, readiness and evidence alike
// (docs/contract.md, "Evidence lines"): every 100 ms, at most 300 times.
var DefaultPoll = Poll{Interval: 100 * time.Millisecond, Attempts: 300}

func (p Poll) orDefault() Poll {
	if p.Interval <= 0 {
		p.Interval = DefaultPoll.Interval
	}
	if p.Attempts <= 0 {
		p.Attempts = DefaultPoll.Attempts
	}
	return p
}

// Matcher decides whether one whole log line (without its line ending)
// is the line a caller looks for.
type Matcher interface {
	Match(line string) bool
	String() string
}

type exact string

func (e exact) Match(line string) bool { return line == string(e) }
func (e exact) String() string         { return string(e) }

// Exact matches a line equal to s, byte for byte: a line that merely
// contains s (a structured log quoting it, a longer id) does not match.
func Exact(s string) Matcher { return exact(s) }

type pattern struct{ re *regexp.Regexp }

func (p pattern) Match(line string) bool { return p.re.MatchString(line) }
func (p pattern) String() string         { return p.re.String() }

// Pattern matches a whole line against the regular expression expr; it is
// anchored at both ends whatever expr says. It panics on an invalid
// expression, which is a programming mistake.
func Pattern(expr string) Matcher {
	return pattern{regexp.MustCompile(`^(?:` + expr + `)$`)}
}

type matchFunc struct {
	desc string
	fn   func(string) bool
}

func (m matchFunc) Match(line string) bool { return m.fn(line) }
func (m matchFunc) String() string         { return m.desc }

// MatchFunc matches the whole lines fn accepts; desc names them in
// errors.
func MatchFunc(desc string, fn func(line string) bool) Matcher { return matchFunc{desc, fn} }

// LogCursor reads one log file incrementally from an offset and counts
// whole lines by matcher. Only newline-terminated lines are counted, so a
// line still being written is never judged by its first half. It is not
// safe for concurrent use.
type LogCursor struct {
	path    string
	offset  int64
	partial []byte
	lines   []string
}

// NewLogCursor starts reading path at byte offset from. A file that does
// not exist yet reads as empty.
func NewLogCursor(path string, from int64) *LogCursor {
	return &LogCursor{path: path, offset: from}
}

// Refresh reads what was appended since the last call.
func (c *LogCursor) Refresh() error {
	f, err := os.Open(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: read log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return fmt.Errorf("cluster: read log %s: %w", c.path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("cluster: read log %s: %w", c.path, err)
	}
	c.offset += int64(len(b))
	buf := append(c.partial, b...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		c.lines = append(c.lines, strings.TrimSuffix(string(buf[:i]), "\r"))
		buf = buf[i+1:]
	}
	c.partial = append([]byte(nil), buf...)
	return nil
}

// Count returns how many complete lines read so far m matches.
func (c *LogCursor) Count(m Matcher) int {
	n := 0
	for _, l := range c.lines {
		if m.Match(l) {
			n++
		}
	}
	return n
}

// Lines returns the complete lines read so far that m matches.
func (c *LogCursor) Lines(m Matcher) []string {
	var out []string
	for _, l := range c.lines {
		if m.Match(l) {
			out = append(out, l)
		}
	}
	return out
}

// LogSize returns the current size of the log at path (0 if absent), the
// offset from which a wait sees only what is written afterwards.
func LogSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: stat log: %w", err)
	}
	return fi.Size(), nil
}

// CountLines reads the log at path from offset from and counts the whole
// lines m matches. It is a single read: callers that wait for a line use
// WaitLines; CountLines is for counts taken after such a wait.
func CountLines(path string, from int64, m Matcher) (int, error) {
	c := NewLogCursor(path, from)
	if err := c.Refresh(); err != nil {
		return 0, err
	}
	return c.Count(m), nil
}

// Want is one line a wait expects AtLeast times (1 when zero).
type Want struct {
	Line    Matcher
	AtLeast int
}

// Lines turns matchers into Wants of at least one occurrence each.
func Lines(ms ...Matcher) []Want {
	out := make([]Want, len(ms))
	for i, m := range ms {
		out[i] = Want{Line: m, AtLeast: 1}
	}
	return out
}

// NotSeenError names the lines a wait did not see, per log file.
type NotSeenError struct {
	Path     string
	Attempts int
	Missing  []string
}

func (e *NotSeenError) Error() string {
	return fmt.Sprintf("%v: %s after %d looks: missing %q", ErrNotSeen, e.Path, e.Attempts, e.Missing)
}

func (e *NotSeenError) Unwrap() error { return ErrNotSeen }

// WaitLines polls one log file, from offset from, until every Want is
// seen at least its number of times as a whole line, looking at most
// poll.Attempts times poll.Interval apart. Each call watches one file: callers needing a line in several logs wait on
// each separately, so a match in one log never stands in for another.
func WaitLines(ctx context.Context, path string, from int64, poll Poll, want ...Want) error {
	poll = poll.orDefault()
	c := NewLogCursor(path, from)
	var missing []string
	for attempt := 1; ; attempt++ {
		if err := c.Refresh(); err != nil {
			return err
		}
		missing = missing[:0]
		for _, w := range want {
			n := w.AtLeast
			if n <= 0 {
				n = 1
			}
			if c.Count(w.Line) < n {
				missing = append(missing, w.Line.String())
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if attempt >= poll.Attempts {
			return &NotSeenError{Path: path, Attempts: attempt, Missing: append([]string(nil), missing...)}
		}
		t := time.NewTimer(poll.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cluster: waiting for %s: %w (missing %q)", path, ctx.Err(), missing)
		case <-t.C:
		}
	}
}
