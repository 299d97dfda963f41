package placement

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

func members(ids ...string) []*pcluster.Member {
	out := make([]*pcluster.Member, len(ids))
	for i, id := range ids {
		out[i] = &pcluster.Member{Id: id}
	}
	return out
}

func ids(ms []*pcluster.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Id
	}
	return out
}

// An activation goes only to members that read the identity's state: in
// a cluster where every candidate reads the level nothing is read (no
// state holds more than the level); in a mixed one the state's highest
// schema is read once and the members known to read it go first, those
// not yet seen after them (in a cluster that is not mixed, a member not
// seen yet is asked in turn), and those known not to are never asked. None
// left is VERSION_UNSUPPORTED at once; a schema that cannot be read
// leaves every member to its own refusal.
func TestPlacementAsksOnlyMembersThatReadTheState(t *testing.T) {
	s := newStore(t)
	var reads atomic.Int64
	need, fail := 1, false
	l := New(Config{Store: s, Logger: quietLog(), StateSchema: func(_ context.Context, kind, id string) (int, error) {
		reads.Add(1)
		if fail {
			return 0, errors.New("store down")
		}
		return need, nil
	}})
	put := func(id string, schema int) { require.NoError(t, s.PutMember(ctx(t), id, "node-"+id, schema)) }
	readers := func(cands ...string) ([]string, error) {
		t.Helper()
		out, err := l.readers(ctx(t), "k", "o1", members(cands...))
		return ids(out), err
	}

	got, err := readers("m-a", "m-b")
	require.NoError(t, err)
	require.Equal(t, []string{"m-a", "m-b"}, got, "nothing known yet: every member, by trial")

	put("m-a", 2)
	put("m-b", 2)
	require.NoError(t, l.refreshSchemas(ctx(t)))
	got, err = readers("m-a", "m-b")
	require.NoError(t, err)
	require.Equal(t, []string{"m-a", "m-b"}, got)
	require.Zero(t, reads.Load(), "every candidate reads the level: no state is read")
	got, err = readers("m-new", "m-a")
	require.NoError(t, err)
	require.Equal(t, []string{"m-new", "m-a"}, got, "a member not seen yet does not make the cluster mixed: asked in turn")
	require.Zero(t, reads.Load(), "nor does it make placement read the state")

	_, _, err = s.RaiseSchemaLevel(ctx(t), location.SchemaLevel{Level: 2, RaisedBy: "test"})
	require.NoError(t, err)
	put("m-old", 1)
	require.NoError(t, l.refreshSchemas(ctx(t)))
	need = 2
	got, err = readers("m-old", "m-new", "m-a")
	require.NoError(t, err)
	require.Equal(t, []string{"m-a", "m-new"}, got, "m-old never asked; m-new, not seen yet, after m-a")
	require.EqualValues(t, 1, reads.Load())

	need = 1
	got, err = readers("m-old", "m-a")
	require.NoError(t, err)
	require.Equal(t, []string{"m-old", "m-a"}, got, "an order of the base schema goes anywhere")

	need = 2
	_, err = readers("m-old")
	require.ErrorIs(t, err, ErrVersionUnsupported)
	require.Equal(t, errkind.VersionUnsupported, errkind.Of(err))

	fail = true
	got, err = readers("m-old", "m-a")
	require.NoError(t, err)
	require.Equal(t, []string{"m-old", "m-a"}, got, "the state's schema unknown: every member decides for itself")

	plain := New(Config{Store: s, Logger: quietLog()})
	require.NoError(t, plain.refreshSchemas(ctx(t)))
	all, err := plain.readers(ctx(t), "k", "o1", members("m-old"))
	require.NoError(t, err)
	require.Equal(t, []string{"m-old"}, ids(all), "without StateSchema placement does not look")
}
