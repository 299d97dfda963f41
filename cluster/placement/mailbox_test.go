package placement

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// A request that reaches a grain's mailbox behind the PoisonPill that
// stops it is answered as a dead letter, at once, not dropped for its
// caller to wait out: the race of a probe's follow-up call with the
// probe's stop, and of a command with an idle passivation.
func TestRequestBehindThePoisonPillIsADeadLetter(t *testing.T) {
	sys := actor.NewActorSystem()
	blocked, release := make(chan struct{}), make(chan struct{})
	props := actor.PropsFromFunc(func(c actor.Context) {
		if c.Message() == "block" {
			close(blocked)
			<-release
			c.Respond("done")
		}
	}, actor.WithDispatcher(hostDispatcher), actor.WithMailbox(hostMailbox(sys)))
	pid := sys.Root.Spawn(props)

	first := sys.Root.RequestFuture(pid, "block", 5*time.Second)
	<-blocked
	// Both queue behind the running message: the pill, then a request
	// that a caller holding the cached pid sends.
	sys.Root.Poison(pid)
	late := sys.Root.RequestFuture(pid, "late", 5*time.Second)
	close(release)

	res, err := first.Result()
	require.NoError(t, err)
	require.Equal(t, "done", res)
	start := time.Now()
	_, err = late.Result()
	require.ErrorIs(t, err, actor.ErrDeadLetter, "answered as a dead letter, not left to time out")
	require.Less(t, time.Since(start), 4*time.Second)
}

// A live grain's messages pass through untouched.
func TestHostMailboxDeliversWhileAlive(t *testing.T) {
	sys := actor.NewActorSystem()
	props := actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond(s + "!")
		}
	}, actor.WithDispatcher(hostDispatcher), actor.WithMailbox(hostMailbox(sys)))
	pid := sys.Root.Spawn(props)
	for _, m := range []string{"a", "b", "c"} {
		res, err := sys.Root.RequestFuture(pid, m, 5*time.Second).Result()
		require.NoError(t, err)
		require.Equal(t, m+"!", res)
	}
}
