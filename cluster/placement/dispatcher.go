package placement

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// The dispatcher of the actors this package hosts (the activator and
// every grain it spawns). protoactor's default dispatcher starts a new
// goroutine each time a mailbox has messages; a grain's turn goes deep
// (workflow, stores, go-redis), so every such goroutine grows its stack
// from the minimum, and the copying showed as a tenth of a workflow
// member's CPU. This one hands the mailbox run to an idle worker whose
// stack has grown already, and starts a goroutine only when none is idle,
// so a run never waits for another to end: the same scheduling protoactor
// promises, minus the stack growth.

// dispatcherThroughput is protoactor's default: messages a mailbox
// processes before it yields.
const dispatcherThroughput = 300

// workerIdle is how long a worker waits for a run before it exits: long
// enough to outlive the gaps of a steady load, short enough that a burst's
// extra workers do not linger.
const workerIdle = 10 * time.Second

type reuseDispatcher struct {
	runs chan func()
}

var _ actor.Dispatcher = (*reuseDispatcher)(nil)

// hostDispatcher is shared by every actor of the process this package
// spawns: one pool of warm workers.
var hostDispatcher = &reuseDispatcher{runs: make(chan func())}

// Schedule runs fn on an idle worker if one is waiting, else on a new
// goroutine that then stays as a worker.
func (d *reuseDispatcher) Schedule(fn func()) {
	select {
	case d.runs <- fn:
	default:
		go d.work(fn)
	}
}

func (d *reuseDispatcher) Throughput() int { return dispatcherThroughput }

func (d *reuseDispatcher) work(fn func()) {
	fn()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case fn := <-d.runs:
			fn()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		}
	}
}
