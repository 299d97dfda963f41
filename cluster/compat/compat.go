// Package compat owns the cluster-wide compatibility level of the event
// schema: which schema a writer may stamp while a rolling upgrade (or a
// rollback) has builds of different versions in one cluster.
//
// Expand, then contract. Every member advertises the newest event schema
// it reads with its node name (location.Members.PutMember); a new build
// first runs beside the old one writing what the old one reads, because
// a writer stamps the lower of the level and its own schema (Gate). Only
// once every live workflow member reads the new schema does the level
// rise: by an operator's command (Raise, `commerce-api admin schema
// raise`) or by itself when configured (GateConfig.AutoRaise). Either is
// recorded with who and when (location.SchemaLevel). The level never
// drops: an order may hold events of the higher schema, and only members
// that read it may own that order.
//
// Only workflow members count. An API hosts no orders and folds no
// stream: its readers of stored events (the timeline's envelopes, the
// self-check's tolerant decoder) show what is there without applying it,
// so an API of an older build neither blocks a raise nor is harmed by one.
//
// It works on the Location Store alone (cluster/location). It must not
// import protoactor, actors/..., edge or another store: the API's admin
// handler and the workflow member's wiring both hand it the live members
// as ids.
package compat

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// Store is the part of the Location Store the level needs.
type Store interface {
	location.SchemaLevels
	// MemberSchemas and MemberNames are location.Members'.
	MemberSchemas(ctx context.Context) (map[string]int, error)
	MemberNames(ctx context.Context) (map[string]string, error)
}

var (
	// ErrMembersBehind: a raise to a schema that a live workflow member
	// does not read (*BehindError names them). Nothing was changed.
	ErrMembersBehind = errkind.New(errkind.FailedPrecondition, "compat: a live workflow member does not read the schema")
	// ErrNoWorkflowMembers: a raise with no live workflow member to ask;
	// a raise needs at least one member that reads the new schema, or
	// nothing could own an order written at it.
	ErrNoWorkflowMembers = errkind.New(errkind.FailedPrecondition, "compat: no live workflow member")
)

// BehindError is ErrMembersBehind with the members that hold it back.
type BehindError struct {
	Schema int
	Behind []Member
}

func (e *BehindError) Error() string {
	parts := make([]string, 0, len(e.Behind))
	for _, m := range e.Behind {
		parts = append(parts, fmt.Sprintf("%s reads up to %d", m.label(), m.Schema))
	}
	return fmt.Sprintf("%v: schema %d: %s", ErrMembersBehind, e.Schema, strings.Join(parts, ", "))
}

// Unwrap makes a *BehindError match ErrMembersBehind and so its kind.
func (e *BehindError) Unwrap() error { return ErrMembersBehind }

// Member is one member as the level sees it.
type Member struct {
	ID   string `json:"memberId"`
	Node string `json:"node,omitempty"`
	// Schema is the newest event schema it reads: what it advertised, or
	// location.BaseSchema for a live workflow member of a build that
	// predates the advertisement; 0 for a member that hosts no orders.
	Schema int `json:"schema"`
	// Advertised: Schema is what the member published, not assumed.
	Advertised bool `json:"advertised"`
	// Workflow: a live workflow member, which the level counts.
	Workflow bool `json:"workflow"`
}

func (m Member) label() string {
	if m.Node != "" {
		return m.Node
	}
	return m.ID
}

// Report is the level and what every published member reads.
type Report struct {
	Level location.SchemaLevel `json:"level"`
	// History is the level's changes, newest first.
	History []location.SchemaLevel `json:"history"`
	// Members are every member with a published name or schema (a
	// member stays published until it is pruned after it left), live
	// workflow members first, then by node name.
	Members []Member `json:"members"`
	// Readable is the newest schema every live workflow member reads,
	// the highest level a raise can reach now; 0 with no live workflow
	// member.
	Readable int `json:"readable"`
}

// Status reads the level, its history and the members; live are the ids
// of the live workflow members, as the caller's topology sees them.
func Status(ctx context.Context, st Store, live []string) (Report, error) {
	lvl, err := st.SchemaLevel(ctx)
	if err != nil {
		return Report{}, err
	}
	hist, err := st.SchemaLevelHistory(ctx)
	if err != nil {
		return Report{}, err
	}
	members, readable, err := members(ctx, st, live)
	if err != nil {
		return Report{}, err
	}
	return Report{Level: lvl, History: hist, Members: members, Readable: readable}, nil
}

// Reads is the schema member id reads as the level counts it, from the
// advertised schemas: its own advertisement, or location.BaseSchema for
// a workflow member of a build that predates the advertisement.
func Reads(schemas map[string]int, id string) int {
	if s, ok := schemas[id]; ok {
		return s
	}
	return location.BaseSchema
}

// members joins names, advertised schemas and liveness.
func members(ctx context.Context, st Store, live []string) ([]Member, int, error) {
	names, err := st.MemberNames(ctx)
	if err != nil {
		return nil, 0, err
	}
	schemas, err := st.MemberSchemas(ctx)
	if err != nil {
		return nil, 0, err
	}
	byID := map[string]*Member{}
	get := func(id string) *Member {
		m := byID[id]
		if m == nil {
			m = &Member{ID: id, Node: names[id]}
			byID[id] = m
		}
		return m
	}
	for id := range names {
		get(id)
	}
	for id, s := range schemas {
		m := get(id)
		m.Schema, m.Advertised = s, true
	}
	readable := 0
	for _, id := range live {
		m := get(id)
		m.Workflow = true
		m.Schema = Reads(schemas, id)
		if readable == 0 || m.Schema < readable {
			readable = m.Schema
		}
	}
	out := make([]Member, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Workflow != out[j].Workflow {
			return out[i].Workflow
		}
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].ID < out[j].ID
	})
	return out, readable, nil
}

// Raise raises the level to to, recorded as by at at (auto: by itself),
// once every live workflow member (live, their ids) reads to: a member
// that does not fails it with a *BehindError, and no live workflow member
// with ErrNoWorkflowMembers, both before anything is written. A raise to
// the current level changes nothing (raised false); one below it fails
// with location.ErrSchemaLevelLower. A member that joins after the check
// with an older build is not refused here; placement keeps orders of a
// newer schema off it.
func Raise(ctx context.Context, st Store, live []string, to int, by string, auto bool, at time.Time) (location.SchemaLevel, bool, error) {
	if to < location.BaseSchema {
		return location.SchemaLevel{}, false, fmt.Errorf("%w: %d", location.ErrInvalidSchema, to)
	}
	if len(live) == 0 {
		return location.SchemaLevel{}, false, ErrNoWorkflowMembers
	}
	ms, _, err := members(ctx, st, live)
	if err != nil {
		return location.SchemaLevel{}, false, err
	}
	var behind []Member
	for _, m := range ms {
		if m.Workflow && m.Schema < to {
			behind = append(behind, m)
		}
	}
	if len(behind) > 0 {
		return location.SchemaLevel{}, false, &BehindError{Schema: to, Behind: behind}
	}
	return st.RaiseSchemaLevel(ctx, location.SchemaLevel{Level: to, RaisedBy: by, RaisedAtUnixMs: at.UnixMilli(), Auto: auto})
}
