package placement

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shoppingmall-go/shoppingmall/eventstore/errkind"
)

// withNewerField appends field 99, a varint: what a newer build's extra
// field encodes to.
func withNewerField(t *testing.T, m proto.Message) []byte {
	t.Helper()
	raw, err := proto.Marshal(m)
	require.NoError(t, err)
	return protowire.AppendVarint(protowire.AppendTag(raw, 99, protowire.VarintType), 1)
}

// The activation messages cross builds during a rolling upgrade: an
// Activate with a field a newer caller added reaches an older activator
// with every field it knows, and an Activated answer with a newer field
// reaches an older caller the same way. A reason this build has no name
// for activates as any command's activation would.
func TestActivationMessagesOfANewerBuildAreRead(t *testing.T) {
	in := &Activate{Kind: "k", Identity: "o1", Generation: 7, Reason: ActivationReason_ACTIVATION_REASON_RELOCATION,
		DeadlineUnixMs: 9, Token: "tok", Minted: true}
	var got Activate
	require.NoError(t, proto.Unmarshal(withNewerField(t, in), &got))
	require.True(t, proto.Equal(in, &Activate{Kind: got.Kind, Identity: got.Identity, Generation: got.Generation, Reason: got.Reason,
		DeadlineUnixMs: got.DeadlineUnixMs, Token: got.Token, Minted: got.Minted}))

	// A newer activation reason decodes as its number; the activator does
	// not act on the reason's name.
	raw, err := proto.Marshal(&Activate{Kind: "k", Identity: "o1", Reason: ActivationReason(42)})
	require.NoError(t, err)
	require.NoError(t, proto.Unmarshal(raw, &got))
	require.EqualValues(t, 42, got.Reason)
	require.Equal(t, causeUnknown, Cause(got.Reason), "counted, as an activation of no known cause")

	out := &Activated{Failure: ActivationFailure_ACTIVATION_FAILURE_OVERLOADED, Error: "busy", FenceGeneration: 3}
	var back Activated
	require.NoError(t, proto.Unmarshal(withNewerField(t, out), &back))
	require.Equal(t, out.Failure, back.Failure)
	require.Equal(t, "busy", back.Error)
	require.EqualValues(t, 3, back.FenceGeneration)
}

// A failure code of a newer build is a refusal this build has no name
// for: the next member is asked, and with none left it is
// VERSION_UNSUPPORTED, a well-formed 503, never a 500 or a bug. The codes
// this build knows keep their meaning.
func TestAnActivationFailureOfANewerBuildIsVersionUnsupported(t *testing.T) {
	raw, err := proto.Marshal(&Activated{Failure: ActivationFailure(77), Error: "a reason of a newer build"})
	require.NoError(t, err)
	var a Activated
	require.NoError(t, proto.Unmarshal(raw, &a))
	e := &activationError{member: "m-new", failure: a.Failure, text: a.Error}
	require.True(t, e.newer())
	require.True(t, e.tryNext(), "another member may take it")
	require.ErrorIs(t, e, ErrVersionUnsupported)
	require.Equal(t, errkind.VersionUnsupported, errkind.Of(e))

	for n := range ActivationFailure_name {
		known := &activationError{member: "m", failure: ActivationFailure(n)}
		require.False(t, known.newer(), "%s", ActivationFailure(n))
		if ActivationFailure(n) != ActivationFailure_ACTIVATION_FAILURE_VERSION_UNSUPPORTED {
			require.False(t, errors.Is(known, ErrVersionUnsupported), "%s", ActivationFailure(n))
		}
	}
	require.False(t, (&activationError{member: "m", timeout: true}).newer())
}
