package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/runner/localcluster"
	"github.com/shoppingmall-go/shoppingmall/runner/localcluster/proctest"
)

// activationSkipPattern matches the API's structured log line for an
// activation request to a member that timed out, after which the lookup
// tries the next member. Adjust it here if the line's wording changes.
const activationSkipPattern = `activation.*trying next|trying next.*activation`

var activationSkip = regexp.MustCompile(activationSkipPattern)

const (
	// frozenStarts new orders are started at once while one workflow
	// member is frozen, half through each API: each API picks the member
	// for a cold activation round-robin, so some ask the frozen one first.
	frozenStarts = 8
	// activationTimeout is the per-member activation timeout the lookup
	// is expected to use (about 1 s): a start that asked the frozen member
	// first answers after about this long.
	activationTimeout = time.Second
	// freezeMax bounds the SIGSTOP. It must stay below protoactor's
	// eviction of a silent member: the automanaged provider polls every
	// member's /_health each -refresh (500 ms) with a 2 s HTTP client
	// timeout (automanaged.NewWithConfig), and a member whose check fails
	// drops out of the topology (and is then blocked for good). A check in
	// flight when the member froze can fail 2 s after the freeze, so the
	// member thaws before that; the margin over activationTimeout is what
	// a start has to move on and finish.
	freezeMax = 1800 * time.Millisecond
)

// TestColdStartSurvivesFrozenMember: with workflow-a frozen (SIGSTOP, not
// long enough to be evicted), frozenStarts new orders cold-activate; those
// whose round-robin choice is the frozen member must time out on it and
// activate on the next member. Every start answers 201 (none 500 or 504)
// while the member is still frozen, the API logs show an activation moved
// on, and every order confirms. After SIGCONT the member serves again.
func TestColdStartSurvivesFrozenMember(t *testing.T) {
	f := startCluster(t, clusterOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)

	// Warm-up: round-robin puts orders from each API on both workflow
	// members, so every remote connection is open before the freeze.
	var warm []string
	for i := 0; i < 4; i++ {
		a := f.start(ctx, i%len(f.apis), fmt.Sprintf("frozen-%s-warm-%d", run, i))
		require.True(t, a.acked(), "warm-up start: %s", a)
		warm = append(warm, a.orderID)
	}
	final, at := f.waitTerminal(ctx, warm, time.Now().Add(30*time.Second))
	require.False(t, at.IsZero(), "warm-up orders not terminal: %v", final)

	offsets := map[string]int64{}
	for _, n := range f.apiNames {
		off, err := localcluster.LogSize(f.c.LogPath(n))
		require.NoError(t, err)
		offsets[n] = off
	}

	frozen := localcluster.WorkflowA
	pid := f.c.PID(frozen)
	require.NotZero(t, pid, "%s has no PID", frozen)
	var thawOnce sync.Once
	var thawAt time.Time
	thaw := func() {
		thawOnce.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Logf("SIGCONT %s pid %d: %v", frozen, pid, err)
			}
			thawAt = time.Now()
		})
	}
	t.Cleanup(thaw) // runs before the cluster's cleanup: never leave it stopped

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	frozenAt := time.Now()
	t.Logf("SIGSTOP %s pid=%d", frozen, pid)
	require.Eventually(t, func() bool { return proctest.ProcState(pid) == "T" }, time.Second, 5*time.Millisecond,
		"%s pid %d did not stop", frozen, pid)

	res := make([]attempt, frozenStarts)
	var wg sync.WaitGroup
	for i := range frozenStarts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = f.start(ctx, i%len(f.apis), fmt.Sprintf("frozen-%s-%02d", run, i))
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(frozenAt.Add(freezeMax))):
	}
	thaw()
	t.Logf("SIGCONT %s after %s frozen", frozen, thawAt.Sub(frozenAt).Round(time.Millisecond))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "starts still unanswered 30 s after the thaw")
	}

	var ids []string
	for _, a := range res {
		t.Logf("start: %s", a)
		if !assert.Equal(t, http.StatusCreated, a.status, "every start while a member is frozen must be 201: %s", a) {
			continue
		}
		ids = append(ids, a.orderID)
		assert.True(t, a.end.Before(thawAt),
			"%s answered %s after the freeze, only once %s was thawed (%s): the activation waited for the frozen member instead of moving on after about %s",
			a.key, a.end.Sub(frozenAt).Round(time.Millisecond), frozen, thawAt.Sub(frozenAt).Round(time.Millisecond), activationTimeout)
	}

	// Proof that the frozen member was asked first for at least one order.
	var skips []string
	for _, n := range f.apiNames {
		lines, err := logLines(f.c.LogPath(n), offsets[n], activationSkip)
		require.NoError(t, err)
		for _, l := range lines {
			skips = append(skips, n+": "+l)
		}
	}
	for _, l := range firstN(skips, 5) {
		t.Logf("activation moved on: %s", l)
	}
	assert.NotEmpty(t, skips, "no API logged an activation that timed out and tried the next member (pattern %q): the frozen member was never asked first, or the line is missing", activationSkipPattern)
	// When the frozen incarnation's member id is known (its start-up
	// record), a skip line must name it: the member that timed out is the
	// frozen one.
	if member := memberID(t, f.c.LogPath(frozen), frozen); member != "" && len(skips) > 0 {
		named := 0
		for _, l := range skips {
			if strings.Contains(l, member) {
				named++
			}
		}
		t.Logf("%d of %d activation skips name %s's member %s", named, len(skips), frozen, member)
		assert.NotZero(t, named, "no activation skip names the frozen member %s (%s)", member, frozen)
	}

	final, _ = f.waitTerminal(ctx, ids, time.Now().Add(30*time.Second))
	for _, id := range ids {
		assert.Equal(t, "Confirmed", final[id], "order %s started while %s was frozen", id, frozen)
	}

	// After the thaw the member is still in the cluster and serves: new
	// cold activations, round-robin again, all succeed.
	var after []string
	for i := range frozenStarts {
		a := f.start(ctx, i%len(f.apis), fmt.Sprintf("frozen-%s-after-%02d", run, i))
		if assert.Equal(t, http.StatusCreated, a.status, "start after the thaw: %s", a) {
			after = append(after, a.orderID)
		}
	}
	final, _ = f.waitTerminal(ctx, after, time.Now().Add(30*time.Second))
	for _, id := range after {
		assert.Equal(t, "Confirmed", final[id], "order %s started after the thaw", id)
	}

	// Harness check: the freeze stayed shorter than eviction.
	for _, n := range f.apiNames {
		lines, err := logLines(f.c.LogPath(n), offsets[n],
			regexp.MustCompile("^"+regexp.QuoteMeta("shoppingmall-topology left node="+n+" target="+frozen)+"$"))
		require.NoError(t, err)
		assert.Empty(t, lines, "harness: %s saw %s leave during a %s freeze; freezeMax exceeds the member eviction", n, frozen, thawAt.Sub(frozenAt).Round(time.Millisecond))
	}
}

// memberID returns the member id the node's last incarnation logged in
// its start-up record ({"msg":"order-workflow started","node":...,
// "member":...}), or "" if there is none.
func memberID(t *testing.T, path, node string) string {
	c := localcluster.NewLogCursor(path, 0)
	require.NoError(t, c.Refresh())
	id := ""
	for _, l := range c.Lines(localcluster.WorkflowJoined(node)) {
		var rec struct {
			Member string `json:"member"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Member != "" {
			id = rec.Member
		}
	}
	return id
}
