package placement

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoppingmall-go/shoppingmall/cluster/location"
)

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runWatch runs watchSelf in the background; the channel yields its
// result and when it returned.
type watchResult struct {
	err error
	at  time.Time
}

func runWatch(ctx context.Context, cfg SelfFenceConfig, probe func(context.Context) (location.GoneMember, bool, error)) <-chan watchResult {
	out := make(chan watchResult, 1)
	go func() {
		err := watchSelf(ctx, cfg.withDefaults(), probe, quietLog(), nil)
		out <- watchResult{err, time.Now()}
	}()
	return out
}

func TestWatchSelfFencesOnOwnGoneRecord(t *testing.T) {
	var gone atomic.Bool
	var probes atomic.Int32
	res := runWatch(ctx(t), SelfFenceConfig{Lease: 10 * time.Second, Interval: 10 * time.Millisecond},
		func(context.Context) (location.GoneMember, bool, error) {
			probes.Add(1)
			if gone.Load() {
				return location.GoneMember{MemberID: "m1", Node: "workflow-a", LeftAtUnixMs: 1}, true, nil
			}
			return location.GoneMember{}, false, nil
		})
	require.Eventually(t, func() bool { return probes.Load() >= 3 }, 5*time.Second, 5*time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("fenced while not gone: %v", r.err)
	default:
	}
	gone.Store(true)
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrEvicted)
		require.NotErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, "workflow-a")
		require.Equal(t, FenceEvicted, FenceReason(r.err), "counted as")
	case <-time.After(5 * time.Second):
		t.Fatal("no fence after the member was recorded gone")
	}
}

// fakeClock is a monotonic clock that only the test moves.
type fakeClock struct{ at atomic.Int64 }

func newFakeClock() *fakeClock { return &fakeClock{} }

var clockBase = time.Now()

func (c *fakeClock) now() time.Time          { return clockBase.Add(time.Duration(c.at.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.at.Add(int64(d)) }

// decisions records what the watch decided, in order.
type decisions struct {
	suspended, resumed atomic.Int32
	lastOutage         atomic.Int64
}

func (d *decisions) wire(cfg *SelfFenceConfig) {
	cfg.onSuspend = func(error) { d.suspended.Add(1) }
	cfg.onResume = func(outage time.Duration, suspended bool) {
		if suspended {
			d.resumed.Add(1)
			d.lastOutage.Store(int64(outage))
		}
	}
}

// A store that stops answering while the process runs suspends the
// member once the lease ran out since the last successful read, not
// before, and never fences it: the watch goes on reading.
func TestWatchSelfSuspendsWhenTheStoreDoesNotAnswer(t *testing.T) {
	const lease = 3 * time.Second
	clock := newFakeClock()
	var d decisions
	var failedFor atomic.Int64
	boom := errors.New("i/o timeout")
	cfg := SelfFenceConfig{Lease: lease, Interval: time.Millisecond, now: clock.now}
	d.wire(&cfg)
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := runWatch(c, cfg, func(context.Context) (location.GoneMember, bool, error) {
		// Each failed read takes 100ms of the (fake) clock.
		clock.advance(100 * time.Millisecond)
		if failedFor.Add(int64(100*time.Millisecond)) <= int64(lease) {
			require.Zero(t, d.suspended.Load(), "suspended before the lease ran out")
		}
		return location.GoneMember{}, false, boom
	})
	require.Eventually(t, func() bool { return d.suspended.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return failedFor.Load() > int64(3*lease) }, 5*time.Second, time.Millisecond,
		"the watch keeps reading while suspended")
	require.EqualValues(t, 1, d.suspended.Load(), "suspended once")
	select {
	case r := <-res:
		t.Fatalf("a stalled store fenced the member: %v", r.err)
	default:
	}
}

// A suspended member whose store answers again, and that is not recorded
// gone, resumes with the outage measured; recorded gone, it fences.
func TestWatchSelfResumesOrFencesWhenTheStoreAnswersAgain(t *testing.T) {
	for _, recorded := range []bool{false, true} {
		t.Run(map[bool]string{false: "not recorded gone", true: "recorded gone"}[recorded], func(t *testing.T) {
			const lease = 2 * time.Second
			clock := newFakeClock()
			var d decisions
			var down, gone atomic.Bool
			down.Store(true)
			cfg := SelfFenceConfig{Lease: lease, Interval: time.Millisecond, now: clock.now}
			d.wire(&cfg)
			c, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := runWatch(c, cfg, func(context.Context) (location.GoneMember, bool, error) {
				clock.advance(100 * time.Millisecond)
				switch {
				case down.Load():
					return location.GoneMember{}, false, errors.New("connection refused")
				case gone.Load():
					return location.GoneMember{MemberID: "m1", Node: "workflow-a", LeftAtUnixMs: 1}, true, nil
				}
				return location.GoneMember{}, false, nil
			})
			require.Eventually(t, func() bool { return d.suspended.Load() == 1 }, 5*time.Second, time.Millisecond)
			gone.Store(recorded)
			down.Store(false)
			if recorded {
				select {
				case r := <-res:
					require.ErrorIs(t, r.err, ErrEvicted)
				case <-time.After(5 * time.Second):
					t.Fatal("a suspended member recorded gone did not fence")
				}
				require.Zero(t, d.resumed.Load(), "it never served again")
				return
			}
			require.Eventually(t, func() bool { return d.resumed.Load() == 1 }, 5*time.Second, time.Millisecond)
			require.Greater(t, time.Duration(d.lastOutage.Load()), lease, "the outage is measured from the last good read")
			select {
			case r := <-res:
				t.Fatalf("fenced after resuming: %v", r.err)
			default:
			}
		})
	}
}

// A process that did not run for longer than the lease fences itself the
// moment it runs again, before it reads anything, although every read it
// made succeeded: it may have been recorded gone and taken over meanwhile.
// A gap shorter than the lease does not.
func TestWatchSelfFencesAfterAPauseLongerThanTheLease(t *testing.T) {
	const lease = 3 * time.Second
	clock := newFakeClock()
	var d decisions
	var probes, pausedAt atomic.Int32
	var pause atomic.Int64
	cfg := SelfFenceConfig{Lease: lease, Interval: time.Millisecond, now: clock.now}
	d.wire(&cfg)
	res := runWatch(ctx(t), cfg, func(context.Context) (location.GoneMember, bool, error) {
		n := probes.Add(1)
		if p := pause.Swap(0); p > 0 {
			// The process stops between this read and the next step.
			clock.advance(time.Duration(p))
			pausedAt.Store(n)
		}
		return location.GoneMember{}, false, nil
	})
	require.Eventually(t, func() bool { return probes.Load() >= 3 }, 5*time.Second, time.Millisecond)
	pause.Store(int64(lease - 500*time.Millisecond))
	require.Eventually(t, func() bool { return pausedAt.Load() > 0 && probes.Load() > pausedAt.Load()+2 }, 5*time.Second, time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("a pause shorter than the lease fenced: %v", r.err)
	default:
	}
	pausedAt.Store(0)
	pause.Store(int64(lease + time.Second))
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, "did not run")
		require.Equal(t, pausedAt.Load(), probes.Load(), "no read after the pause")
		require.Equal(t, FenceLeaseExpired, FenceReason(r.err), "counted as")
	case <-time.After(5 * time.Second):
		t.Fatal("a pause longer than the lease did not fence")
	}
	require.Zero(t, d.suspended.Load(), "a pause is no stall")
}

// A pause that outlasts the lease while the store is down fences too:
// the process cannot know what happened while it did not run.
func TestWatchSelfFencesAfterAPauseWhileSuspended(t *testing.T) {
	const lease = 2 * time.Second
	clock := newFakeClock()
	var d decisions
	var pause atomic.Int64
	cfg := SelfFenceConfig{Lease: lease, Interval: time.Millisecond, now: clock.now}
	d.wire(&cfg)
	res := runWatch(ctx(t), cfg, func(context.Context) (location.GoneMember, bool, error) {
		clock.advance(100 * time.Millisecond)
		clock.advance(time.Duration(pause.Swap(0)))
		return location.GoneMember{}, false, errors.New("connection refused")
	})
	require.Eventually(t, func() bool { return d.suspended.Load() == 1 }, 5*time.Second, time.Millisecond)
	pause.Store(int64(lease + time.Second))
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, "did not run")
		require.Equal(t, FenceLeaseExpired, FenceReason(r.err), "counted as")
	case <-time.After(5 * time.Second):
		t.Fatal("a pause while suspended did not fence")
	}
}

// A probe that hangs is as good as a failed one: its bound keeps the
// loop's steps within the lease, so the member suspends and does not
// mistake the hang for a pause.
func TestWatchSelfSuspendsWhenTheStoreHangs(t *testing.T) {
	var d decisions
	cfg := SelfFenceConfig{Lease: 200 * time.Millisecond, Interval: 10 * time.Millisecond}
	d.wire(&cfg)
	res := runWatch(ctx(t), cfg, func(c context.Context) (location.GoneMember, bool, error) {
		<-c.Done()
		return location.GoneMember{}, false, c.Err()
	})
	require.Eventually(t, func() bool { return d.suspended.Load() == 1 }, 5*time.Second, time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("a hanging store fenced: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}
}

// The lookup's side: a paused watch makes Suspended true before the
// watch runs again; a suspended one until it resumes.
func TestWatchStateReportsAPauseBeforeTheWatchRuns(t *testing.T) {
	var w watchState
	require.False(t, w.paused(), "no watch, no pause")
	w.start(50 * time.Millisecond)
	w.ran(time.Now())
	require.False(t, w.paused())
	require.Eventually(t, w.paused, time.Second, time.Millisecond)
	w.ran(time.Now())
	require.False(t, w.paused())
	w.stop()
	require.Never(t, w.paused, 150*time.Millisecond, time.Millisecond, "a stopped watch reports nothing")
}

// Failures shorter than the lease, with successful reads between them,
// never fence: a Redis restart is ridden out.
func TestWatchSelfRidesOutShortOutages(t *testing.T) {
	const lease = 400 * time.Millisecond
	var n atomic.Int32
	c, cancel := context.WithTimeout(context.Background(), 4*lease)
	defer cancel()
	res := runWatch(c, SelfFenceConfig{Lease: lease, Interval: 10 * time.Millisecond},
		func(context.Context) (location.GoneMember, bool, error) {
			// Ten failures (about 100 ms), then one success, over and over.
			if n.Add(1)%11 != 0 {
				return location.GoneMember{}, false, errors.New("LOADING")
			}
			return location.GoneMember{}, false, nil
		})
	r := <-res
	require.NoError(t, r.err, "fenced although every outage was shorter than the lease")
	require.Greater(t, n.Load(), int32(30), "the watch kept reading")
}

func TestSelfFenceConfigDefaults(t *testing.T) {
	c := SelfFenceConfig{}.withDefaults()
	require.Equal(t, 10*time.Second, c.Lease)
	require.Equal(t, 500*time.Millisecond, c.Interval)
	c = SelfFenceConfig{Lease: 100 * time.Millisecond, Interval: time.Second}.withDefaults()
	require.Equal(t, 50*time.Millisecond, c.Interval, "a check at least twice per lease")
}

// A process paused between its join and the watch's first step fences
// on the gap too: the watch counts from Since, not from its own start.
func TestWatchSelfFencesOnAPauseBeforeItsFirstStep(t *testing.T) {
	const lease = 3 * time.Second
	clock := newFakeClock()
	var d decisions
	var probes atomic.Int32
	cfg := SelfFenceConfig{Lease: lease, Interval: time.Millisecond, now: clock.now, Since: clock.now()}
	d.wire(&cfg)
	clock.advance(lease + time.Second)
	res := runWatch(ctx(t), cfg, func(context.Context) (location.GoneMember, bool, error) {
		probes.Add(1)
		return location.GoneMember{MemberID: "m", Node: "n"}, true, nil
	})
	select {
	case r := <-res:
		require.ErrorIs(t, r.err, ErrLeaseExpired)
		require.ErrorContains(t, r.err, "did not run")
		require.Zero(t, probes.Load(), "fenced on the gap, before reading anything")
	case <-time.After(5 * time.Second):
		t.Fatal("a pause before the first step did not fence")
	}

	// Counted from the watch's own start, the same pause goes unseen and
	// the gone record decides instead.
	cfg.Since = time.Time{}
	res = runWatch(ctx(t), cfg, func(context.Context) (location.GoneMember, bool, error) {
		return location.GoneMember{MemberID: "m", Node: "n"}, true, nil
	})
	r := <-res
	require.ErrorIs(t, r.err, ErrEvicted)
}
