package location

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// A member is "gone" once any member saw it leave the topology and
// recorded that in the Location Store. protoactor blocks a member id for
// good once it put it in a topology's Left, but only in the view of the
// members that saw it; the record makes the verdict the same everywhere:
// every lookup answers Unavailable for the gone member's orders, even one
// that still sees it live, and the gone member itself learns of it and
// fences itself (see package placement). The record is never undone: a member comes
// back only as a new incarnation with a new member id.

// GoneMember is the record that a member left the topology. The first
// record of a member id wins; later observations do not move LeftAtUnixMs.
type GoneMember struct {
	MemberID string `json:"-"`
	// Node is the node name the member published, empty if it never did.
	Node string `json:"node"`
	// LeftAtUnixMs is when the recording member saw it leave.
	LeftAtUnixMs int64 `json:"leftAtUnixMs"`
}

// translateGone is translate, keeping a closed client recognisable so a
// background loop of a member that was stopped ends quietly.
func translateGone(err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrStoreUnavailable, ErrClosed)
	}
	return translate(err)
}

var markGone = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then return 1 end
return 0
`)

// MarkGone records that memberID (node name node, possibly empty) left
// the topology at leftAtUnixMs. The first record of a member id wins and
// is never changed: won reports whether this call wrote it. Repeating it
// is harmless.
func (s *Redis) MarkGone(ctx context.Context, memberID, node string, leftAtUnixMs int64) (won bool, err error) {
	if memberID == "" {
		return false, fmt.Errorf("%w: empty member id", ErrInvalidIdentity)
	}
	v, err := json.Marshal(GoneMember{Node: node, LeftAtUnixMs: leftAtUnixMs})
	if err != nil {
		return false, err
	}
	n, err := markGone.Run(ctx, s.rdb, []string{s.keys.gone()}, memberID, string(v)).Int()
	if err != nil {
		return false, translateGone(err)
	}
	return n == 1, nil
}

// Gone returns every member recorded gone, by member id.
func (s *Redis) Gone(ctx context.Context) (map[string]GoneMember, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.gone()).Result()
	if err != nil {
		return nil, translateGone(err)
	}
	out := make(map[string]GoneMember, len(m))
	for id, v := range m {
		out[id] = goneFrom(id, v)
	}
	return out, nil
}

// IsGone returns memberID's gone record, if there is one.
func (s *Redis) IsGone(ctx context.Context, memberID string) (GoneMember, bool, error) {
	v, err := s.rdb.HGet(ctx, s.keys.gone(), memberID).Result()
	if errors.Is(err, redis.Nil) {
		return GoneMember{}, false, nil
	}
	if err != nil {
		return GoneMember{}, false, translateGone(err)
	}
	return goneFrom(memberID, v), true, nil
}

// GoneCount is the number of gone records: they are only ever added, so
// a changed count is how a lookup learns, in one cheap command, that it
// must read them again.
func (s *Redis) GoneCount(ctx context.Context) (int64, error) {
	n, err := s.rdb.HLen(ctx, s.keys.gone()).Result()
	return n, translateGone(err)
}

// MemberName returns the node name memberID published, "" if none.
func (s *Redis) MemberName(ctx context.Context, memberID string) (string, error) {
	v, err := s.rdb.HGet(ctx, s.keys.members(), memberID).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, translateGone(err)
}

// goneFrom decodes a stored record. One that cannot be decoded still
// says the member is gone: its existence is the verdict.
func goneFrom(id, v string) GoneMember {
	var g GoneMember
	_ = json.Unmarshal([]byte(v), &g)
	g.MemberID = id
	return g
}
