package telemetry

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Bearer is the token that guards a process's private listeners (the
// workflow's ops listener, the API's admin listener). The zero value
// guards nothing.
type Bearer struct {
	sum [sha256.Size]byte
	set bool
}

// NewBearer returns the check of token; an empty token guards nothing.
func NewBearer(token string) Bearer {
	if token == "" {
		return Bearer{}
	}
	return Bearer{sum: sha256.Sum256([]byte(token)), set: true}
}

// Guards reports whether a token was set.
func (b Bearer) Guards() bool { return b.set }

// Check reports whether r may pass: no token is set, or r carries
// `Authorization: Bearer <token>`. presented says whether r carried a
// bearer token at all, right or wrong, for the caller's log (which must
// never hold what was sent). Both sides are hashed before the
// constant-time comparison, so neither the token nor its length shows
// in the timing.
func (b Bearer) Check(r *http.Request) (ok, presented bool) {
	got, presented := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !b.set {
		return true, presented
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return presented && subtle.ConstantTimeCompare(sum[:], b.sum[:]) == 1, presented
}

// WriteBody writes b as a reply of contentType, the way every listener
// of the project replies: a Content-Length, no caching, and a trailing
// newline.
func WriteBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteJSON writes v's JSON encoding as an application/json reply
// (WriteBody). A value that does not encode writes nothing and returns
// the error, for the caller to answer as it answers an internal error.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	WriteBody(w, status, "application/json", b)
	return nil
}
