package placement

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
)

// A link that drops silently (a partition that drops packets, a host that
// lost power) breaks no connection: remoting keeps writing into it, and
// the membership provider drops the member only after its health-check
// timeout. Until then every call to that member would wait out its whole
// deadline and answer 504. So a call left unanswered for linkProbeAfter
// has the owner's address dialled; when no TCP connection opens within
// reachDialTimeout the link is down: the calls waiting on it answer
// ErrOwnerUnreachable at once (the member is still in the topology and
// not recorded gone), new calls to it answer so before anything is sent,
// and cold starts try that member last. A background dial every
// linkRecheck lifts the verdict once a connection opens again, or once
// the member left the topology (the gone judging takes over from there).
//
// A member that is only slow or frozen (overload, a GC pause, SIGSTOP)
// is not down: its kernel still completes the handshake, so its calls
// keep waiting for their deadline, as before. The verdict is this
// process's alone; it changes no topology, no eligibility elsewhere and
// no record.
const (
	// linkProbeAfter is how long a call waits for its reply before its
	// owner's link is checked: well above a healthy call's latency, so
	// that a loaded cluster dials little, and well below any deadline.
	linkProbeAfter = 500 * time.Millisecond
	// linkUpFor is how long a dial that opened stands for the calls that
	// come after it, so that many slow calls to one member dial it once.
	linkUpFor = linkProbeAfter
	// linkRecheck is how often a link found down is dialled again.
	linkRecheck = 250 * time.Millisecond
)

// linkState holds the lookup's verdicts by address.
type linkState struct {
	// down counts the verdicts that found a link down and still stand,
	// so that linkDown, asked before every remote call, costs one atomic
	// load while every link is up.
	down   atomic.Int32
	mu     sync.Mutex
	byAddr map[string]*linkProbe
}

// linkProbe is one address's verdict: done is closed once the dial that
// gives it ended; down and at are set before that.
type linkProbe struct {
	done chan struct{}
	down bool
	at   time.Time
}

// linkDown reports whether the link to addr was found down and has not
// been found up since. It costs one map lookup; no dial.
func (l *Lookup) linkDown(addr string) bool {
	if l.links.down.Load() == 0 {
		return false
	}
	l.links.mu.Lock()
	defer l.links.mu.Unlock()
	p, ok := l.links.byAddr[addr]
	if !ok {
		return false
	}
	select {
	case <-p.done:
		return p.down
	default:
		return false
	}
}

// probeLink returns a channel closed once the link to addr has a verdict
// no older than linkUpFor, and a function that reads it. Concurrent
// callers share one dial.
func (l *Lookup) probeLink(addr string) (<-chan struct{}, func() bool) {
	l.links.mu.Lock()
	defer l.links.mu.Unlock()
	if l.links.byAddr == nil {
		l.links.byAddr = map[string]*linkProbe{}
	}
	if p, ok := l.links.byAddr[addr]; ok {
		select {
		case <-p.done:
			if p.down || time.Since(p.at) < linkUpFor {
				return p.done, func() bool { return p.down }
			}
		default:
			return p.done, func() bool { return p.down }
		}
	}
	p := &linkProbe{done: make(chan struct{})}
	l.links.byAddr[addr] = p
	go l.dialLink(addr, p)
	return p.done, func() bool { return p.down }
}

// dialLink gives p its verdict; a link found down is dialled again until
// it opens, the member leaves the topology, or the lookup stops.
func (l *Lookup) dialLink(addr string, p *linkProbe) {
	p.down, p.at = !l.dialable(addr), time.Now()
	if p.down {
		l.links.down.Add(1)
		defer l.links.down.Add(-1)
	}
	close(p.done)
	if !p.down {
		return
	}
	l.log.Warn("a member in the topology takes no connection from here: its calls answer OWNER_UNREACHABLE until it does",
		slog.String("address", addr))
	for {
		select {
		case <-l.stop:
			return
		case <-time.After(linkRecheck):
		}
		l.mu.Lock()
		_, live := l.byAddress[addr]
		l.mu.Unlock()
		up := live && l.dialable(addr)
		if up || !live || l.stopped() {
			l.links.mu.Lock()
			if l.links.byAddr[addr] == p {
				delete(l.links.byAddr, addr)
			}
			l.links.mu.Unlock()
			if up {
				l.log.Info("a member's link that was down takes connections again", slog.String("address", addr))
			}
			return
		}
	}
}

// downLinksLast returns ms rotated to start at index start, with the
// members whose link is down moved to the end, in order: a cold start
// tries them only when every other member refused.
func (l *Lookup) downLinksLast(ms []*pcluster.Member, start int) []*pcluster.Member {
	out := make([]*pcluster.Member, 0, len(ms))
	var down []*pcluster.Member
	for i := range ms {
		m := ms[(start+i)%len(ms)]
		if m.Address() != l.selfAddress() && l.linkDown(m.Address()) {
			down = append(down, m)
			continue
		}
		out = append(out, m)
	}
	return append(out, down...)
}
