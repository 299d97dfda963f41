package errkind

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSentinelIsItselfAndItsKind(t *testing.T) {
	errGone := New(OwnerGone, "pkg: owner gone")
	errOther := New(OwnerGone, "pkg: owner gone")
	wrapped := fmt.Errorf("order o-1: %w", errGone)

	require.Equal(t, "pkg: owner gone", errGone.Error(), "the kind adds nothing to the message")
	require.ErrorIs(t, wrapped, errGone)
	require.ErrorIs(t, wrapped, OwnerGone)
	require.NotErrorIs(t, wrapped, errOther, "two sentinels of one kind stay distinct")
	require.NotErrorIs(t, wrapped, StoreUnavailable)
	require.Equal(t, OwnerGone, Of(wrapped))
}

func TestOfTakesTheFirstKindInPrecedence(t *testing.T) {
	store := New(StoreUnavailable, "store: unavailable")
	noMember := New(NoEligibleMember, "lookup: no eligible member")
	rolledBack := New(RelocationRolledBack, "lookup: relocation rolled back")
	precondition := New(FailedPrecondition, "grain: failed precondition")
	cases := []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Internal},
		{"no kind", errors.New("disk on fire"), Internal},
		{"internal sentinel", New(Internal, "grain: internal"), Internal},
		{"deadline", context.DeadlineExceeded, Timeout},
		{"canceled", context.Canceled, Canceled},
		{"store wrapping a deadline", fmt.Errorf("%w: %w", store, context.DeadlineExceeded), Timeout},
		{"store wrapping a cancel", fmt.Errorf("%w: %w", store, context.Canceled), Canceled},
		{"rolled back for want of a member", fmt.Errorf("%w: %w", rolledBack, noMember), NoEligibleMember},
		{"precondition over the outage behind it", fmt.Errorf("%w: %w: %w", precondition, rolledBack, noMember), FailedPrecondition},
		{"not found over the store", fmt.Errorf("%w: %w", New(NotFound, "x"), store), NotFound},
		{"a bare kind", fmt.Errorf("op: %w", Conflict), Conflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Of(tc.err))
		})
	}
	for _, k := range All() {
		require.Equal(t, k, Of(fmt.Errorf("wrapped: %w", New(k, "s"))), "kind %s", k)
	}
}

func TestEveryKindHasANameAndAPlace(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range All() {
		require.NotEqual(t, "unknown kind", k.String())
		require.False(t, seen[k.String()], "duplicate name %s", k)
		seen[k.String()] = true
		if k != Internal {
			require.Contains(t, precedence, k, "Of never returns %s", k)
		}
	}
	require.Equal(t, "unknown kind", Kind(len(names)).String())
}

// TestImportsOnlyTheStandardLibrary enforces the package contract: every
// layer above the domain imports this package, so it imports nothing.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		checked++
		for _, imp := range parsed.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			first, _, _ := strings.Cut(path, "/")
			require.NotContains(t, first, ".", "%s imports %s", f, path)
		}
	}
	require.Positive(t, checked)
}
