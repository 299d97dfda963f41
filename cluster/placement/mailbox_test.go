package placement

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	}, actor.WithDispatcher(hostDispatcher), actor.WithMailbox(hostMailbox(sys, 4, nil)))
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
	}, actor.WithDispatcher(hostDispatcher), actor.WithMailbox(hostMailbox(sys, 4, nil)))
	pid := sys.Root.Spawn(props)
	for _, m := range []string{"a", "b", "c"} {
		res, err := sys.Root.RequestFuture(pid, m, 5*time.Second).Result()
		require.NoError(t, err)
		require.Equal(t, m+"!", res)
	}
}

// blockingGrain is an actor whose first "block" request holds its turn
// until release is closed, so that what follows queues.
type blockingGrain struct {
	blocked, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	seen             []string // every user message handled, in order
}

func newBlockingGrain() *blockingGrain {
	return &blockingGrain{blocked: make(chan struct{}), release: make(chan struct{})}
}

func (g *blockingGrain) receive(c actor.Context) {
	s, ok := c.Message().(string)
	if !ok {
		return
	}
	g.mu.Lock()
	g.seen = append(g.seen, s)
	g.mu.Unlock()
	if s == "block" {
		g.once.Do(func() { close(g.blocked) })
		<-g.release
	}
	if c.Sender() != nil {
		c.Respond("done " + s)
	}
}

func (g *blockingGrain) handled() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// With room for capacity requests, the one after them is answered
// Overloaded at once, without waiting for the grain, and never reaches
// it; those queued are all served once the grain moves on. Messages that
// are not requests (the grain's own steps and timers) are queued however
// full the mailbox is, and system messages still reach the grain.
func TestFullMailboxAnswersOverloadedAtOnce(t *testing.T) {
	const capacity = 3
	sys := actor.NewActorSystem()
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})
	g := newBlockingGrain()
	pid := sys.Root.Spawn(actor.PropsFromFunc(g.receive, actor.WithDispatcher(hostDispatcher),
		actor.WithMailbox(hostMailbox(sys, capacity, refused))))

	running := sys.Root.RequestFuture(pid, "block", 10*time.Second)
	<-g.blocked
	var queued []*actor.Future
	for i := range capacity {
		queued = append(queued, sys.Root.RequestFuture(pid, fmt.Sprintf("q%d", i), 10*time.Second))
	}
	start := time.Now()
	res, err := sys.Root.RequestFuture(pid, "one-too-many", 10*time.Second).Result()
	require.NoError(t, err)
	require.IsType(t, &Overloaded{}, res, "the request beyond the capacity is answered Overloaded")
	require.Less(t, time.Since(start), time.Second, "answered at once, while the grain is still busy")
	require.Equal(t, 1.0, counterValue(t, refused))

	// Not requests: queued, full or not.
	for i := range 5 {
		sys.Root.Send(pid, fmt.Sprintf("tick%d", i))
	}
	// A system message: Stop overtakes the queue once the turn ends.
	watcher := make(chan struct{})
	sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started:
			c.Watch(pid)
		case *actor.Terminated:
			close(watcher)
		}
	}))
	close(g.release)

	r, err := running.Result()
	require.NoError(t, err)
	require.Equal(t, "done block", r)
	for i, f := range queued {
		r, err := f.Result()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("done q%d", i), r)
	}
	require.Eventually(t, func() bool { return len(g.handled()) == 1+capacity+5 }, 5*time.Second, time.Millisecond,
		"every queued request and every tick reaches the grain: %v", g.handled())
	require.NotContains(t, g.handled(), "one-too-many", "a refused request never reaches the grain")

	require.NoError(t, sys.Root.StopFuture(pid).Wait())
	select {
	case <-watcher:
	case <-time.After(5 * time.Second):
		t.Fatal("the Stop and the Terminated (system messages) did not get through")
	}
}

// Many callers at once: the queue never holds more requests than the
// capacity, every request is answered exactly once (served or refused,
// none left to time out), and the grain serves each served one once.
func TestMailboxCapHoldsUnderConcurrentSenders(t *testing.T) {
	const (
		capacity = 8
		senders  = 32
		each     = 100
	)
	sys := actor.NewActorSystem()
	var box atomic.Pointer[bouncingMailbox]
	produce := hostMailbox(sys, capacity, nil)
	var served sync.Map
	var servedTwice atomic.Int32
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		s, ok := c.Message().(string)
		if !ok {
			return
		}
		if _, dup := served.LoadOrStore(s, true); dup {
			servedTwice.Add(1)
		}
		// A turn that takes a little while, so the queue fills.
		time.Sleep(20 * time.Microsecond)
		c.Respond("ok " + s)
	}, actor.WithDispatcher(hostDispatcher), actor.WithMailbox(func() actor.Mailbox {
		m := produce()
		box.Store(m.(*bouncingMailbox))
		return m
	})))

	stop := make(chan struct{})
	var maxQueued atomic.Int32
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := int32(box.Load().UserMessageCount()); n > maxQueued.Load() {
				maxQueued.Store(n)
			}
		}
	}()

	var ok, overloaded, other atomic.Int32
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// In bursts of a few, so that the queue both fills and drains.
			const burst = 4
			futures := make([]*actor.Future, 0, each)
			for i := range each {
				futures = append(futures, sys.Root.RequestFuture(pid, fmt.Sprintf("s%d-%d", s, i), 30*time.Second))
				if (i+1)%burst == 0 {
					_, _ = futures[i].Result()
				}
			}
			for i, f := range futures {
				res, err := f.Result()
				switch {
				case err != nil:
					other.Add(1)
					t.Errorf("request %d of sender %d: %v", i, s, err)
				case res == fmt.Sprintf("ok s%d-%d", s, i):
					ok.Add(1)
				case isOverloaded(res):
					overloaded.Add(1)
				default:
					other.Add(1)
					t.Errorf("request %d of sender %d: unexpected reply %#v", i, s, res)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled

	n := 0
	served.Range(func(any, any) bool { n++; return true })
	t.Logf("%d served, %d refused Overloaded, deepest queue %d (capacity %d)", ok.Load(), overloaded.Load(), maxQueued.Load(), capacity)
	require.Zero(t, other.Load())
	require.Equal(t, int32(senders*each), ok.Load()+overloaded.Load(), "every request answered once")
	require.Equal(t, int(ok.Load()), n, "the grain served exactly the requests answered as served")
	require.Zero(t, servedTwice.Load())
	require.Positive(t, overloaded.Load(), "the load filled the mailbox")
	require.LessOrEqual(t, maxQueued.Load(), int32(capacity), "the queue never held more than the capacity")
	require.Zero(t, box.Load().queued.Load(), "every place taken was given back")
}

func isOverloaded(res any) bool {
	_, ok := res.(*Overloaded)
	return ok
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
