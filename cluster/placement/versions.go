package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

// Placement follows versions: an identity goes only to a member whose
// build reads its state. Each member advertises the newest event schema
// it reads (Config.Schema, location.Members.PutMember), and the cluster's
// compatibility level bounds what any state holds, since writers stamp at
// most the level (cluster/compat). So while every candidate reads the
// level, any of them reads any state and nothing more is read; only in a
// mixed cluster (a rolling upgrade or a rollback: a member known to read
// less than the level) does a cold activation or a relocation read the
// identity's highest schema (Config.StateSchema, one field) and keep the
// members that read it. A member whose build reads less is never asked;
// one whose advertisement this member has not seen yet counts as a
// reader of the level in a cluster that is not mixed, and is asked after
// those known to read the state in one that is; its build's own refusal
// (ACTIVATION_FAILURE_VERSION_UNSUPPORTED) stays the last word. With no
// member left that reads the state, the call fails as
// ErrVersionUnsupported at once.

// schemaRefresh is how often the view is read again besides on a join:
// a raise of the level or a member's new advertisement reaches placement
// within it, for two small reads.
const schemaRefresh = 2 * time.Second

// schemaView is this member's cached view of the advertisements and the
// level, read every schemaRefresh and at once when a member joins. A
// stale view costs at most an activation asked of a member whose build
// then refuses it.
type schemaView struct {
	mu      sync.Mutex
	level   int
	members map[string]int
	read    bool
	nudge   chan struct{}
}

// startSchemas starts the view's refresh, from Setup, when placement
// looks at versions (Config.StateSchema).
func (l *Lookup) startSchemas() {
	if l.cfg.StateSchema == nil {
		return
	}
	l.schemas.nudge = make(chan struct{}, 1)
	go l.refreshSchemasLoop()
}

// nudgeSchemas asks the view's refresh to read now (a member joined).
func (l *Lookup) nudgeSchemas() {
	if l.schemas.nudge == nil {
		return
	}
	select {
	case l.schemas.nudge <- struct{}{}:
	default:
	}
}

func (l *Lookup) refreshSchemasLoop() {
	t := time.NewTicker(schemaRefresh)
	defer t.Stop()
	for {
		if l.stopped() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), goneReadTimeout)
		err := l.refreshSchemas(ctx)
		cancel()
		if errors.Is(err, location.ErrClosed) {
			return
		}
		if err != nil {
			l.log.Debug("reading the members' schemas failed; placement keeps its last view", slog.Any("error", err))
		}
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.schemas.nudge:
		}
	}
}

// refreshSchemas reads the advertisements and the level into the view.
func (l *Lookup) refreshSchemas(ctx context.Context) error {
	if l.cfg.StateSchema == nil {
		return nil
	}
	ms, err := l.store.MemberSchemas(ctx)
	if err != nil {
		return err
	}
	lvl, err := l.store.SchemaLevel(ctx)
	if err != nil {
		return err
	}
	l.schemas.mu.Lock()
	l.schemas.members, l.schemas.level, l.schemas.read = ms, lvl.Level, true
	l.schemas.mu.Unlock()
	return nil
}

// readers orders candidates for an identity's activation by whether they
// read its state: those known to, then those whose advertisement is not
// known here, each in the given order; those known not to are dropped.
// None left is ErrVersionUnsupported. A state schema that cannot be read
// keeps every candidate: the members' own refusals decide then.
func (l *Lookup) readers(ctx context.Context, kind, id string, candidates []*pcluster.Member) ([]*pcluster.Member, error) {
	if l.cfg.StateSchema == nil || len(candidates) == 0 {
		return candidates, nil
	}
	l.schemas.mu.Lock()
	level, known, read := l.schemas.level, l.schemas.members, l.schemas.read
	l.schemas.mu.Unlock()
	if !read {
		return candidates, nil
	}
	// A member whose advertisement is not read yet (one that joined
	// within the last refresh) does not make the cluster mixed: every
	// build reads the level it joined under, and one that joined below a
	// raised level refuses the activation itself, costing one hop.
	// Trying it last instead would send every cold start of its first
	// seconds to the others.
	uniform := true
	for _, m := range candidates {
		if s, ok := known[m.Id]; ok && s < level {
			uniform = false
			break
		}
	}
	if uniform {
		return candidates, nil
	}
	need, err := l.cfg.StateSchema(ctx, kind, id)
	if err != nil {
		l.log.Debug("reading the state's schema failed; asking every member", slog.String("identity", kind+"/"+id), slog.Any("error", err))
		return candidates, nil
	}
	var sure, unsure []*pcluster.Member
	for _, m := range candidates {
		s, ok := known[m.Id]
		switch {
		case !ok:
			unsure = append(unsure, m)
		case s >= need:
			sure = append(sure, m)
		}
	}
	out := append(sure, unsure...)
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s/%s holds event schema %d, and no live member reads it", ErrVersionUnsupported, kind, id, need)
	}
	return out, nil
}

// SchemaView is placement's current view: the level and each member's
// advertised schema as last read, and whether it was read at all.
func (l *Lookup) SchemaView() (level int, members map[string]int, read bool) {
	l.schemas.mu.Lock()
	defer l.schemas.mu.Unlock()
	return l.schemas.level, maps.Clone(l.schemas.members), l.schemas.read
}
