package telemetry

import (
	"io"
	"log/slog"
	"sync"
)

// Evidence writes the spec's evidence lines (docs/contract.md) whole: one
// Write per line under one mutex, so the lines of concurrent writers
// (the grains of many orders, the workflow service, concurrent requests)
// never interleave. A failed write is logged, never returned: evidence
// never fails an order or a request. Safe for concurrent use.
type Evidence struct {
	mu  sync.Mutex
	w   io.Writer
	log *slog.Logger
}

// NewEvidence returns the evidence writer of w: w itself when it already
// is one, so the parts of a process that share a writer share its lock;
// nil w discards, nil log does not log.
func NewEvidence(w io.Writer, log *slog.Logger) *Evidence {
	if e, ok := w.(*Evidence); ok {
		return e
	}
	if w == nil {
		w = io.Discard
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Evidence{w: w, log: log}
}

// Line writes s and a newline in one Write.
func (e *Evidence) Line(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := io.WriteString(e.w, s+"\n"); err != nil {
		e.log.Warn("evidence write failed", slog.String("line", s), slog.Any("error", err))
	}
}

// Write implements io.Writer for a part that takes its evidence as one:
// p goes out in one Write under the lock, as it is.
func (e *Evidence) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.Write(p)
}
