package placement

import (
	"net"
	"strconv"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func member(t *testing.T, id, addr string) *pcluster.Member {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return &pcluster.Member{Id: id, Host: host, Port: int32(p), Kinds: []string{"k"}}
}

func wait(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no verdict on the link")
	}
}

// A member in the topology whose address takes no connection is down for
// this lookup: its calls answer at once, cold starts try it last, and the
// verdict lifts by itself once the address takes connections again.
// A member that accepts connections but never answers (frozen, or only
// slow) is not down.
func TestALinkThatTakesNoConnectionIsDownUntilItDoes(t *testing.T) {
	l := standaloneLookup(t, newStore(t))
	downAddr := freeAddr(t)
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = frozen.Close() })
	frozenAddr := frozen.Addr().String()
	a, b := member(t, "a", downAddr), member(t, "b", frozenAddr)
	l.mu.Lock()
	l.members = map[string]*pcluster.Member{"a": a, "b": b}
	l.byAddress = map[string]string{downAddr: "a", frozenAddr: "b"}
	l.mu.Unlock()

	require.False(t, l.linkDown(downAddr), "no verdict before a probe")
	done, down := l.probeLink(downAddr)
	wait(t, done)
	require.True(t, down())
	require.True(t, l.linkDown(downAddr))
	require.ErrorIs(t, l.lostOwner(ctx(t), downAddr, "takes no connection"), ErrOwnerUnreachable)

	done, down = l.probeLink(frozenAddr)
	wait(t, done)
	require.False(t, down(), "a listener that never answers is not a link down")
	require.False(t, l.linkDown(frozenAddr))
	// A second probe within linkUpFor reuses the verdict.
	again, _ := l.probeLink(frozenAddr)
	require.Equal(t, done, again)

	ms := []*pcluster.Member{a, b}
	for start := range 2 {
		got := l.downLinksLast(ms, start)
		require.Equal(t, []*pcluster.Member{b, a}, got, "start %d", start)
	}

	ln, err := net.Listen("tcp", downAddr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	require.Eventually(t, func() bool { return !l.linkDown(downAddr) }, 5*time.Second, 20*time.Millisecond,
		"the link is still down once its address takes connections")
	require.Equal(t, []*pcluster.Member{a, b}, l.downLinksLast(ms, 0))
}

// A link found down is forgotten once its member left the topology: the
// gone judging answers for it from then on.
func TestALinkDownIsForgottenWhenItsMemberLeaves(t *testing.T) {
	l := standaloneLookup(t, newStore(t))
	addr := freeAddr(t)
	l.mu.Lock()
	l.members = map[string]*pcluster.Member{"a": member(t, "a", addr)}
	l.byAddress = map[string]string{addr: "a"}
	l.mu.Unlock()
	done, down := l.probeLink(addr)
	wait(t, done)
	require.True(t, down())
	l.mu.Lock()
	l.members, l.byAddress = map[string]*pcluster.Member{}, map[string]string{}
	l.mu.Unlock()
	require.Eventually(t, func() bool { return !l.linkDown(addr) }, 5*time.Second, 20*time.Millisecond)
}
