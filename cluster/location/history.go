package location

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// OwnershipKind names what changed an identity's ownership.
type OwnershipKind string

const (
	// OwnershipActivated: a cold activation committed Ready (CommitReady);
	// Generation is the new generation, Member its owner.
	OwnershipActivated OwnershipKind = "activation"
	// OwnershipMoved: a planned relocation committed (CommitMove); Member
	// is the target, Generation unchanged.
	OwnershipMoved OwnershipKind = "relocation"
	// OwnershipClosed: the owner released after an explicit close.
	OwnershipClosed OwnershipKind = "close"
	// OwnershipIdle: the owner released on idle passivation.
	OwnershipIdle OwnershipKind = "idle"
	// OwnershipReleased: the owner released without saying why (see
	// WithReleaseReason).
	OwnershipReleased OwnershipKind = "release"
	// OwnershipDiscarded: an activation that owned nothing gave its
	// generation back; Generation is the one given back. When that leaves
	// generation 0 the record and its whole history are deleted instead.
	OwnershipDiscarded OwnershipKind = "discard"
	// OwnershipReleasedDead: a Ready record naming a provably dead pid was
	// repaired (ReleaseDead); Member is the owner it named.
	OwnershipReleasedDead OwnershipKind = "repair"
	// OwnershipTakenOver: a takeover reset the record (ResetTakenOver);
	// Member is the member taken over from, Generation the new (raised)
	// generation.
	OwnershipTakenOver OwnershipKind = "takeover"
)

// HistoryCap is how many of an identity's newest ownership events are kept.
const HistoryCap = 256

// OwnershipEvent is one entry of an identity's ownership history.
type OwnershipEvent struct {
	Kind       OwnershipKind
	Member     string // protoactor member id
	Generation int64
	AtUnixMs   int64 // the store's clock when the change was written
}

// historyLua is prepended to every script that changes ownership: it
// appends "kind|generation|unixMs|member" (member last, so a '|' in it
// cannot shift the other fields) and keeps the newest HistoryCap entries,
// trimming only once a push went over the cap (RPUSH answers the length).
var historyLua = `
local function history(key, kind, member, gen, ms)
  if redis.call('RPUSH', key, kind .. '|' .. tostring(gen) .. '|' .. tostring(ms) .. '|' .. member) > ` + strconv.Itoa(HistoryCap) + ` then
    redis.call('LTRIM', key, -` + strconv.Itoa(HistoryCap) + `, -1)
  end
end
`

// nowUnixMs is the time a script records: the store may read the clock,
// the domain may not.
func nowUnixMs() int64 { return time.Now().UnixMilli() }

type releaseReasonKey struct{}

// WithReleaseReason tells Release, through ctx, why the owner lets go
// (OwnershipClosed or OwnershipIdle), so the history can tell a close from
// an idle passivation; without it a release records OwnershipReleased.
func WithReleaseReason(ctx context.Context, reason OwnershipKind) context.Context {
	return context.WithValue(ctx, releaseReasonKey{}, reason)
}

func releaseReason(ctx context.Context) OwnershipKind {
	if r, ok := ctx.Value(releaseReasonKey{}).(OwnershipKind); ok && (r == OwnershipClosed || r == OwnershipIdle) {
		return r
	}
	return OwnershipReleased
}

// History returns the identity's ownership history, oldest first: at most
// the newest HistoryCap events. A never-seen identity, or one whose only
// activation was discarded, has none.
func (s *Redis) History(ctx context.Context, kind, id string) ([]OwnershipEvent, error) {
	if err := checkIdentity(id); err != nil {
		return nil, err
	}
	raw, err := s.rdb.LRange(ctx, s.keys.history(kind, id), 0, -1).Result()
	if err != nil {
		return nil, translate(err)
	}
	out := make([]OwnershipEvent, 0, len(raw))
	for i, r := range raw {
		ev, err := ParseOwnershipEvent(r)
		if err != nil {
			return nil, fmt.Errorf("location: history of %s entry #%d: %w", id, i+1, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// historyEntry is one stored history entry as historyLua writes it.
func historyEntry(kind OwnershipKind, member string, gen, unixMs int64) string {
	return string(kind) + "|" + strconv.FormatInt(gen, 10) + "|" + strconv.FormatInt(unixMs, 10) + "|" + member
}

// ParseOwnershipEvent decodes one stored history entry,
// "kind|generation|unixMs|member", for readers of the raw list (an offline
// checker reading a saved Redis).
func ParseOwnershipEvent(s string) (OwnershipEvent, error) {
	f := strings.SplitN(s, "|", 4)
	if len(f) != 4 {
		return OwnershipEvent{}, fmt.Errorf("ownership event %q: want kind|generation|unixMs|member", s)
	}
	g, err1 := strconv.ParseInt(f[1], 10, 64)
	ms, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || f[0] == "" {
		return OwnershipEvent{}, fmt.Errorf("ownership event %q: bad kind, generation or time", s)
	}
	return OwnershipEvent{Kind: OwnershipKind(f[0]), Generation: g, AtUnixMs: ms, Member: f[3]}, nil
}
